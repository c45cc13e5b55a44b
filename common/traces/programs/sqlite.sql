-- sqlite3 loading and indexing rows, for `make trace`: 60 000 rows in one transaction, two
-- indexes, then queries that sort and group. In memory, so the trace is the library's work alone.
CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, category INTEGER, price REAL, note TEXT);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60000)
INSERT INTO item(name, category, price, note)
SELECT printf('item-%06d', (i * 7919) % 60000), i % 97, (i * 31 % 1000) / 10.0,
       substr('lorem ipsum dolor sit amet consectetur adipiscing elit', 1 + i % 20, 10 + i % 40)
FROM n;
COMMIT;
CREATE INDEX item_name ON item(name);
CREATE INDEX item_category_price ON item(category, price);
SELECT category, count(*), round(avg(price), 2) FROM item GROUP BY category ORDER BY 3 DESC LIMIT 3;
SELECT count(DISTINCT note) FROM item;
SELECT name FROM item WHERE name LIKE 'item-0001%' ORDER BY name LIMIT 3;
DELETE FROM item WHERE category < 40;
VACUUM;
SELECT count(*) FROM item;

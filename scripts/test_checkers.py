#!/usr/bin/env python3
"""The test of the book's checkers: each one must fail on a page made false on purpose.

Copies the repository's tracked files into a temporary folder, checks that the copy passes, then
makes one falsehood at a time in a fresh copy and checks that `scripts/check_docs.py` or
`scripts/results.py --check` fails and names it:
  - a sentence: a rendered comparison ("ahead of" turned into "behind"), a new run whose data
    flips a comparison, a comparison typed by hand, a number edited by hand, an "article NNN"
    that links nowhere;
  - a snippet: a line of a quoted snippet edited in the chapter, the source changed under a
    snippet, a block of code that is in no source file, a file grown under its quoted length, a
    comment turned into code under a quoted count of lines of code;
  - a plot: an embed of a plot that does not exist, a plot no chapter shows any more;
  - a perf excerpt: a row of a chapter's excerpt edited, the excerpt file changed under the
    chapter, an excerpt file removed, perf output pasted into a chapter by hand.
Run by `make test` as the test `docs_checkers_catch_falsehoods`.
"""
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.split()
    return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
            if p.is_file() and "build" not in p.relative_to(ROOT).parts
            and ".git" not in p.relative_to(ROOT).parts]


class Copy:
    """A copy of the repository (tracked files only, no .git) to make false."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="tierpool-checkers-"))
        for f in tracked_files():
            src = ROOT / f
            if src.is_file():
                dest = self.dir / f
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)

    def edit(self, path, old, new, count=1):
        p = self.dir / path
        text = p.read_text()
        if old not in text:
            raise AssertionError(f"{path} no longer contains {old!r}: update the test")
        p.write_text(text.replace(old, new, count))

    def regex_edit(self, path, pattern, new):
        p = self.dir / path
        text, n = re.subn(pattern, new, p.read_text(), count=1, flags=re.S)
        if n != 1:
            raise AssertionError(f"{path} has nothing matching {pattern!r}: update the test")
        p.write_text(text)

    def run(self, *args):
        out = subprocess.run([PYTHON, *args], cwd=self.dir, capture_output=True, text=True)
        return out.returncode, out.stdout + out.stderr

    def check_docs(self):
        return self.run("scripts/check_docs.py")

    def check_results(self):
        return self.run("scripts/results.py", "--check")

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class CheckersCatchFalsehoods(unittest.TestCase):
    def setUp(self):
        self.copy = Copy()

    def tearDown(self):
        self.copy.remove()

    def assertFails(self, result, message):
        code, out = result
        self.assertNotEqual(code, 0, f"the checker passed; expected it to say {message!r}:\n{out}")
        self.assertIn(message, out)

    # The unchanged copy passes, or every other test proves nothing.
    def test_the_copy_as_it_is_passes(self):
        code, out = self.copy.check_docs()
        self.assertEqual(code, 0, out)
        code, out = self.copy.check_results()
        self.assertEqual(code, 0, out)

    # Two rows of one median: the tables are written in one order, whatever the process's string
    # hashing (a set's order), or a fresh clone's check fails on a tie the writer ordered the
    # other way (it did: two peers at 150.5 ns in false-share-active).
    def test_a_tie_is_rendered_in_one_order(self):
        path = self.copy.dir / "docs/results/results.csv"
        with path.open() as f:
            rows = list(csv.DictReader(f))
            fields = rows[0].keys()
        tied = [r for r in rows if r["workload"] == "step06/rational" and r["threads"] == "1"]
        self.assertGreater(len(tied), 2, "step06/rational has too few rows to tie")
        for r in tied:
            r["ns_per_pair"] = "5.000"
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run([PYTHON, "scripts/results.py"], cwd=self.copy.dir, env=env,
                       capture_output=True, check=True)
        for seed in ("1", "2", "3", "4", "5"):
            env["PYTHONHASHSEED"] = seed
            out = subprocess.run([PYTHON, "scripts/results.py", "--check"], cwd=self.copy.dir,
                                 env=env, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, f"hash seed {seed}: {out.stdout}")

    # Sentences.
    W3_CLAIM = "<!--v cmp step06/mt512@4 mimalloc step06-tierpool-->"

    def w3_claim(self):
        """The chapter's rendered words for mimalloc against step 06 on W3, whatever the last run
        made them."""
        text = (self.copy.dir / "step06-three-tier/README.md").read_text()
        return re.search(re.escape(self.W3_CLAIM) + r"([^<]*)<!--/v-->", text).group(1)

    def test_a_comparison_made_false_fails(self):
        other = "ahead of" if self.w3_claim() != "ahead of" else "behind"
        self.copy.regex_edit("step06-three-tier/README.md",
                             "(" + re.escape(self.W3_CLAIM) + ")[^<]*", r"\g<1>" + other)
        self.assertFails(self.copy.check_results(), "claim changed")

    def test_a_new_run_that_flips_a_comparison_names_it(self):
        # A run in which mimalloc is ten times slower on W3 than step 06 (or ten times faster, if
        # the chapter already says "behind"): the chapter's words must flip, and be named.
        claim = self.w3_claim()
        csv = (self.copy.dir / "docs/results/results.csv").read_text()
        ours = float(re.search(r"step06/mt512,step06-tierpool,4,([0-9.]+)", csv).group(1))
        theirs = ours / 10 if claim == "behind" else ours * 10
        self.copy.regex_edit("docs/results/results.csv", r"(step06/mt512,mimalloc,4,)[0-9.]+",
                             rf"\g<1>{theirs:.3f}")
        self.assertFails(self.copy.check_results(), "claim changed: step06-three-tier/README.md: "
                         f"{self.W3_CLAIM} was '{claim}'")

    def test_a_comparison_typed_by_hand_fails(self):
        self.copy.edit("step05-tls-global/README.md", "## The numbers",
                       "This pool is ahead of mimalloc at every thread count.\n\n## The numbers")
        self.assertFails(self.copy.check_docs(), "a comparison typed by hand")

    def test_a_number_edited_by_hand_fails(self):
        self.copy.regex_edit("step01-rational-freelist/README.md",
                             r"(<!--v ns step01/rational glibc-->)[^<]*", r"\g<1>4.20")
        self.assertFails(self.copy.check_results(), "stale generated block")

    def test_an_article_that_links_nowhere_fails(self):
        self.copy.edit("docs/fuzzing.md", "\n", "\nThe targets follow article 003.\n")
        self.assertFails(self.copy.check_docs(), "'article 003' is not a link")

    # Snippets.
    def test_a_snippet_edited_in_the_chapter_fails(self):
        self.copy.edit("step02-template-pool/README.md", "  carve_ += block_size_;\n",
                       "  carve_ += block_size_;\n  carve_ += block_size_;\n")
        self.assertFails(self.copy.check_docs(), "a snippet differs from its source")

    def test_the_source_changed_under_a_snippet_fails(self):
        self.copy.edit("step01-rational-freelist/rational.h", "    freeList = head->next;",
                       "    freeList = head->next;  // popped")
        self.assertFails(self.copy.check_docs(), "a snippet differs from its source")

    def test_a_file_grown_under_its_quoted_line_count_fails(self):
        self.copy.edit("step05-tls-global/global_pool.h", "#pragma once\n",
                       "#pragma once\n// one line more\n")
        self.assertFails(self.copy.check_docs(), "a quoted line count differs from its file")

    def test_a_comment_turned_into_code_under_a_quoted_code_line_count_fails(self):
        # The same number of lines, one more of them code: only the count of code lines moves.
        self.copy.regex_edit("step05-tls-global/global_pool.h", r"\n// [^\n]*\n#pragma once\n",
                             "\nstatic_assert(true);\n#pragma once\n")
        self.assertFails(self.copy.check_docs(), "a quoted line count differs from its file")

    def test_code_that_is_in_no_source_fails(self):
        self.copy.edit("step06-three-tier/README.md", "## The numbers",
                       "```cpp\nvoid* third = LoadNext(ptr);\n```\n\n## The numbers")
        self.assertFails(self.copy.check_docs(), "a block of code that is not in the source")

    # Plots.
    def test_an_embed_of_a_missing_plot_fails(self):
        self.copy.edit("step04-multithread/README.md", "step04_mt512.png", "step04_mt521.png")
        self.assertFails(self.copy.check_docs(), "embeds missing plot")

    def test_a_plot_no_chapter_shows_fails(self):
        self.copy.regex_edit("step01-rational-freelist/README.md",
                             r"!\[[^\]]*\]\(\.\./docs/results/step01_rational\.png\)\n", "")
        self.assertFails(self.copy.check_docs(), "step01_rational.png: embedded in no chapter")


    # Perf excerpts: one the step 06 chapter shows.
    EXCERPT = "docs/results/perf/step06-three-tier.refill.txt"

    def test_a_perf_excerpt_edited_in_the_chapter_fails(self):
        # The first percentage of the excerpt as the chapter shows it, made 99.99%.
        self.copy.regex_edit("step06-three-tier/README.md",
                             r"(<!-- perf " + re.escape(self.EXCERPT) + r" -->\n```text\n.*?)"
                             r"[0-9]+\.[0-9]+%", r"\g<1>99.99%")
        self.assertFails(self.copy.check_docs(), "a perf excerpt differs from its file")

    def test_a_perf_excerpt_falsified_under_the_chapter_fails(self):
        self.copy.regex_edit(self.EXCERPT, r"[0-9]+\.[0-9]+%", "99.99%")
        self.assertFails(self.copy.check_docs(), "a perf excerpt differs from its file")

    def test_a_missing_perf_excerpt_fails(self):
        (self.copy.dir / self.EXCERPT).unlink()
        self.assertFails(self.copy.check_docs(), "step06-three-tier.refill.txt is missing")

    def test_perf_output_pasted_by_hand_fails(self):
        self.copy.edit("step05-tls-global/README.md", "## Debugging with this pool",
                       "```\n    43.12%  [.] tierpool::ConcurrentFree\n```\n\n"
                       "## Debugging with this pool")
        self.assertFails(self.copy.check_docs(), "perf output pasted by hand")


if __name__ == "__main__":
    unittest.main(verbosity=2)

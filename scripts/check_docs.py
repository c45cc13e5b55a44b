#!/usr/bin/env python3
"""The docs test: what a reader follows in the Markdown must exist.

Checks every tracked .md file of the repository:
  - every relative link resolves to a file (and, for `file.md#anchor`, to one of its headings);
  - every `make <target>` names a target of the Makefile, and every STEP=/A=/B= a step folder;
  - every `scripts/<file>` and `stepNN-*/<file>` path written in the text exists;
  - every chapter (stepNN-*/README.md) has the sections a chapter promises: the design, the key
    code, the numbers, the perf report, debugging, what is still wrong, and exercises;
  - every C/C++/CMake block of code in a chapter or a page of docs/ is the source's own text:
    either a snippet extracted from the source (see SNIPPET below: `--write` copies it in, the
    check fails when the block differs from the source) or, where the block is not marked, each
    of its pieces (split at `// ...` lines) appears, line for line, in a source file; a block
    that is not a quote of the source (code a reader types, an outline of an interface) says so
    with `<!-- example -->` above it;
  - every "article NNN" in the prose is a link (to docs/references.md, where the article's entry
    is), and nothing points to a specification outside the repository ("SPEC §");
  - no comparison is typed by hand: "ahead of", "level with" or "behind" an allocator is a
    rendered `cmp` value (scripts/results.py), unless its sentence quotes an article or a
    result recorded at a named commit;
  - every perf excerpt shown is the file `make perf` wrote (see PERF below: `--write` copies it
    in, the check fails when the block differs from the file or the file is missing), and no
    page shows perf output pasted by hand (a `perf report`, `perf diff` or `perf annotate` row
    in a block of code that is not a generated block);
  - every plot embedded (`![...](....png)`) exists; every plot in docs/results/ is embedded in
    docs/results/README.md and in at least one other page (a chapter or the README), and every
    chapter embeds at least one plot;
  - with --bench-dir (the built benchmarks): every benchmark command shown still selects what it
    says, i.e. each `--benchmark_filter=`, `FILTER=` (of `make perf` and `make bench`) and
    `--tierpool_count=` in the
    docs matches at least one entry of that step's benchmark binary.
Exit 1 with one line per problem. (Numbers are checked by `scripts/results.py --check`.)

SNIPPET: in a source file, a region between two comment lines

    // [snippet:carve-block]
    ...code...
    // [/snippet]

is quoted by a chapter as

    <!-- snippet memory_pool.h#carve-block -->
    ```cpp
    ...the same code, its common indentation removed...
    ```
    <!-- /snippet -->

(the path relative to the Markdown file). `scripts/check_docs.py --write` refreshes every such
block from its source.

PERF: an excerpt of a profile, written by `make perf` into docs/results/perf/ (stamped with the
machine, the commit and the command; scripts/perf_excerpt.py), is shown as

    <!-- perf docs/results/perf/step01-rational-freelist.txt -->
    ```text
    ...the file's text...
    ```
    <!-- /perf -->

(the path relative to the repository); `--write` refreshes every such block from its file.

LINES: a file's length quoted in a sentence is written `<!--lines object_pool.h-->432<!--/lines-->`
(the path relative to the Markdown file), its lines of code (lines that are neither blank nor only
a comment) `<!--codelines object_pool.h-->198<!--/codelines-->`; `--write` counts them again.
"""
import argparse
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_SECTIONS = ["design", "key code", "numbers", "perf", "debugging", "what is still wrong",
                    "exercises"]


def tracked_markdown():
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True)
    files = [ROOT / f for f in out.stdout.split()] if out.returncode == 0 else []
    # Outside a git checkout (a tarball), every .md outside build/.
    return files or [p for p in ROOT.rglob("*.md") if "build" not in p.relative_to(ROOT).parts]


def anchors(path):
    """GitHub's anchors: lower case, punctuation dropped, spaces to hyphens."""
    result = set()
    for line in path.read_text().splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            result.add(text.replace(" ", "-"))
    return result


def make_targets():
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.M))


def benchmark_commands(code):
    """(step, filter regex or None, count name or None) for every benchmark command in `code`."""
    found = []
    for line in code.replace("\\\n", " ").splitlines():
        bench = re.search(r"bench/(step0\d-[\w-]+)", line)
        perf = re.search(r"make (?:perf|bench) STEP=(step0\d-[\w-]+)", line)
        step = (bench or perf).group(1) if (bench or perf) else None
        if not step:
            continue
        try:
            words = shlex.split(line, comments=False)
        except ValueError:
            continue
        for w in (w.strip("`") for w in words):
            if w.startswith("--benchmark_filter=") or (perf and w.startswith("FILTER=")):
                found.append((step, w.split("=", 1)[1], None))
            elif w.startswith("--tierpool_count="):
                found.append((step, None, w.split("=", 1)[1]))
    return found


def check_benchmark_commands(path, code, bench_dir, problems):
    rel = path.relative_to(ROOT)
    for step, regex, count in benchmark_commands(code):
        binary = bench_dir / step
        if not binary.exists():
            problems.append(f"{rel}: shows a command on {step}, whose benchmark is not built")
            continue
        if regex is not None and ("..." in regex or "…" in regex or "<" in regex):
            continue  # a placeholder, not a command to run as it stands
        # Google Benchmark's regex is POSIX: escape only its metacharacters (not '-' or ':').
        pattern = regex if regex is not None else (
            "^" + re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", count) + "/")
        out = subprocess.run([str(binary), "--benchmark_list_tests",
                              f"--benchmark_filter={pattern}"], capture_output=True, text=True)
        if not out.stdout.strip():
            what = f"--benchmark_filter={regex}" if regex is not None else f"--tierpool_count={count}"
            problems.append(f"{rel}: `{what}` selects no entry of {step}'s benchmark")


def check_file(path, targets, steps, problems, bench_dir=None):
    rel = path.relative_to(ROOT)
    text = path.read_text()
    text = re.sub(r"<!-- results .*?<!-- /results -->", "", text, flags=re.S)
    # Commands live in code (fenced blocks and `spans`); links live in the prose around it.
    code_re = re.compile(r"```.*?```|`[^`\n]+`", re.S)
    code = "\n".join(code_re.findall(text))
    prose = code_re.sub("", text)
    if path.name != "references.md":
        for m in re.finditer(r"(?<!\[)\b[Aa]rticles?\s+(\d{3})\b(?!\]\()", prose):
            problems.append(f"{rel}: 'article {m.group(1)}' is not a link to "
                            f"docs/references.md#article-{m.group(1)}")
    for m in HAND_COMPARISON.finditer(re.sub(r"<!--v [^>]*-->[^<]*<!--/v-->", "", prose)):
        around = m.string[max(0, m.start() - 300):m.end() + 300]
        if not re.search(r"[Aa]rticle|commit [0-9a-f]{7}", around):
            line = m.string[:m.start()].count("\n") + 1
            problems.append(f"{rel}: a comparison typed by hand near line {line} "
                            f"('{m.group(0)}'): render it (`<!--v cmp ...-->`) or state none")
    if re.search(r"SPEC\s*§", prose):
        problems.append(f"{rel}: refers to 'SPEC §', outside the repository: link the page in "
                        f"docs/ instead (the bad-input table is docs/bad-input.md)")
    for link in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target, _, anchor = link.partition("#")
        dest = (path.parent / target).resolve()
        if not dest.exists():
            problems.append(f"{rel}: link to missing {link}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{rel}: link to missing heading {link}")
    for m in re.finditer(r"\bmake ([a-z][\w-]*)((?: [A-Z]+=\S+)*)", code):
        if m.group(1) not in targets:
            problems.append(f"{rel}: `make {m.group(1)}` is not a Makefile target")
        for var, value in re.findall(r"([A-Z]+)=(\S+)", m.group(2)):
            value = value.strip("`'\",.)")
            placeholder = value.startswith("<") or value in ("…", "...")
            every = m.group(1) == "perf" and var == "STEP" and value == "all"
            if var in ("STEP", "A", "B") and not placeholder and not every and value not in steps:
                problems.append(f"{rel}: `{var}={value}` is not a step folder")
    if bench_dir:
        check_benchmark_commands(path, code, bench_dir, problems)
    for p in re.findall(r"(?<![\w/.])((?:scripts|step0\d-[\w-]+|common|cmake)/[\w./-]*\w)", text):
        if "*" in p or "<" in p:
            continue
        if not (ROOT / p).exists() and not (path.parent / p).exists():
            problems.append(f"{rel}: names missing path {p}")

SNIPPET_BLOCK = re.compile(r"(<!-- snippet (?P<src>[^#\s]+)#(?P<name>[\w-]+) -->\n"
                           r"```(?P<lang>\w*)\n)"
                           r"(?P<body>.*?)(```\n<!-- /snippet -->)", re.S)
CODE_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```(?P<lang>cpp|c\+\+|c|cmake)\n(?P<body>.*?)```",
                        re.S)
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".c", ".cmake", ".in"}
ELISION = {"// ...", "// …", "...", "…", "# ..."}


PERF_BLOCK = re.compile(r"(<!-- perf (?P<src>\S+) -->\n```text\n)(?P<body>.*?)(```\n<!-- /perf -->)",
                        re.S)
# A row of `perf report` ("  43.12%  libc.so.6  [.] malloc"), of `perf diff` ("  0.33%  -0.01%
# [.] ...") or of `perf annotate` ("  50.83 :   1d969:  mov ...").
PERF_OUTPUT = re.compile(r"^[ \t]*[+-]?[0-9]+\.[0-9]+%[ \t]+(?:\S+[ \t]+)*\[[.k]\] |"
                         r"^[ \t]*[0-9]+\.[0-9]+ :[ \t]+[0-9a-f]+:[ \t]", re.M)


def refresh_perf(path, text, problems):
    """`text` with every perf block replaced by its excerpt file; a problem per missing file."""
    rel = path.relative_to(ROOT)

    def fill(m):
        excerpt = ROOT / m.group("src")
        if not excerpt.is_file():
            problems.append(f"{rel}: perf excerpt {m.group('src')} is missing (the `make perf` "
                            f"command of the page's profile writes it)")
            return m.group(0)
        return m.group(1) + excerpt.read_text() + m.group(4)
    return PERF_BLOCK.sub(fill, text)


def check_perf_pasted(path, text, problems):
    """No perf output in a block of code outside the generated perf blocks."""
    rel = path.relative_to(ROOT)
    text = PERF_BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for block in re.finditer(r"^ *```.*?^ *```", text, re.S | re.M):
        row = PERF_OUTPUT.search(block.group(0))
        if row:
            at = block.start() + row.start()
            lineno = text[:at].count("\n") + 1
            line = text[at:].split("\n", 1)[0].strip()
            problems.append(f"{rel}:{lineno}: perf output pasted by hand ("
                            f"`{line[:60]}`): show the excerpt `make perf` writes "
                            f"(a `<!-- perf docs/results/perf/<name>.txt -->` block)")


def tracked_sources():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    files = [ROOT / f for f in out.stdout.split()] if out.returncode == 0 else []
    files = files or [p for p in ROOT.rglob("*") if "build" not in p.relative_to(ROOT).parts]
    return [p for p in files if p.is_file() and (p.suffix in SOURCE_SUFFIXES
                                                 or p.name == "CMakeLists.txt")]


def extract_snippet(source, name):
    """The lines between `[snippet:name]` and the next `[/snippet]` comment, dedented; None when
    the source has no such snippet."""
    if not source.is_file():
        return None
    lines = source.read_text().splitlines()
    start = [i for i, l in enumerate(lines) if re.fullmatch(rf"\s*(//|#) \[snippet:{name}\]", l)]
    if len(start) != 1:
        return None
    body = []
    for line in lines[start[0] + 1:]:
        if re.fullmatch(r"\s*(//|#) \[/snippet\]", line):
            break
        body.append(line)
    else:
        return None
    indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
    return "".join(l[indent:].rstrip() + "\n" for l in body)


def refresh_snippets(path, text, problems):
    """`text` with every snippet block replaced by its source's region; a problem per snippet
    whose source or region is missing."""
    rel = path.relative_to(ROOT)

    def fill(m):
        code = extract_snippet(path.parent / m.group("src"), m.group("name"))
        if code is None:
            problems.append(f"{rel}: snippet {m.group('src')}#{m.group('name')} has no "
                            f"`[snippet:{m.group('name')}]` region in its source")
            return m.group(0)
        return m.group(1) + code + m.group(6)
    return SNIPPET_BLOCK.sub(fill, text)


LINES_BLOCK = re.compile(r"(?P<open><!--(?P<kind>lines|codelines) (?P<src>[^\s>]+)-->)(?P<n>\d*)"
                         r"(?P<close><!--/(?P=kind)-->)")


def code_lines(text):
    """The lines of C/C++ source `text` that are neither blank nor only a comment (`// ...`, or
    inside `/* ... */`): the lines with a character of code on them."""
    count, in_block = 0, False
    for line in text.splitlines():
        has_code, quote, i = False, None, 0
        while i < len(line):
            c, pair = line[i], line[i:i + 2]
            if in_block:
                if pair == "*/":
                    in_block, i = False, i + 1
            elif quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = None
            elif pair == "//":
                break
            elif pair == "/*":
                in_block, i = True, i + 1
            elif not c.isspace():
                has_code = True
                if c in "\"'":
                    quote = c
            i += 1
        count += has_code
    return count


def refresh_line_counts(path, text, problems):
    """`text` with every quoted line count set to its file's; a problem per missing file."""
    def fill(m):
        source = path.parent / m.group("src")
        if not source.is_file():
            problems.append(f"{path.relative_to(ROOT)}: the line count of {m.group('src')}: "
                            f"no such file")
            return m.group(0)
        content = source.read_text()
        n = len(content.splitlines()) if m.group("kind") == "lines" else code_lines(content)
        return m.group("open") + str(n) + m.group("close")
    return LINES_BLOCK.sub(fill, text)


def source_lines(cache):
    if not cache:
        for p in tracked_sources():
            cache[p] = [l.strip() for l in p.read_text(errors="replace").splitlines()]
    return cache


def verbatim_in(piece, sources):
    """True when the stripped lines of `piece` appear one after another in a source file."""
    n = len(piece)
    for lines in sources.values():
        for i in range(len(lines) - n + 1):
            if lines[i] == piece[0] and lines[i:i + n] == piece:
                return True
    return False


def check_code_blocks(path, text, problems, cache):
    """Every unmarked C++/CMake block must be the source's text, piece by piece."""
    rel = path.relative_to(ROOT)
    text = SNIPPET_BLOCK.sub("", text)
    for m in CODE_BLOCK.finditer(text):
        if m.group("before").strip() == "<!-- example -->":
            continue
        pieces = [[]]
        for line in m.group("body").splitlines():
            if line.strip() in ELISION:
                pieces.append([])
            else:
                pieces[-1].append(line.strip())
        for piece in pieces:
            while piece and not piece[-1]:
                piece.pop()
            if piece and not verbatim_in(piece, source_lines(cache)):
                lineno = text[:m.start("body")].count("\n") + 1
                problems.append(f"{rel}:{lineno}: a block of code that is not in the source "
                                f"(first differing piece starts `{piece[0][:60]}`): quote it as a "
                                f"snippet, or mark it `<!-- example -->` if a reader types it")
                break


HAND_COMPARISON = re.compile(
    r"\b(ahead of|level with|about level with|behind)\s+(`?(glibc|jemalloc|tcmalloc|mimalloc|"
    r"tbbmalloc|boost|pmr|step\s?0\d)|the (baseline|arena|size-class))", re.I)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")


def check_plots(pages, problems):
    """Plots where a reader looks: each generated plot shown in the results index and beside
    prose somewhere else, each chapter showing one, no embed of a plot that is not there."""
    results = ROOT / "docs" / "results"
    index = results / "README.md"
    shown = defaultdict(set)  # plot -> the pages that embed it
    for path in pages:
        for target in IMAGE.findall(path.read_text()):
            dest = (path.parent / target).resolve()
            if not dest.exists():
                problems.append(f"{path.relative_to(ROOT)}: embeds missing plot {target}")
            shown[dest].add(path.resolve())
    for png in sorted(results.glob("*.png")):
        where = shown.get(png.resolve(), set())
        if index.resolve() not in where:
            problems.append(f"docs/results/README.md: does not embed plot {png.name}")
        if not where - {index.resolve()}:
            problems.append(f"docs/results/{png.name}: embedded in no chapter or page besides "
                            f"docs/results/README.md")
    for path in pages:
        rel = path.relative_to(ROOT)
        chapter = re.fullmatch(r"step0\d-[\w-]+/README\.md", str(rel))
        if chapter and not IMAGE.search(path.read_text()):
            problems.append(f"{rel}: shows no plot")


def check_chapter(path, problems):
    headings = [h.lower() for h in re.findall(r"^##+ (.*)$", path.read_text(), re.M)]
    for section in CHAPTER_SECTIONS:
        if not any(section in h for h in headings):
            problems.append(f"{path.relative_to(ROOT)}: no section about '{section}'")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-dir", type=Path, help="the build's bench/ folder")
    ap.add_argument("--write", action="store_true",
                    help="copy every snippet block's code in from its source, every perf "
                         "block's excerpt from its file and every quoted line count from its "
                         "file, first")
    args = ap.parse_args()
    problems = []
    targets = make_targets()
    steps = {p.name for p in ROOT.glob("step0*") if p.is_dir()}
    sources = {}
    for path in tracked_markdown():
        text = path.read_text()
        counted = refresh_line_counts(path, text, problems)
        snipped = refresh_snippets(path, counted, problems)
        fresh = refresh_perf(path, snipped, problems)
        if fresh != text:
            if args.write:
                path.write_text(fresh)
            if not args.write and counted != text:
                problems.append(f"{path.relative_to(ROOT)}: a quoted line count differs from its "
                                f"file (scripts/check_docs.py --write counts again)")
            if not args.write and snipped != counted:
                problems.append(f"{path.relative_to(ROOT)}: a snippet differs from its source "
                                f"(scripts/check_docs.py --write copies it in)")
            if not args.write and fresh != snipped:
                problems.append(f"{path.relative_to(ROOT)}: a perf excerpt differs from its file "
                                f"in docs/results/perf/ (scripts/check_docs.py --write copies it "
                                f"in)")
        check_perf_pasted(path, fresh, problems)
        check_code_blocks(path, fresh, problems, sources)
        check_file(path, targets, steps, problems, args.bench_dir)
    check_plots(tracked_markdown(), problems)
    for step in sorted(steps):
        chapter = ROOT / step / "README.md"
        if chapter.exists():
            check_chapter(chapter, problems)
        else:
            problems.append(f"{step}: no README.md chapter")
    for p in problems:
        print(p)
    print(f"check_docs: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

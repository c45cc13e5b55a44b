#!/usr/bin/env python3
"""The docs test: what a reader follows in the Markdown must exist.

Checks every tracked .md file of the repository:
  - every relative link resolves to a file (and, for `file.md#anchor`, to one of its headings);
  - every `make <target>` names a target of the Makefile, and every STEP=/A=/B= a step folder;
  - every `scripts/<file>` and `stepNN-*/<file>` path written in the text exists;
  - every chapter (stepNN-*/README.md) has the sections a chapter promises: the design, the key
    code, the numbers, the perf report, debugging, and what is still wrong.
Exit 1 with one line per problem. (Numbers are checked by `scripts/results.py --check`.)
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTER_SECTIONS = ["design", "key code", "numbers", "perf", "debugging", "what is still wrong"]


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


def check_file(path, targets, steps, problems):
    rel = path.relative_to(ROOT)
    text = path.read_text()
    text = re.sub(r"<!-- results .*?<!-- /results -->", "", text, flags=re.S)
    # Commands live in code (fenced blocks and `spans`); links live in the prose around it.
    code_re = re.compile(r"```.*?```|`[^`\n]+`", re.S)
    code = "\n".join(code_re.findall(text))
    prose = code_re.sub("", text)
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
            if var in ("STEP", "A", "B") and not placeholder and value not in steps:
                problems.append(f"{rel}: `{var}={value}` is not a step folder")
    for p in re.findall(r"(?<![\w/.])((?:scripts|step0\d-[\w-]+|common|cmake)/[\w./-]*\w)", text):
        if "*" in p or "<" in p:
            continue
        if not (ROOT / p).exists() and not (path.parent / p).exists():
            problems.append(f"{rel}: names missing path {p}")


def check_chapter(path, problems):
    headings = [h.lower() for h in re.findall(r"^##+ (.*)$", path.read_text(), re.M)]
    for section in CHAPTER_SECTIONS:
        if not any(section in h for h in headings):
            problems.append(f"{path.relative_to(ROOT)}: no section about '{section}'")


def main():
    problems = []
    targets = make_targets()
    steps = {p.name for p in ROOT.glob("step0*") if p.is_dir()}
    for path in tracked_markdown():
        check_file(path, targets, steps, problems)
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

#!/usr/bin/env python3
"""Fails on a broken link in the README or the book (docs/): a relative link whose file is
missing, an anchor (`file.md#heading`, `#heading`) that no heading of its page makes, or a
book page's link out of docs/ (the rendered book holds only docs/, so it would be dead there).
Also fails on a chapter that docs/SUMMARY.md does not list, which the book would leave out.

    python3 scripts/check_links.py            # from anywhere in the repository

Anchors are made from headings as GitHub and mdBook make them: lower case, spaces to
hyphens, punctuation other than hyphens and underscores dropped. Links to web addresses
are not fetched (CI has no internet).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def prose(text):
    """The page without its fenced code blocks and inline code, line numbers kept."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return out


def slug(heading):
    s = re.sub(r"`", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page):
    found, counts = set(), {}
    for line in prose(page.read_text()):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def check(page, errors):
    for number, line in enumerate(prose(page.read_text()), 1):
        for m in LINK.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            dest = (page.parent / path).resolve() if path else page
            docs = ROOT / "docs"
            if not dest.exists():
                errors.append(f"{where}: no such file")
            elif docs in page.parents and docs not in dest.parents and dest != docs:
                errors.append(f"{where}: leaves docs/, which the rendered book does not hold")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                errors.append(f"{where}: no heading makes #{anchor}")


def main():
    docs = ROOT / "docs"
    pages = [ROOT / "README.md", *sorted(docs.rglob("*.md"))]
    errors = []
    for page in pages:
        check(page, errors)
    summary = (docs / "SUMMARY.md").read_text()
    listed = {m.group(1) for m in re.finditer(r"\]\(([^)#]+\.md)\)", summary)}
    for page in sorted(docs.glob("*.md")):
        if page.name != "SUMMARY.md" and page.name not in listed:
            errors.append(f"docs/{page.name}: not in docs/SUMMARY.md (the book leaves it out)")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(f"{len(errors)} broken link(s)")
    print(f"links: {len(pages)} pages, none broken")


if __name__ == "__main__":
    main()

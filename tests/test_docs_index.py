"""docs/index.md, the ordered path through the documentation: it links every
page of docs/, and every link it has leads to a file (and a heading) that is
there."""
from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _anchor(heading: str) -> str:
    # GitHub's: lower case, punctuation dropped, spaces as hyphens.
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_index_links_every_page_and_only_what_exists() -> None:
    text = (DOCS / "index.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links
    for link in links:
        path, _, anchor = link.partition("#")
        target = (DOCS / path).resolve()
        assert target.is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.M)
            assert anchor in {_anchor(h) for h in headings}, link
    linked = {(DOCS / link.partition("#")[0]).resolve() for link in links}
    unlinked = sorted(p.name for p in DOCS.glob("*.md") if p.name != "index.md"
                      and p.resolve() not in linked)
    assert not unlinked, f"docs/index.md does not lead to {unlinked}"
    steps = re.findall(r"^\s*(\d+)\. \*\*", text, re.M)
    assert steps == [str(i) for i in range(1, len(steps) + 1)] and len(steps) >= 10


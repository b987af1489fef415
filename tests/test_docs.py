"""The documentation's shape: a short README that points into docs/, every relative link
in them pointing at a file that exists, and every page the README promises present.
Pure: reads files, starts nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

# [text](target) and [text](target "title"); images too. Not inside code.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"(`+).*?\1", re.DOTALL)
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)  # http:, mailto:, ...


def relative_links(page: Path) -> list[str]:
    """The relative link targets of a Markdown page, anchors dropped, code left out."""
    text = _CODE.sub("", _FENCE.sub("", page.read_text()))
    targets = []
    for target in _LINK.findall(text):
        if _EXTERNAL.match(target):
            continue
        path = target.split("#", 1)[0]
        if path:  # "#anchor" alone points into the page itself
            targets.append(path)
    return targets


def test_the_readme_is_a_front_door_of_at_most_200_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_the_pages_the_readme_promises_are_in_docs():
    pages = [
        "usage.md",
        "report-card.md",
        "outputs.md",
        "authoring.md",
        "security.md",
        "benchmarks.md",
        "architecture.md",  # written with the architecture work; present once that lands
        "contributing.md",
    ]
    missing = [name for name in pages if not (DOCS / name).is_file()]
    assert not missing, f"docs/ lacks {missing}"


def test_the_link_finder_sees_relative_links_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[a](usage.md) [b](docs/x.md#flags) [c](https://example.com) [d](#here)\n"
        '`[e](inline.md)`\n```\n[f](fenced.md)\n```\n![g](img.png "title")\n'
    )
    assert relative_links(page) == ["usage.md", "docs/x.md", "img.png"]

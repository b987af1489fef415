"""The cohort's pages as people see them: opened in headless Chromium (Debian's `chromium`,
driven by playwright; check.sh installs both), in light and dark mode, on a laptop, a wide
screen and a phone.

Each page: no console error, every link resolves, every text (SVG's included) has WCAG AA
contrast with what is behind it, no word is cut across lines in a table cell, nothing
scrolls sideways on a phone. index.html: the pictures render and the notebooks sort.
A screenshot of every page and mode lands in $GRADER_ARTIFACTS (default: artifacts/browser
in the checkout) for people to look at.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from grader.core.results import Outcome
from grader.report import write_output_dir
from tests.cohort_cases import COHORT  # noqa: F401  (its notebooks join the batch)
from tests.helpers import ROOT

pytestmark = pytest.mark.kernel

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("GRADER_ARTIFACTS", ROOT / "artifacts")) / "browser"
WIDTHS = (1024, 1280, 1920)

# Every run of letters and digits cut across lines in a table cell (a break after / or _,
# which the page offers for long paths and test ids, cuts no word).
BROKEN_WORDS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll("td, th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/[A-Za-z0-9]+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects())
          .filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""

# Every element with text of its own, shown, whose colour (an SVG text's fill) has less
# than 4.5:1 contrast with the first opaque background behind it.
LOW_CONTRAST = """() => {
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
  const rgb = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const behind = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) return c;
    }
    return [255, 255, 255, 1];
  };
  const low = [];
  for (const el of document.querySelectorAll("body *")) {
    const own = Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.data.trim());
    const box = el.getBoundingClientRect();
    if (!own || (!box.width && !box.height)) continue;
    const style = getComputedStyle(el);
    const fg = rgb(el instanceof SVGElement ? style.fill : style.color);
    if (!fg) continue;
    const [hi, lo] = [lum(fg), lum(behind(el))].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < 4.5) low.push(`${el.tagName} "${el.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
  }
  return low;
}"""


@pytest.fixture(scope="module")
def pages(cohort, tmp_path_factory) -> Path:
    """The cohort's --output folder, written from the batch's results."""
    outcomes = [Outcome.from_dict(json.loads(g.stdout)) for g in cohort["cohort_report"].values()]
    folder = tmp_path_factory.mktemp("pages")
    write_output_dir(outcomes, folder)
    return folder


@pytest.fixture(scope="module")
def browser():
    if BROWSER is None:
        pytest.skip("no chromium here (check.sh installs Debian's as root)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=BROWSER, args=["--no-sandbox"])
        yield launched
        launched.close()


def _open(browser, url: str, width: int, scheme: str):
    page = browser.new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    return page, errors


def _links_resolve(page, path: Path) -> list[str]:
    missing = []
    for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
        target = urlparse(href)
        if href.startswith("#"):
            if not page.query_selector(f"[id='{href[1:]}']"):
                missing.append(href)
        elif target.scheme in ("", "file") and not (path.parent / unquote(target.path)).is_file():
            missing.append(href)
    return missing


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_reads_well(pages, browser, scheme):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    htmls = sorted(pages.glob("*.html"))
    assert len(htmls) == 10  # index.html and the nine notebooks' pages
    for path in htmls:
        for width in WIDTHS:
            page, errors = _open(browser, path.as_uri(), width, scheme)
            assert errors == [], f"{path.name} at {width}: {errors}"
            assert page.evaluate(BROKEN_WORDS) == [], f"{path.name} at {width}px ({scheme})"
            if width == 1280:
                assert _links_resolve(page, path) == [], path.name
                assert page.evaluate(LOW_CONTRAST) == [], f"{path.name} ({scheme})"
                page.screenshot(path=ARTIFACTS / f"{path.stem}-{scheme}.png", full_page=True)
            page.close()
        phone, errors = _open(browser, path.as_uri(), 390, scheme)
        assert errors == []
        overflow = phone.evaluate("document.documentElement.scrollWidth")
        assert overflow <= 390, f"{path.name} scrolls sideways on a phone ({overflow}px)"
        if path.name == "index.html":
            phone.screenshot(path=ARTIFACTS / f"index-{scheme}-phone.png", full_page=True)
        phone.close()


def test_the_pictures_render(pages, browser):
    page, _ = _open(browser, (pages / "index.html").as_uri(), 1280, "light")
    charts = page.query_selector_all("svg.chart")
    assert len(charts) == 4  # scores and levels, for each of the two exercises
    for chart in charts:
        box = chart.bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 100
        assert chart.query_selector_all("rect.bar"), "a chart without bars"
    # the norms scores: three notebooks with full marks in the last bar, drawn tallest
    norms = page.query_selector("#exercise-norms svg.chart")
    heights = [float(r.get_attribute("height")) for r in norms.query_selector_all("rect.bar")]
    assert heights[-1] == max(heights) > 0
    assert "full marks): 3" in norms.inner_html()
    page.close()


def test_the_notebooks_sort_by_each_column(pages, browser):
    page, errors = _open(browser, (pages / "index.html").as_uri(), 1280, "light")
    table = "#notebooks table"

    def column(n: int) -> list[str]:
        return page.eval_on_selector_all(
            f"{table} tbody tr", f"rows => rows.map(r => r.cells[{n}].dataset.v)"
        )

    names = column(0)
    assert names == sorted(names)  # canonical order to begin with
    page.click(f"{table} th:nth-child(3) button")  # score, as a percentage
    assert page.get_attribute(f"{table} th:nth-child(3)", "aria-sort") == "ascending"
    scores = [float(v) for v in column(2)]
    assert scores == sorted(scores) and scores[0] == -1  # the file that could not be graded
    page.click(f"{table} th:nth-child(3) button")
    assert [float(v) for v in column(2)] == sorted(scores, reverse=True)
    page.click(f"{table} th:nth-child(4) button")  # level
    assert [float(v) for v in column(3)] == sorted(float(v) for v in column(3))
    page.click(f"{table} th:nth-child(1) button")
    page.click(f"{table} th:nth-child(1) button")  # names, descending
    assert column(0) == sorted(names, reverse=True)
    assert errors == []
    page.close()


def test_the_copied_pair_is_on_the_page_with_its_lines_side_by_side(pages, browser):
    page, _ = _open(browser, (pages / "index.html").as_uri(), 1280, "light")
    pairs = page.query_selector_all("#similar details.pair")
    assert len(pairs) == 1
    summary = pairs[0].inner_text()
    assert "alice/norms.ipynb" in summary and "mallory/norms.ipynb" in summary
    pairs[0].click()  # open it
    sides = pairs[0].query_selector_all(".side")
    assert len(sides) == 2
    for side in sides:
        marked = side.query_selector_all("pre span.m")
        assert marked and marked[0].is_visible()
    left, right = (s.bounding_box() for s in sides)
    assert left["x"] + left["width"] <= right["x"]  # side by side
    page.close()

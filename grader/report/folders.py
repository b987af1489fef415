"""The outputs that are folders, a file or three per notebook, named by `slugs`.

    write_gradescope_folder   <slug>.json: Gradescope's results.json of each notebook
    write_output_dir          <slug>.ipynb  the executed notebook, the report appended
                              <slug>.html   the report card
                              index.html    the cohort: one row per notebook, linked

Every string from a notebook is HTML-escaped on the pages (and literal in the executed
notebook's Markdown: `grader.report.card.markdown_literal`).
"""

from __future__ import annotations

import hashlib
import html
import json
import platform
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

import grader
from grader.core.outcomes import Status
from grader.core.results import GradeReport, Outcome
from grader.core.text import encodable, printable
from grader.report.card import encodable_data, labelled_bug, to_gradescope, to_html
from grader.report.documents import notebook_of, sort_outcomes
from grader.report.executed import executed_notebook

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_SLUG = 80
# index.html is the folder's own; the rest are device names on Windows.
_RESERVED = {"index", "con", "prn", "aux", "nul"}
_RESERVED |= {f"{port}{n}" for port in ("com", "lpt") for n in range(1, 10)}


def slugs(outcomes: Iterable[Outcome]) -> dict[str, str]:
    """A file name (without extension) for each notebook path (`Outcome.notebook`), made
    of letters, digits, `.`, `_` and `-`: `subs/alice/hw.ipynb` -> `subs__alice__hw`.
    Names that would collide (ignoring case) get a suffix from a hash of their path."""
    paths = sorted({o.notebook for o in outcomes})
    base = {path: _slug(path) for path in paths}
    counts = Counter(name.lower() for name in base.values())
    names: dict[str, str] = {}
    taken: set[str] = set()
    for path in paths:
        name = base[path]
        if counts[name.lower()] > 1:
            name = f"{name}-{_digest(path)}"
        unique, n = name, 1
        while unique.lower() in taken:  # a suffixed name that meets another: count on
            n += 1
            unique = f"{name}-{n}"
        taken.add(unique.lower())
        names[path] = unique
    return names


def _slug(path: str) -> str:
    parts = [p for p in re.split(r"[/\\]+", path) if p not in ("", ".", "..")]
    if parts:
        parts[-1] = re.sub(r"\.ipynb$", "", parts[-1], flags=re.IGNORECASE)
    words = [_UNSAFE.sub("_", _ascii(part)).strip("._-") for part in parts]
    slug = "__".join(word for word in words if word) or "notebook"
    if len(slug) > _MAX_SLUG:
        slug = f"{slug[:_MAX_SLUG].rstrip('._-')}-{_digest(path)}"
    if slug.lower() in _RESERVED:
        slug += "_"
    return slug


def _ascii(text: str) -> str:
    """`text` without accents (é -> e); what is still not ASCII is replaced later."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def _digest(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _write(path: Path, text: str) -> None:
    path.write_text(encodable(text), encoding="utf-8")


# -- Gradescope ----------------------------------------------------------------------------


def write_gradescope_folder(outcomes: Iterable[Outcome], folder: Path) -> None:
    """Write `<slug>.json` for each notebook into `folder` (made if need be): the report's
    `to_gradescope` document, or for a notebook that could not be graded, a zero saying why.

    Raises:
        OSError: the folder or a file cannot be written.
    """
    outcomes = list(outcomes)
    names = slugs(outcomes)
    folder.mkdir(parents=True, exist_ok=True)
    for outcome in sort_outcomes(outcomes):
        text = to_gradescope(outcome.report) if outcome.report else _gradescope_error(outcome)
        _write(folder / f"{names[outcome.notebook]}.json", text + "\n")


def _gradescope_error(outcome: Outcome) -> str:
    """A zero saying why; `extra_data` says what graded it (no suite ran: no suite_hash)."""
    document = {
        "score": 0,
        "execution_time": 0,
        "output": f"Could not grade {notebook_of(outcome)}: {outcome.error}",
        "tests": [],
        "extra_data": {
            "notebook": notebook_of(outcome),
            "exit_code": outcome.exit_code,
            "grader_version": grader.__version__,
            "python_version": platform.python_version(),
            "suite_hash": "",
        },
    }
    return json.dumps(encodable_data(document), indent=2)


# -- --output DIR --------------------------------------------------------------------------


def write_output_dir(outcomes: Iterable[Outcome], folder: Path) -> None:
    """Write into `folder` (made if need be), for each notebook, `<slug>.ipynb` (the
    executed notebook with the report appended; none when the original cannot be read)
    and `<slug>.html` (the report card, or why it could not be graded); and `index.html`,
    the cohort's table linking them.

    Raises:
        OSError: the folder or a file cannot be written.
    """
    outcomes = list(outcomes)
    names = slugs(outcomes)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for outcome in sort_outcomes(outcomes):
        slug = names[outcome.notebook]
        notebook = executed_notebook(outcome)
        if notebook is not None:
            _write(folder / f"{slug}.ipynb", notebook)
        _write(folder / f"{slug}.html", report_page(outcome, slug, notebook is not None))
        rows.append(_index_row(outcome, slug, notebook is not None))
    _write(folder / "index.html", _index(outcomes, rows))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: left;
  vertical-align: top; overflow-wrap: anywhere; }}
td.number {{ text-align: right; white-space: nowrap; }}
tr.error td {{ background: #fde8e8; }}
tr.full td:first-child {{ border-left: 4px solid #2e7d32; }}
td small {{ white-space: nowrap; }}
/* a narrow screen: each row a block, its cells one under the other, links first */
@media (max-width: 48em) {{
  body {{ margin: 1em; }}
  thead {{ display: none; }}
  table, tbody, tr, td {{ display: block; }}
  tr {{ border-bottom: 1px solid #ddd; padding: 0.4em 0; }}
  td, td.number {{ border: none; padding: 0.1em 0.5em; text-align: left; }}
}}
</style>
</head>
<body>
{body}
</body>
</html>
"""


_FAULT = {2: ": a problem with the input", 3: ": a bug in the grader or the exercise's suite"}


def report_page(outcome: Outcome, slug: str, with_notebook: bool) -> str:
    """The HTML page of one notebook: its report card (rich's HTML export), or why it
    could not be graded; with links to the index and the executed notebook."""
    name = html.escape(printable(notebook_of(outcome)))
    links = '<p><a href="index.html">all notebooks</a>'
    if with_notebook:
        links += f' · <a href="{_href(slug, "ipynb")}">executed notebook</a>'
    links += "</p>"
    if outcome.report is None:
        why = html.escape(printable(outcome.error))
        fault = _FAULT.get(outcome.exit_code, "")
        body = (
            f"{links}\n<h1>Could not grade {name}</h1>\n<p>{why}</p>\n"
            f"<p>(exit code {outcome.exit_code}{fault})</p>"
        )
        return _PAGE.format(title=f"Could not grade {name}", body=body)
    # rich's template is a format string: a name's braces must reach it doubled.
    template = _CARD.replace("{title}", _braced(name)).replace("{links}", _braced(links))
    return to_html(outcome.report, template)


def _braced(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


_CARD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
{stylesheet}
body {{ color: {foreground}; background-color: {background}; font-family: sans-serif; }}
</style>
</head>
<body>
{links}
<pre style="font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace"><code style="font-family:inherit">{code}</code></pre>
</body>
</html>
"""


def _href(slug: str, extension: str) -> str:
    return html.escape(quote(f"{slug}.{extension}"))


def _index_row(outcome: Outcome, slug: str, with_notebook: bool) -> str:
    """The notebook first, linking its report (and its executed notebook), then the
    numbers, the exercise, and what went wrong in at most two lines."""
    report = outcome.report
    name = html.escape(printable(notebook_of(outcome)))
    links = f'<a href="{_href(slug, "html")}">{name}</a>'
    if with_notebook:
        links += f'<br><small><a href="{_href(slug, "ipynb")}">executed notebook</a></small>'
    if report is None:
        error = outcome.error.removeprefix(f"{outcome.notebook}: ")  # named in the row
        why = html.escape(printable(f"could not grade: {error}"))
        return _row("error", [links, "", "", "", "", why])
    cells = [
        links,
        f"{report.score:g}/{report.max_score:g}",
        html.escape(printable(_reached(report))),
        f"{report.duration_s:.1f} s",
        html.escape(printable(report.exercise)),
        "<br>".join(html.escape(printable(line)) for line in index_trouble(report)),
    ]
    return _row("full" if report.full_marks else "lost", cells)


def _row(kind: str, cells: list[str]) -> str:
    numbers = (1, 3)  # score, duration
    tds = "".join(
        f'<td class="number">{cell}</td>' if i in numbers else f"<td>{cell}</td>"
        for i, cell in enumerate(cells)
    )
    return f'<tr class="{kind}">{tds}</tr>'


def _reached(report: GradeReport) -> str:
    if not report.level_reached:
        return "none"
    return f"{report.level_reached} ({report.level_reached_name})"


def index_trouble(report: GradeReport) -> list[str]:
    """What went wrong, in at most two lines: what to read first (no credit, the likely
    bug, or a missing package), then the tests not passed (the first few, when no likely
    bug explains them) and the cells that failed. The rest is on the notebook's page."""
    lines = []
    if any(f.voids for f in report.integrity):
        lines.append("no credit: the notebook reached for the grader itself")
    elif report.hints:
        lines.append(labelled_bug(report))
    elif report.headlines:
        others = len(report.headlines) - 1
        lines.append(report.headlines[0] + (f" (+{others} more)" if others else ""))
    parts = []
    failed = [t for t in report.tests if t.status != Status.PASSED]
    if failed:
        shown = "" if report.hints else ": " + ", ".join(t.id for t in failed[:3])
        more = ", ..." if shown and len(failed) > 3 else ""
        parts.append(f"{len(failed)} of {len(report.tests)} tests not passed{shown}{more}")
    if report.cell_errors:
        cells = ", ".join(f"{c.cell} ({c.kind})" for c in report.cell_errors[:3])
        parts.append(f"cells that failed: {cells}{', ...' if len(report.cell_errors) > 3 else ''}")
    if parts:
        lines.append("; ".join(parts))
    return lines


def _index(outcomes: list[Outcome], rows: list[str]) -> str:
    full = sum(o.report is not None and o.report.full_marks for o in outcomes)
    errors = sum(o.report is None for o in outcomes)
    summary = (
        f"{len(outcomes)} notebooks: {full} with full marks, "
        f"{len(outcomes) - full - errors} with points lost, {errors} could not be graded"
    )
    header = "".join(
        f"<th>{h}</th>"
        for h in ("notebook", "score", "level reached", "duration", "exercise", "what went wrong")
    )
    body = (
        f"<h1>Grades</h1>\n<p>{summary}</p>\n<table>\n<thead><tr>{header}</tr></thead>\n"
        "<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>"
    )
    return _PAGE.format(title="Grades", body=body)

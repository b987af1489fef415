"""The outputs that are folders, a file or three per notebook, named by `slugs`.

    write_gradescope_folder   <slug>.json: Gradescope's results.json of each notebook
    write_output_dir          <slug>.ipynb  the executed notebook, the report appended
                              <slug>.html   the report card
                              index.html    the cohort: figures, pictures, hardest tests,
                                            similar code, every notebook (cohort_page)
                              cohort.json, grades.csv, tests.csv, similar.csv

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

import grader
from grader.core.outcomes import Status
from grader.core.results import GradeReport, Outcome
from grader.core.text import encodable, printable
from grader.report.card import encodable_data, labelled_bug, to_gradescope, to_html
from grader.report.cohort import Cohort, common_folder, make_cohort, relative_names
from grader.report.cohort_page import href, index_page, notebook_row, page
from grader.report.documents import notebook_of, sort_outcomes
from grader.report.executed import executed_notebook

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_SLUG = 80
# index.html is the folder's own; the rest are device names on Windows.
_RESERVED = {"index", "con", "prn", "aux", "nul"}
_RESERVED |= {f"{port}{n}" for port in ("com", "lpt") for n in range(1, 10)}


def slugs(outcomes: Iterable[Outcome], root: str | None = None) -> dict[str, str]:
    """A file name (without extension) for each notebook path (`Outcome.notebook`): its
    path relative to `root`, the folder graded (`relative_names`), made of letters,
    digits, `.`, `_` and `-`: `/tmp/cohort/alice/hw.ipynb` -> `alice__hw`. Names that
    would collide (ignoring case) get a suffix from a hash of their path."""
    outcomes = list(outcomes)
    relative = relative_names(outcomes, root)
    paths = sorted({o.notebook for o in outcomes})
    base = {path: _slug(relative[path]) for path in paths}
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


def write_gradescope_folder(
    outcomes: Iterable[Outcome], folder: Path, root: str | None = None
) -> None:
    """Write `<slug>.json` for each notebook into `folder` (made if need be): the report's
    `to_gradescope` document, or for a notebook that could not be graded, a zero saying why.

    Raises:
        OSError: the folder or a file cannot be written.
    """
    outcomes = list(outcomes)
    names = slugs(outcomes, root)
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


def write_output_dir(
    outcomes: Iterable[Outcome],
    folder: Path,
    cohort: Cohort | None = None,
    root: str | None = None,
    executed: bool = True,
) -> None:
    """Write into `folder` (made if need be), for each notebook, `<slug>.ipynb` (the
    executed notebook with the report appended; none when the original cannot be read)
    and `<slug>.html` (the report card, or why it could not be graded); and the cohort's
    files: `index.html` (`grader.report.cohort_page`), `cohort.json` (what `--json`
    writes), `grades.csv` (the gradebook), `tests.csv` (each test's pass rate) and
    `similar.csv` (the pairs of similar code). Not `executed`: no executed notebooks (a
    merge of JSON parts has no cell outputs to put in them).

    Raises:
        OSError: the folder or a file cannot be written.
    """
    from grader.report.cohort import pairs_csv, tests_csv, to_json_batch
    from grader.report.documents import to_csv

    outcomes = sort_outcomes(outcomes)
    cohort = cohort or make_cohort(outcomes)
    names = slugs(outcomes, root)
    relative = relative_names(outcomes, root)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for outcome in outcomes:
        slug = names[outcome.notebook]
        notebook = executed_notebook(outcome) if executed else None
        if notebook is not None:
            _write(folder / f"{slug}.ipynb", notebook)
        _write(folder / f"{slug}.html", report_page(outcome, slug, notebook is not None))
        trouble = index_trouble(outcome.report) if outcome.report else [_why(outcome)]
        name = relative[outcome.notebook]
        rows.append(notebook_row(outcome, name, slug, notebook is not None, trouble))
    files = {
        "cohort.json": to_json_batch(outcomes, cohort) + "\n",
        "grades.csv": to_csv(outcomes),
        "tests.csv": tests_csv(cohort),
        "similar.csv": pairs_csv(cohort),
    }
    for file, text in files.items():
        _write(folder / file, text)
    # a pair names a notebook by its report's path
    shown = {notebook_of(o): relative[o.notebook] for o in outcomes}
    pages = {notebook_of(o): names[o.notebook] for o in outcomes}
    graded = root or common_folder([o.notebook for o in outcomes])
    index = index_page(outcomes, cohort, shown, pages, rows, graded, list(files))
    _write(folder / "index.html", index)


def _why(outcome: Outcome) -> str:
    error = outcome.error.removeprefix(f"{outcome.notebook}: ")  # the row names it
    return f"could not grade: {error}"


_FAULT = {2: ": a problem with the input", 3: ": a bug in the grader or the exercise's suite"}


def report_page(outcome: Outcome, slug: str, with_notebook: bool) -> str:
    """The HTML page of one notebook: its report card (rich's HTML export, in colours that
    keep WCAG AA contrast in light and in dark mode: `grader.report.theme`), or why it
    could not be graded; with links to the index and the executed notebook."""
    links = '<p><a href="index.html">all notebooks</a>'
    if with_notebook:
        links += f' · <a href="{href(slug, "ipynb")}">executed notebook</a>'
    links += "</p>"
    name = printable(notebook_of(outcome))
    if outcome.report is None:
        why = html.escape(printable(outcome.error))
        fault = _FAULT.get(outcome.exit_code, "")
        body = (
            f"{links}\n<h1>Could not grade {html.escape(name)}</h1>\n<p>{why}</p>\n"
            f"<p>(exit code {outcome.exit_code}{fault})</p>"
        )
        return page(f"Could not grade {name}", body)
    return to_html(outcome.report, links)


def index_trouble(report: GradeReport) -> list[str]:
    """What went wrong, in at most two lines: what to read first (no credit, the likely
    bug, a missing package, or the cell that kept tests from running), then the tests not
    passed (the first few, when nothing above explains them) and the cells that failed.
    The rest is on the notebook's page."""
    lines = []
    cause = report.root_cause
    if any(f.voids for f in report.integrity):
        lines.append("no credit: the notebook reached for the grader itself")
    elif report.hints:
        lines.append(labelled_bug(report))
    elif report.headlines:
        others = len(report.headlines) - 1
        lines.append(report.headlines[0] + (f" (+{others} more)" if others else ""))
    elif cause:
        where = f"cell {cause.cell}" + (f", line {cause.line}" if cause.line else "")
        lines.append(f"{where}: {cause.message or cause.kind} ({cause.blocked} tests blocked)")
    parts = []
    failed = [t for t in report.tests if t.status != Status.PASSED]
    if failed:
        explained = report.hints or cause
        shown = "" if explained else ": " + ", ".join(t.id for t in failed[:3])
        more = ", ..." if shown and len(failed) > 3 else ""
        parts.append(f"{len(failed)} of {len(report.tests)} tests not passed{shown}{more}")
    if report.cell_errors:
        parts.append(cells_failed(report))
    if parts:
        lines.append("; ".join(parts))
    return lines


def cells_failed(report: GradeReport) -> str:
    """'cell 7 failed (error)', 'cells 7 and 9 failed (error, timeout)', 'cells 3, 4, 5
    and 2 more failed (...)': which cells of the notebook raised, ran out of time or
    killed the kernel."""
    errors = report.cell_errors
    shown = [str(c.cell) for c in errors[:3]]
    kinds = ", ".join(dict.fromkeys(str(c.kind) for c in errors))
    if len(errors) == 1:
        return f"cell {shown[0]} failed ({kinds})"
    if len(errors) <= 3:
        return f"cells {', '.join(shown[:-1])} and {shown[-1]} failed ({kinds})"
    return f"cells {', '.join(shown)} and {len(errors) - 3} more failed ({kinds})"

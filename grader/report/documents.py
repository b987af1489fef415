"""The documents a run over many notebooks writes: a JSON list, a gradebook CSV, JUnit XML.

Every writer puts the notebooks in one canonical order (`sort_outcomes`: by path, with
control characters as the escapes the formats write, so that the order reads back the
same from every format) and computes everything else (the gradebook's test columns, the
JUnit totals) from the entries alone. So merging the parts that shards
wrote gives, byte for byte, what one run over all the notebooks would have written::

    to_csv           gradebook: one row per notebook                        `--csv`
    to_junit_batch   <testsuites>, one <testsuite> per notebook    `--junit` of a batch

and `grader.report.cohort` the cohort's: `to_json_batch` (`--json` of a batch: the
notebooks' entries, then each exercise's figures and the similar pairs), `tests_csv` and
`pairs_csv` (--output's tests.csv and similar.csv).

(`grader.report.merge` reads them back.)
"""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass

from grader.core.outcomes import Status
from grader.core.results import Outcome
from grader.core.text import printable, xml_safe
from grader.report.card import junit_suite


def notebook_key(notebook: str) -> str:
    """The canonical sort key of a notebook path: the path with every character that some
    format writes as an escape written so (it reads the same back from every format)."""
    return xml_safe(printable(notebook))


def notebook_of(outcome: Outcome) -> str:
    """The notebook path an outcome is written under (the report's, when there is one)."""
    return outcome.report.notebook if outcome.report else outcome.notebook


def sort_outcomes(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """The outcomes in canonical order: by notebook path."""
    return sorted(outcomes, key=lambda o: (notebook_key(notebook_of(o)), notebook_of(o)))


# -- the gradebook -------------------------------------------------------------------------

COLUMNS = (
    "notebook", "exercise", "score", "max_score", "level_reached", "level_name",
    "duration_s", "error", "failed", "grader", "suite_hash", "torch", "python",
)  # fmt: skip
_FORMULA = ("=", "+", "-", "@", "\t", "\r", "'")


def spreadsheet_safe(text: str) -> str:
    """Candidate text for a CSV cell: a spreadsheet must not read it as a formula, so text
    beginning `=`, `+`, `-`, `@`, tab or CR gets a leading `'` (and so does text beginning
    `'`, so that the cell reads back as exactly the text)."""
    return "'" + text if text.startswith(_FORMULA) else text


def from_spreadsheet(cell: str) -> str:
    """The inverse of `spreadsheet_safe`."""
    return cell[1:] if cell.startswith("'") else cell


@dataclass(frozen=True)
class GradebookRow:
    """One row of the gradebook: the fixed `COLUMNS` as written, and (test, score) for each
    test of the notebook's exercise in the suite's order."""

    cells: tuple[str, ...]
    scores: tuple[tuple[str, str], ...] = ()

    @property
    def exercise(self) -> str:
        return self.cells[1]


def gradebook_row(outcome: Outcome) -> GradebookRow:
    """The gradebook's row for one notebook."""
    notebook = spreadsheet_safe(printable(notebook_of(outcome)))
    report = outcome.report
    if report is None:
        error = spreadsheet_safe(printable(outcome.error))
        return GradebookRow((notebook, "", "0", "", "", "", "", error, "", "", "", "", ""))
    cells = (
        notebook, report.exercise, f"{report.score:g}", f"{report.max_score:g}",
        str(report.level_reached), report.level_reached_name, f"{report.duration_s:.3f}", "",
        str(sum(t.status != Status.PASSED for t in report.tests)), report.grader_version,
        report.suite_hash, report.torch_version, report.python_version,
    )  # fmt: skip
    scores = tuple((printable(t.id), f"{t.score:g}") for t in report.tests)
    return GradebookRow(tuple(printable(cell) for cell in cells), scores)


def to_csv(outcomes: Iterable[Outcome]) -> str:
    """The gradebook: one row per notebook, the fixed `COLUMNS`, then one column per test."""
    return gradebook([gradebook_row(o) for o in sort_outcomes(outcomes)])


def gradebook(rows: list[GradebookRow]) -> str:
    """Rows (in canonical order) as CSV. The test columns: each exercise's tests (exercises
    sorted, each in its suite's order), a test id two exercises share in one column. A
    cell is a score, or empty where the test is not in that row's exercise."""
    columns: dict[str, None] = {}  # an ordered set
    for row in sorted(rows, key=lambda r: r.exercise):  # stable: canonical within each
        columns.update(dict.fromkeys(test for test, _ in row.scores))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*COLUMNS, *columns])
    for row in rows:
        scores = dict(row.scores)
        writer.writerow([*row.cells, *(scores.get(test, "") for test in columns)])
    return out.getvalue()


# -- JUnit ---------------------------------------------------------------------------------


def to_junit_batch(outcomes: Iterable[Outcome]) -> str:
    """JUnit XML: `<testsuites>` with the totals, one `<testsuite>` per notebook (named by
    its path; for a report, the testcases of `grader.report.card.to_junit`; for a notebook that
    could not be graded, one testcase in error saying why)."""
    return junit_document([_suite(o) for o in sort_outcomes(outcomes)])


def _suite(outcome: Outcome) -> ET.Element:
    name = xml_safe(notebook_of(outcome))
    if outcome.report is not None:
        suite = junit_suite(outcome.report)
        suite.set("name", name)
        return suite
    suite = ET.Element(
        "testsuite", name=name, tests="1", failures="0", errors="1", skipped="0", time="0.000"
    )
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="notebook", value=name)
    ET.SubElement(properties, "property", name="exit_code", value=str(outcome.exit_code))
    case = ET.SubElement(suite, "testcase", classname="grade", name="grading")
    ET.SubElement(case, "error", message=xml_safe(f"could not grade: {outcome.error}"))
    return suite


def junit_document(suites: list[ET.Element]) -> str:
    """`<testsuites>` holding `suites` (in canonical order), its totals summed from theirs."""
    root = ET.Element("testsuites", name="grade")
    for total in ("tests", "failures", "errors", "skipped"):
        root.set(total, str(sum(int(s.get(total, "0")) for s in suites)))
    root.set("time", f"{sum(float(s.get('time', '0')) for s in suites):.3f}")
    root.extend(suites)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)

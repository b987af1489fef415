"""The executed notebook: the candidate's notebook with what each cell printed when graded,
and the report as a last Markdown cell.

Outputs are rebuilt from the grading's `CellRun`s (what the grader kept of each cell's
output, and how it ended), not taken from the kernel, and never from the submitted file:
what a candidate saved as outputs is dropped.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING

from grader.core.errors import GraderError
from grader.core.imports import nbformat
from grader.core.notebook import read_notebook
from grader.core.outcomes import Status
from grader.core.results import Outcome
from grader.core.text import encodable, printable
from grader.report.card import markdown_literal, to_markdown

if TYPE_CHECKING:
    from grader.kernel.cells import CellRun

REPORT_CELL_ID = "grader-report"
_ERROR = re.compile(r"(?P<ename>[A-Za-z_][\w.]*): (?P<evalue>.*)", re.DOTALL)
_NOT_RUN = (Status.SKIPPED,)
_STOPPED = (Status.TIMEOUT, Status.CRASHED, Status.SKIPPED)


def executed_notebook(outcome: Outcome) -> str | None:
    """The notebook `outcome.notebook` as nbformat JSON, its code cells' outputs and
    execution counts those of the grading, the report appended; None when the original
    cannot be read (any more)."""
    try:
        node = copy.deepcopy(read_notebook(outcome.notebook).node)
    except GraderError:
        return None
    runs = {run.index: run for run in outcome.cells}
    count = 0
    for index, cell in enumerate(node.cells):
        if cell.cell_type != "code":
            continue
        cell.outputs, cell.execution_count = [], None
        run = runs.get(index)
        if run is None:
            continue
        if run.status not in _NOT_RUN:
            count += 1
            cell.execution_count = count
        cell.outputs = cell_outputs(run)
    imitations = _disown_imitations(node)
    node.cells.append(_report_cell(outcome, node, imitations))
    # A lone surrogate (JSON can carry one, UTF-8 cannot) only occurs inside a JSON
    # string, where its escape reads back as the same character.
    return encodable(nbformat.writes(node))


def cell_outputs(run: CellRun) -> list[nbformat.NotebookNode]:
    """nbformat outputs for one cell run: what it printed (a stream), a note of what was
    cut, then how it ended: an `error` output, or for a timeout, a dead kernel or a cell
    not run, a stderr line saying so."""
    new_output = nbformat.v4.new_output
    outputs = []
    printed = encodable(run.output)
    error = _split_error(run.message) if run.status not in (Status.PASSED, *_STOPPED) else None
    if error and printed.endswith(error[1]):  # the kernel's error message, kept as output
        printed = printed[: len(printed) - len(error[1])]
    if printed:
        outputs.append(new_output("stream", name="stdout", text=printed))
    if run.output_cut:
        note = f"[grader: {run.output_cut:,} more characters of output were cut]\n"
        outputs.append(new_output("stream", name="stderr", text=note))
    if error:
        ename, evalue = error
        outputs.append(
            new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])
        )
    elif run.status in _STOPPED:
        text = printable(f"[grader] {run.status}: {run.message}".rstrip(": ")) + "\n"
        outputs.append(new_output("stream", name="stderr", text=text))
    return outputs


def _split_error(message: str) -> tuple[str, str]:
    """("NameError", "name 'x' is not defined") from "NameError: name 'x' is not defined";
    ("Error", message) when the message does not begin with an exception's name."""
    match = _ERROR.fullmatch(printable(message))
    if match is None:
        return "Error", printable(message)
    return match["ename"], match["evalue"]


def _disown_imitations(node: nbformat.NotebookNode) -> list[int]:
    """The notebook's own cells that look like the grader's report (its id, its metadata):
    renamed and untagged, so that the report appended is the only one. Returns their
    numbers (from 1)."""
    found = []
    for number, cell in enumerate(node.cells, start=1):
        marked = isinstance(cell.get("metadata", {}).get("grader"), dict)
        if marked or str(cell.get("id", "")).startswith(REPORT_CELL_ID):
            cell.get("metadata", {}).pop("grader", None)
            if "id" in cell:
                cell["id"] = f"notebook-cell-{number}"
            found.append(number)
    return found


def _report_cell(
    outcome: Outcome, node: nbformat.NotebookNode, imitations: list[int] | None = None
) -> nbformat.NotebookNode:
    """The report as Markdown (candidate text escaped), tagged as the grader's."""
    if outcome.report is not None:
        source = to_markdown(outcome.report)
    else:
        source = (
            f"## Could not grade {markdown_literal(outcome.notebook)}\n\n"
            f"{markdown_literal(outcome.error)}"
        )
    if imitations:
        cells = ", ".join(str(n) for n in imitations)
        source += (
            f"\n\n*The notebook's own cell {cells} imitated this report: renamed "
            "(`notebook-cell-N`), not the grader's.*\n"
        )
    cell = nbformat.v4.new_markdown_cell(source, metadata={"grader": {"report": True}})
    del cell["id"]  # random; and cells have ids only since nbformat 4.5
    if (node.nbformat, node.nbformat_minor) >= (4, 5):
        taken = {c.get("id") for c in node.cells}
        cell.id, n = REPORT_CELL_ID, 1
        while cell.id in taken:
            n += 1
            cell.id = f"{REPORT_CELL_ID}-{n}"
    return cell

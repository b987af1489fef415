"""One bug, one place: a cell that fails to compile or raises is the root cause of exactly
the tests it kept from running, and the card says nothing else about them (no "does not
define", no likely bug, no IPython file name); a failing self-check is the candidate's own
test, shown below the hidden tests' diagnosis, never as the root cause. Real kernels, and
every place a report is read: the card, JSON, Markdown, Gradescope, and `--watch`."""

from __future__ import annotations

import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from rich.console import Console

from grader.core.results import GradeReport
from grader.report.card import render, to_gradescope, to_markdown
from grader.suite.corpus import apply, load_corpus
from grader.suite.exercise import load_catalog
from tests.cohort import Cohort
from tests.helpers import SOLUTIONS, private_tmpdir

pytestmark = pytest.mark.kernel

EXERCISE = load_catalog()["norms"]
# a known bug that the notebook's public self-check also sees (eps outside the root)
KNOWN = next(m for m in load_corpus(EXERCISE).mutants if m.name == "rms_eps_outside_sqrt")
DEFINES = "def layer_norm("  # the cell that defines layer_norm and LayerNorm


def _solution() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTIONS / "norms.ipynb", as_version=4)


def _defining_cell(nb: nbformat.NotebookNode) -> int:
    """The card's number (counting every cell from 1) of the cell that defines layer_norm."""
    return next(i for i, c in enumerate(nb.cells, 1) if DEFINES in c.source)


def _syntax_error() -> nbformat.NotebookNode:
    nb = _solution()
    cell = nb.cells[_defining_cell(nb) - 1]
    cell.source = cell.source.replace(DEFINES, "def layer_norm(:", 1)
    return nb


def _runtime_error() -> nbformat.NotebookNode:
    nb = _solution()
    cell = nb.cells[_defining_cell(nb) - 1]
    cell.source = "scale = 1 / 0\n" + cell.source
    return nb


NOTEBOOKS = {
    "syntax_error": _syntax_error,
    "runtime_error": _runtime_error,
    "self_check_and_known_bug": lambda: apply(_solution(), KNOWN),
}

COHORT = Cohort("one_place")


@COHORT.notebooks
def _written(folder: Path) -> dict[str, Path]:
    paths = {}
    for name, make in NOTEBOOKS.items():
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(make(), paths[name])
    return paths


@pytest.fixture
def reports(cohort) -> dict[str, GradeReport]:
    return {name: GradeReport.from_dict(g.report) for name, g in cohort["one_place"].items()}


def _card(report: GradeReport) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    render(report, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return re.sub(r"\s+", " ", text)


def _gradescope_output(report: GradeReport) -> str:
    return json.loads(to_gradescope(report))["output"]


@pytest.mark.parametrize("case", ["syntax_error", "runtime_error"])
def test_a_defining_cell_that_fails_blocks_the_tests_that_need_its_names(reports, case):
    report = reports[case]
    cell = _defining_cell(_solution())
    cause = report.root_cause
    assert cause is not None and cause.cell == cell and cause.line == 1
    blocked = [t for t in report.tests if t.problem == "blocked"]
    assert blocked and {t.blocked_by for t in blocked} == {cell}
    assert cause.blocked == len(blocked)  # the root cause counts them
    assert not any(t.problem == "interface" for t in report.tests)
    assert report.hints == []  # nothing to hint while tests could not run
    assert report.own_failures == []  # the self-check's NameError is this cell's doing
    if case == "syntax_error":
        assert cause.message == "SyntaxError: invalid syntax"  # no "(123456.py, line 1)"
        assert cause.source == "def layer_norm(:"
    else:
        assert cause.message == "ZeroDivisionError: division by zero"

    card = _card(report)
    assert f"Root cause cell {cell}, line 1: {cause.message}" in card
    assert f"{len(blocked)} of {len(EXERCISE.checks)} tests could not run because of it" in card
    assert f"blocked by cell {cell}" in card
    assert "Likely bug" not in card and "Self-check" not in card and ".py, line" not in card
    assert "no test depended on it" not in card and "does not define" not in card

    markdown = to_markdown(report)
    assert f"**Root cause** cell {cell}, line 1: " in markdown and "Likely bug" not in markdown
    assert f"{len(blocked)} of {len(EXERCISE.checks)} tests could not run" in markdown

    output = _gradescope_output(report)
    assert output.startswith(f"Root cause: cell {cell}, line 1: {cause.message}; {len(blocked)} of")
    assert "Likely bug" not in output and ".py, line" not in output
    data = json.loads(json.dumps(report.to_dict()))
    assert data["root_cause"]["blocked"] == len(blocked) and data["own_failures"] == []


def test_a_failing_self_check_is_the_candidates_own_test_not_the_root_cause(reports):
    report = reports["self_check_and_known_bug"]
    assert report.root_cause is None  # it kept no hidden test from running
    assert report.hints == [KNOWN.hint]  # the hidden tests' diagnosis stands
    [own] = report.own_failures
    assert own.self_check and own.blocked == 0
    assert own.message.startswith("AssertionError: eps goes inside the root")
    assert not any(t.problem == "blocked" for t in report.tests)

    card = _card(report)
    assert "Root cause" not in card and "no test depended on it" not in card
    likely = card.index(f"Likely bug {KNOWN.hint}")
    own_line = card.index(f"Self-check your self-check failed: cell {own.cell}, line {own.line}")
    assert likely < own_line < card.index("Levels")

    markdown = to_markdown(report)
    assert "Root cause" not in markdown
    assert markdown.index("**Likely bug**") < markdown.index(
        "**Self-check** your self-check failed"
    )

    output = _gradescope_output(report).splitlines()
    assert not output[0].startswith("Root cause") and not any("Root cause" in x for x in output)
    said = [n for n, line in enumerate(output) if line.startswith("Your self-check failed: cell")]
    assert said and "AssertionError: eps goes inside the root" in output[said[0]]
    hidden = json.loads(to_gradescope(report))["tests"]
    assert any(KNOWN.hint in t["output"] for t in hidden if t["status"] == "failed")

    again = GradeReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.own_failures == report.own_failures


# -- under --watch: the same card, redrawn after each save ----------------------------------


def _cards(process: subprocess.Popen, lines: queue.Queue, count: int) -> list[str]:
    """The text of the first `count` cards `grade --watch` prints (each ends at its status
    line)."""
    cards, card = [], []
    deadline = time.monotonic() + 240
    while len(cards) < count:
        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        assert line is not None, f"grade ended: {card[-20:]}"
        if line.startswith("watching "):
            cards.append(re.sub(r"\s+", " ", " ".join(card)))
            card = []
        else:
            card.append(line)
    return cards


def test_watch_shows_the_root_cause_alone_then_the_self_check_below_the_likely_bug(tmp_path):
    notebook = tmp_path / "nb.ipynb"
    nbformat.write(_syntax_error(), notebook)
    with private_tmpdir("gw1-") as scratch:
        process = subprocess.Popen(
            [sys.executable, "-m", "grader.cli", "--watch", notebook.name],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TMPDIR": str(scratch), "COLUMNS": "100"},
            start_new_session=True,
        )  # fmt: skip
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        try:
            [first] = _cards(process, lines, 1)
            assert "Root cause cell" in first and "SyntaxError: invalid syntax" in first
            assert "Likely bug" not in first and ".py, line" not in first
            nbformat.write(apply(_solution(), KNOWN), notebook)
            [second] = _cards(process, lines, 1)
            assert "Root cause" not in second
            assert second.index("Likely bug") < second.index("Self-check your self-check failed")
        finally:
            os.killpg(process.pid, signal.SIGINT)
            process.communicate(timeout=60)


def test_the_duration_counts_from_when_the_grading_began():
    """The card's duration covers the kernel template's boot and the suites' loading, which
    `grade` waits for before the notebook's first cell (it counts from `began`)."""
    from grader.run.pipeline import grade_file

    began = time.monotonic() - 1000  # as if the template had taken that long to boot
    graded = grade_file(SOLUTIONS / "norms.ipynb", began=began)
    assert 1000 <= graded.report.duration_s < 1000 + 600

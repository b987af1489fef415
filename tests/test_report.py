"""Candidate text on every output: literal on the card, well-formed in XML and JSON.

Pure: GradeReports are built by hand, no kernel.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from rich.console import Console

from grader.core.records import Finding
from grader.core.results import CellError, CheckResult, CutOutput, GradeReport
from grader.core.text import encodable, printable, xml_safe
from grader.report.card import render, to_gradescope, to_json, to_junit
from grader.verdict.score import summarise

MARKUP = "[/x] [batch, seq] [bold red]boom[/]"
TERMINAL = "\x1b[2J\x1b]0;pwned\x07"
CONTROLS = "\x00\x01\x08\x0b\x0c\x1f\x7f\x85"
SURROGATES = "\udc80\ud800"
HOSTILE = f"{MARKUP} {TERMINAL} {CONTROLS} {SURROGATES} \ufffe"
LONG = HOSTILE + " " + "x" * 20_000
# Nothing of these may reach a terminal or a UTF-8 file.
RAW = "\x1b\x00\x01\x07\x08\x0b\x0c\x1f\x7f\x85\udc80\ud800"


def _hostile_report() -> GradeReport:
    """Hostile text in every field the candidate could reach, and a few it cannot."""
    levels = [f"shapes {MARKUP}", f"masks {TERMINAL}", "parity"]
    tests = [
        CheckResult(f"t1 {MARKUP}", 1, levels[0], "failed", 0, 1, HOSTILE),
        CheckResult(f"t2 {TERMINAL}", 2, levels[1], "error", 0, 1, LONG, hidden=False),
        CheckResult(f"t3 {SURROGATES}", 3, levels[2], "timeout", 0, 1, HOSTILE),
        CheckResult("t4", 3, levels[2], "crashed", 0, 1, f"crashed: {HOSTILE}"),
        CheckResult("t5", 3, levels[2], "not_implemented", 0, 1, HOSTILE),
        CheckResult("t6", 3, levels[2], "skipped", 0, 1, HOSTILE),
        CheckResult("t7", 1, levels[0], "passed", 1, 1, HOSTILE),
    ]
    summary, reached = summarise(levels, tests)
    return GradeReport(
        exercise=f"demo {CONTROLS}",
        title=f"Demo {MARKUP}",
        notebook=f"nb {MARKUP} {TERMINAL} {SURROGATES}.ipynb",
        score=1,
        max_score=7,
        level_reached=1,
        level_reached_name=levels[0],
        levels=summary,
        duration_s=1.5,
        tests=tests,
        cell_errors=[
            CellError(2, "error", HOSTILE, HOSTILE, 5),
            CellError(3, "timeout", LONG),
        ],
        headlines=[HOSTILE],
        integrity=[
            Finding("machinery", HOSTILE, 2, 3),
            Finding("hidden", LONG),
            Finding("builtin", f"eval {MARKUP}", 4),
        ],
        notes=[HOSTILE],
        cut_output=[CutOutput(2, f"{HOSTILE}\n{HOSTILE}", 12_345), CutOutput(3, LONG, 5)],
        torch_version=f"2.0 {MARKUP}",
        grader_version=f"1.0 {SURROGATES}",
    )


def _card(report: GradeReport, width: int = 120) -> str:
    out = io.StringIO()
    render(report, Console(file=out, width=width, color_system=None, force_terminal=False))
    return out.getvalue()


# -- the helpers ---------------------------------------------------------------------------


def test_printable_escapes_controls_and_surrogates_and_keeps_the_rest():
    assert printable("a\tb\nc") == "a\tb\nc"
    assert printable(TERMINAL) == "\\x1b[2J\\x1b]0;pwned\\x07"
    assert printable(CONTROLS) == "\\x00\\x01\\x08\\x0b\\x0c\\x1f\\x7f\\x85"
    assert printable(SURROGATES) == "\\udc80\\ud800"
    assert printable("\r") == "\\x0d"
    ordinary = "expected shape (2, 5, 16), got (2, 5, 8) — é ü 中 😀 [0, 1]"
    assert printable(ordinary) == ordinary


def test_xml_safe_escapes_what_xml_forbids_and_keeps_what_it_allows():
    assert xml_safe("a\tb\nc\rd") == "a\tb\nc\rd"
    assert xml_safe("\x00\x1b\ufffe\uffff\ud800") == "\\x00\\x1b\\ufffe\\uffff\\ud800"
    assert xml_safe("<&> é 😀") == "<&> é 😀"


def test_encodable_escapes_only_lone_surrogates():
    assert encodable(f"a{SURROGATES}\x00\x1b😀") == "a\\udc80\\ud800\x00\x1b😀"
    encodable(HOSTILE).encode("utf-8")


# -- the card ------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [40, 80, 120, 200])
def test_the_card_shows_candidate_text_literally(width):
    card = _card(_hostile_report(), width)
    flat = card.replace("\n", "")
    assert "[batch, seq]" in card and "[/x]" in card
    assert "[bold red]boom[/]" in flat
    assert not any(c in card for c in RAW), [c for c in RAW if c in card]
    assert "\\x1b[2J" in flat and "\\udc80" in flat and "\\x00" in flat


def test_every_candidate_field_reaches_the_card_escaped():
    card = _card(_hostile_report(), 400).replace("\n", "")
    for text in (
        "nb [/x] [batch, seq] [bold red]boom[/] \\x1b[2J\\x1b]0;pwned\\x07 \\udc80\\ud800.ipynb",
        "demo \\x00\\x01",
        "Demo [/x]",
        "torch 2.0 [/x]",
        "t1 [/x] [batch, seq]",
        "t2 \\x1b[2J",
        "(public)",
        "t3 \\udc80\\ud800",
        "shapes [/x] [batch, seq]",
        "masks \\x1b[2J",
        "eval [/x]",
        "12,345 chars",
        "note: [/x]",
        "! [/x]",
    ):
        assert text in card, text


def test_the_card_prints_to_a_strict_utf8_stream():
    for terminal in (False, True):
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
        render(_hostile_report(), Console(file=stream, width=100, force_terminal=terminal))
        stream.flush()
        written = raw.getvalue().decode("utf-8")
        assert "[batch, seq]" in written
        assert "\x1b]0;" not in written and "\x1b[2J" not in written


def test_the_card_with_a_recording_console_exports_literal_text():
    console = Console(record=True, width=120, file=io.StringIO())
    render(_hostile_report(), console)
    text = console.export_text()
    assert "[/x] [batch, seq]" in text
    assert not any(c in text for c in RAW)


def _ordinary_report() -> GradeReport:
    levels = ["shapes", "masks", "parity"]
    message = "expected shape (2, 5, 16), got (2, 5, 8)"
    tests = [
        CheckResult("a", 1, "shapes", "passed", 1, 1),
        CheckResult("b", 2, "masks", "failed", 0, 1, message),
        CheckResult("c", 3, "parity", "not_implemented", 0, 1, "not implemented: forward"),
    ]
    summary, reached = summarise(levels, tests)
    return GradeReport(
        exercise="demo", title="Demo", notebook="nb.ipynb",
        score=1, max_score=3, level_reached=reached, level_reached_name=levels[reached - 1],
        levels=summary, duration_s=1.23, tests=tests,
        cell_errors=[CellError(4, "error", "NameError: name 'x' is not defined")],
        headlines=["cell 2: `foo` is not available in the grading environment"],
        integrity=[Finding("builtin", "eval", 3, 2)],
        notes=["the notebook\tprinted a lot"],
        cut_output=[CutOutput(3, "spam\nspam", 99_000)],
        torch_version="2.3.0",
    )  # fmt: skip


def test_an_ordinary_report_reads_as_before():
    card = _card(_ordinary_report())
    for text in (
        "Exercise  demo — Demo",
        "Notebook  nb.ipynb",
        "Duration  1.2 s   (torch 2.3.0, NOT sandboxed: integrity checks best effort)",
        "wrong answer: expected shape (2, 5, 16), got (2, 5, 8)",
        "not implemented: forward",
        "NameError: name 'x' is not defined",
        "! cell 2: `foo` is not available in the grading environment",
        "cell 3, line 2",
        "99,000 chars",
        "spam⏎ spam",
        "Score 1/3   Level reached level 1 (shapes)",
    ):
        assert text in card, text
    assert "\\x" not in card and "\\u" not in card


# -- JUnit ---------------------------------------------------------------------------------


def test_junit_is_well_formed_for_hostile_text():
    suite = ET.fromstring(to_junit(_hostile_report()).encode("utf-8"))
    assert suite.get("name") == "demo \\x00\\x01\\x08\\x0b\\x0c\\x1f\\x7f\\x85"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases][:3] == [
        f"t1 {MARKUP}",
        "t2 \\x1b[2J\\x1b]0;pwned\\x07",
        "t3 \\udc80\\ud800",
    ]
    assert (
        cases[0].get("classname")
        == f"demo \\x00\\x01\\x08\\x0b\\x0c\\x1f\\x7f\\x85.shapes {MARKUP}"
    )
    escaped = xml_safe(HOSTILE)
    assert cases[0].find("failure").get("message") == escaped
    assert cases[1].find("error").get("message").startswith(f"error: {escaped}")
    assert cases[2].find("error").get("message") == f"timeout: {escaped}"
    assert cases[4].find("failure").get("message") == f"not implemented: {escaped}"
    assert cases[5].find("skipped").get("message") == escaped
    summary = json.loads(suite.find("system-out").text)
    assert summary["headlines"] == [encodable(HOSTILE)]
    assert summary["notebook"] == encodable(_hostile_report().notebook)
    json.dumps(summary, ensure_ascii=False).encode("utf-8")


def test_junit_of_an_ordinary_report_keeps_its_text():
    suite = ET.fromstring(to_junit(_ordinary_report()).encode("utf-8"))
    failure = suite.find("testcase[@name='b']/failure")
    assert failure.get("message") == "expected shape (2, 5, 16), got (2, 5, 8)"
    assert suite.get("tests") == "3" and suite.get("failures") == "2"  # b, and c's stub


# -- JSON and Gradescope -------------------------------------------------------------------


@pytest.mark.parametrize("write", [to_json, to_gradescope])
def test_json_outputs_load_and_encode_for_hostile_text(write):
    text = write(_hostile_report())
    text.encode("utf-8")
    data = json.loads(text)
    dumped = json.dumps(data, ensure_ascii=False)
    dumped.encode("utf-8")  # no lone surrogate survives the round trip
    assert "[batch, seq]" in dumped


def test_json_keeps_its_fields_and_candidate_text():
    report = _hostile_report()
    data = json.loads(to_json(report))
    assert list(data) == list(report.to_dict())
    assert data["tests"][0]["message"] == encodable(HOSTILE)
    assert data["tests"][0]["message"].startswith(MARKUP)
    assert "\x1b[2J" in data["tests"][0]["message"]  # JSON carries controls as \u001b
    assert data["cell_errors"][0]["message"] == encodable(HOSTILE)
    assert data["integrity"][0] == {
        "kind": "machinery",
        "message": encodable(HOSTILE),
        "cell": 2,
        "line": 3,
    }
    assert data["cut_output"][0]["cut"] == 12_345


def test_gradescope_keeps_its_fields_and_shows_candidate_text_escaped():
    """Gradescope shows `output` to the student: control, bidi and zero-width characters
    arrive as escapes, as on the card."""
    data = json.loads(to_gradescope(_hostile_report()))
    assert set(data) == {"score", "execution_time", "output", "tests", "extra_data"}
    assert data["tests"][0]["output"] == f"failed: {printable(HOSTILE)}"
    assert data["extra_data"]["grader_version"] == "1.0 \\udc80\\ud800"
    assert f"Cell 2 (error): {printable(HOSTILE)}" in data["output"]


def test_json_of_an_ordinary_report_is_unchanged():
    report = _ordinary_report()
    assert json.loads(to_json(report)) == json.loads(json.dumps(report.to_dict()))
    report = replace(report, notebook="ordnér/nb 😀.ipynb")
    assert json.loads(to_json(report))["notebook"] == "ordnér/nb 😀.ipynb"


# -- the likely bug, JUnit's stubs, 80 columns ---------------------------------------------

HINTS = [
    "logits scaled by 1/sqrt(embed_dim), not 1/sqrt(head_dim)?",
    "logits not scaled by 1/sqrt(head_dim)?",
]
PARITY = (
    "output y vs nn.MultiheadAttention: 120 of 120 elements outside the tolerance; worst at "
    "[1, 2, 8]: got -0.1728022, want -0.1202299, off by 0.0526 where 1.12e-07 is allowed "
    "(atol=1e-07, rtol=1e-07)"
)
FAILING = {  # the tests a scale-by-sqrt(embed_dim) notebook fails, and their docstrings
    "parity_without_mask": "Same y and weights as nn.MultiheadAttention with the same "
    "(biased) projections.",
    "parity_in_cross_attention": "Parity in cross-attention: queries from x, keys and values "
    "from kv (S != T).",
    "input_gradient_matches_oracle": "d(sum(y * r))/dx matches nn.MultiheadAttention's in "
    "float64 (self-attention).",
}


def _mutant_report(public: bool = False) -> GradeReport:
    """A notebook failing as a known bug makes it fail (`public`: only public tests fail)."""
    levels = ["shapes", "parity", "training"]
    tests = [CheckResult("self_attention_shapes", 1, "shapes", "passed", 1, 1)]
    tests += [
        CheckResult(test, 2 + (i == 2), levels[1 + (i == 2)], "failed", 0, 2, PARITY,
                    hidden=not public, description=doc)
        for i, (test, doc) in enumerate(FAILING.items())
    ]  # fmt: skip
    summary, reached = summarise(levels, tests)
    return GradeReport(
        exercise="mha_interview",
        title="Multi-head attention module (self- and cross-attention, masks)",
        notebook="submissions/a_candidate_with_a_rather_long_name/attention.ipynb",
        score=1, max_score=7, level_reached=reached, level_reached_name="shapes",
        levels=summary, duration_s=3.2, tests=tests, cell_errors=[], hints=HINTS,
        torch_version="2.13.0+cpu", python_version="3.11.7", suite_hash="ab" * 32,
    )  # fmt: skip


def test_gradescope_shows_the_likely_bug_where_the_student_may_read_it():
    """In `output` (seen at once) when public tests alone show it; else with each failing
    hidden test (seen once grades are published), never in `output`."""
    line = f"Likely bug: {HINTS[0]} or {HINTS[1]} ("
    public = json.loads(to_gradescope(_mutant_report(public=True)))
    assert line in public["output"]
    hidden = json.loads(to_gradescope(_mutant_report()))
    assert "likely bug" not in hidden["output"].lower()
    failing = [t for t in hidden["tests"] if t["status"] == "failed"]
    assert {t["visibility"] for t in failing} == {"after_published"}
    assert all(t["output"].endswith(f"\nlikely bug: {HINTS[0]} or {HINTS[1]}") for t in failing)
    assert hidden["extra_data"]["suite_hash"] == "ab" * 32
    assert hidden["extra_data"]["python_version"] == "3.11.7"


def test_junit_fails_a_stub_and_keeps_a_test_not_run_skipped():
    """A required test whose stub raises NotImplementedError is a failure, not a skip; a
    test not run (after timeouts in a row) has no verdict and stays skipped."""
    report = replace(
        _ordinary_report(),
        tests=[
            CheckResult("a", 1, "shapes", "passed", 1, 1),
            CheckResult("b", 2, "masks", "not_implemented", 0, 1, "not implemented: forward"),
            CheckResult("c", 3, "parity", "not_implemented", 0, 1),
            CheckResult("t", 3, "parity", "timeout", 0, 1, "ran past the 10 s call limit"),
            CheckResult("d", 3, "parity", "skipped", 0, 1, "not run: the last 3 tests timed out"),
        ],
    )
    suite = ET.fromstring(to_junit(report).encode("utf-8"))
    totals = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
    # the timeout is the error that explains the skip: no testcase of its own for it
    assert totals == {"tests": "5", "failures": "2", "errors": "1", "skipped": "1"}
    for name, message in (("b", "not implemented: forward"), ("c", "not implemented")):
        failure = suite.find(f"testcase[@name='{name}']/failure")
        assert failure is not None and suite.find(f"testcase[@name='{name}']/skipped") is None
        assert (failure.get("type"), failure.get("message")) == ("not_implemented", message)
    skipped = suite.find("testcase[@name='d']/skipped")
    assert skipped.get("message") == "not run: the last 3 tests timed out"


def _lines(render_to, width: int = 80) -> list[str]:
    console = Console(record=True, width=width, file=io.StringIO())
    render_to(console)
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 100])
def test_the_card_fits_the_terminal_with_every_test_id_whole(width):
    report = _mutant_report()
    lines = _lines(lambda console: render(report, console), width)
    assert max(map(len, lines)) <= width
    for test in FAILING:
        assert any(test in line for line in lines), test
    # a wrapped value goes on under itself, not under its label
    exercise = next(i for i, line in enumerate(lines) if line.startswith("Exercise  "))
    assert lines[exercise + 1].startswith(" " * 10 + "cross-attention") or width > 80
    bug = next(i for i, line in enumerate(lines) if line.startswith("Likely bug  "))
    assert lines[bug + 1].startswith("        or  logits not scaled")
    assert lines[bug + 2].startswith(" " * 12 + "(the hidden tests fail")
    assert lines[bug + 3].startswith(" " * 12) or width > 80


def test_grade_list_fits_80_columns_with_every_word_whole():
    from grader.run.catalog import catalog_rows, render_catalog

    lines = _lines(render_catalog)
    assert max(map(len, lines)) <= 80
    words = {w for line in lines for w in line.replace("│", " ").replace("┃", " ").split()}
    for row in catalog_rows():
        for value in (row.id, row.seed, *" ".join(row.levels).split(), *row.packages):
            assert value in words or f"{value}," in words, value
    assert {"title,", "levels,", "packages,", "seed", "tests", "points"} <= words

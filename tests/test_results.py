"""Scoring and serialising, without a kernel."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

from rich.console import Console

from grader.core.results import CellError, CheckResult, CutOutput, GradeReport
from grader.report.card import render, to_gradescope, to_json, to_junit
from grader.verdict.score import headlines, summarise

LEVELS = ["shapes", "masks", "parity"]


def _t(id, level, status, points=1.0, message=""):
    return CheckResult(
        id, level, LEVELS[level - 1], status, points if status == "passed" else 0, points, message
    )


def test_level_reached_stops_at_the_first_incomplete_level():
    tests = [_t("a", 1, "passed"), _t("b", 2, "failed"), _t("c", 3, "passed")]
    levels, reached = summarise(LEVELS, tests)
    assert reached == 1
    assert [(lv.passed, lv.total) for lv in levels] == [(1, 1), (0, 1), (1, 1)]


def test_all_passed_reaches_the_top_and_none_passed_reaches_nothing():
    assert summarise(LEVELS, [_t(str(i), i, "passed") for i in (1, 2, 3)])[1] == 3
    assert summarise(LEVELS, [_t(str(i), i, "not_implemented") for i in (1, 2, 3)])[1] == 0


def _report(tests):
    levels, reached = summarise(LEVELS, tests)
    return GradeReport(
        exercise="demo", title="Demo", notebook="nb.ipynb",
        score=sum(t.score for t in tests), max_score=sum(t.max_score for t in tests),
        level_reached=reached, level_reached_name=LEVELS[reached - 1] if reached else "",
        levels=levels, duration_s=1.23456, tests=tests,
        cell_errors=[CellError(4, "error", "NameError: name 'x' is not defined")],
    )  # fmt: skip


def test_json_has_the_documented_fields():
    report = _report(
        [
            _t("a", 1, "passed"),
            _t("b", 2, "failed", message="weights on padded keys: max 0.31, want < 1e-06"),
        ]
    )
    data = json.loads(to_json(report))
    for key in (
        "exercise",
        "notebook",
        "score",
        "max_score",
        "level_reached",
        "duration_s",
        "tests",
        "cell_errors",
    ):
        assert key in data
    assert set(data["tests"][0]) >= {
        "id",
        "level",
        "level_name",
        "status",
        "score",
        "max_score",
        "message",
        "hidden",
    }
    assert data["duration_s"] == 1.235
    assert not report.full_marks


def test_junit_marks_failures_and_skips():
    report = _report(
        [
            _t("a", 1, "passed"),
            _t("b", 2, "failed", message="bad"),
            _t("c", 3, "not_implemented", message="not implemented: f"),
            _t("d", 3, "skipped", message="not run"),
        ]
    )
    suite = ET.fromstring(to_junit(report))
    # no test says why d did not run: one more testcase, an error, does
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "2", "1")
    assert suite.find("testcase[@name='tests_not_run']/error").get("message") == "not run"
    assert suite.find("testcase[@name='b']/failure").get("message") == "bad"
    stub = suite.find("testcase[@name='c']/failure")  # a stub fails a required test
    assert stub.get("type") == "not_implemented" and stub.get("message") == "not implemented: f"


def test_report_card_shows_levels_failures_cell_errors_and_score():
    report = _report(
        [
            _t("a", 1, "passed"),
            _t("b", 2, "failed", message="weights on padded keys: max 0.31, want < 1e-06"),
        ]
    )
    console = Console(record=True, width=100)
    render(report, console)
    text = console.export_text()
    assert "weights on padded keys: max 0.31" in text
    assert "NameError" in text
    assert "Score 1/2" in text
    assert "level 1 (shapes)" in text


def test_report_card_shows_how_cut_output_began_and_how_much_was_cut():
    report = replace(
        _report([_t("a", 1, "passed")]), cut_output=[CutOutput(3, "spam\nspam", 99_000)]
    )
    console = Console(record=True, width=100)
    render(report, console)
    text = console.export_text()
    assert "99,000 chars" in text
    assert "spam⏎ spam" in text
    assert json.loads(to_json(report))["cut_output"] == [
        {"cell": 3, "start": "spam\nspam", "cut": 99_000}
    ]


def test_gradescope_results_follow_its_spec():
    report = _report(
        [
            _t("a", 1, "passed"),
            replace(
                _t("b", 2, "not_implemented", message="not implemented: MHA.forward"), hidden=False
            ),
            _t("c", 2, "timeout", message="forward ran past 20 s"),
        ]
    )
    results = json.loads(to_gradescope(report))
    assert results["score"] == 1 and results["execution_time"] == 1
    assert "Cell 4 (error): NameError" in results["output"]
    assert [(t["number"], t["name"], t["status"]) for t in results["tests"]] == [
        ("1.1", "shapes: a", "passed"),
        ("2.1", "masks: b", "failed"),
        ("2.2", "masks: c", "failed"),
    ]
    a, b, c = results["tests"]
    assert (a["output"], a["score"], a["max_score"]) == ("", 1, 1)
    assert b["output"] == "not implemented: MHA.forward" and b["visibility"] == "visible"
    assert c["output"] == "timeout: forward ran past 20 s" and c["visibility"] == "after_published"


# -- headlines: a package missing from the grading environment, said once ----------------


def _missing(cell, module, guard=False):
    if guard:  # the kernel guard's refusal of a package outside the environment
        return CellError(
            cell,
            "error",
            f"ModuleNotFoundError: {module} is not available in the grading environment",
        )
    return CellError(cell, "error", f"ModuleNotFoundError: No module named '{module}'")


def test_a_missing_package_is_headlined_once_at_the_first_cell_that_imports_it():
    errors = [
        CellError(1, "error", "NameError: name 'x' is not defined"),
        _missing(2, "foo"),
        _missing(5, "foo"),
        _missing(6, "bar", guard=True),
        CellError(7, "timeout", "ModuleNotFoundError: No module named 'baz'"),
    ]
    assert headlines(errors) == [
        "cell 2: `foo` is not available in the grading environment",
        "cell 6: `bar` is not available in the grading environment",
    ]


def test_no_headline_without_a_missing_module():
    assert (
        headlines([CellError(3, "error", "ImportError: cannot import name 'x' from 'torch'")]) == []
    )
    assert headlines([]) == []


def test_a_missing_submodule_is_named_in_full():
    assert headlines([_missing(4, "torch.not_there")]) == [
        "cell 4: `torch.not_there` is not available in the grading environment"
    ]


def test_headlines_lead_the_card_and_reach_json_gradescope_and_junit():
    line = "cell 2: `foo` is not available in the grading environment"
    report = replace(_report([_t("a", 1, "failed", message="bad")]), headlines=[line])
    console = Console(record=True, width=120)
    render(report, console)
    text = console.export_text()
    assert line in text and text.index(line) < text.index("Levels")
    assert json.loads(to_json(report))["headlines"] == [line]
    assert json.loads(to_gradescope(report))["output"].splitlines()[0] == f"{line}."
    system_out = ET.fromstring(to_junit(report)).find("system-out").text
    assert json.loads(system_out)["headlines"] == [line]


def test_a_report_without_headlines_says_so_with_an_empty_list():
    report = _report([_t("a", 1, "passed")])
    assert json.loads(to_json(report))["headlines"] == []
    assert json.loads(to_gradescope(report))["output"].startswith("Score 1/1")

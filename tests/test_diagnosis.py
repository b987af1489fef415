"""What the card says first, without a kernel: the root cause of failed cells and the tests
it blocked, identical failures on one row, the likely bug from the known bugs' patterns,
and the report for the candidate (`--reveal`)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import nbformat
from rich.console import Console

from grader.core.notebook import Notebook
from grader.core.outcomes import UNDEFINED, Status
from grader.core.results import CellError, CheckResult, GradeReport, Problem
from grader.report.card import failure_rows, for_candidate, render, to_html, to_markdown
from grader.suite.exercise import Exercise
from grader.tools.hints import hints_document, hints_sources, stale_hints
from grader.verdict.diagnosis import HINTS_FILE, as_in_the_cell, hints, pattern, root_cause
from grader.verdict.score import summarise

LEVELS = ["shapes", "masks", "parity"]


def _t(id, level=1, status="passed", message="", **fields) -> CheckResult:
    score = 1 if status == "passed" else 0
    return CheckResult(id, level, LEVELS[level - 1], Status(status), score, 1, message, **fields)


def _report(tests, **fields) -> GradeReport:
    levels, reached = summarise(LEVELS, tests)
    return GradeReport(
        exercise="demo", title="Demo", notebook="nb.ipynb",
        score=sum(t.score for t in tests), max_score=len(tests),
        level_reached=reached, level_reached_name=LEVELS[reached - 1] if reached else "",
        levels=levels, duration_s=1.0, tests=tests, cell_errors=[], **fields,
    )  # fmt: skip


def _notebook(*cells: tuple[str, str]) -> Notebook:
    """cells: (kind, source); kind "md" or "code"."""
    node = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(s) if k == "md" else nbformat.v4.new_code_cell(s)
            for k, s in cells
        ]
    )
    return Notebook(Path("nb.ipynb"), node)


def _card(report: GradeReport) -> str:
    out = io.StringIO()
    render(report, Console(file=out, width=240, color_system=None))
    return out.getvalue()


# -- the root cause ------------------------------------------------------------------------

NOTEBOOK = _notebook(
    ("md", "# Title"),
    ("code", "import torch\nimport tiktokenx"),  # cell 2 fails at line 2
    ("md", "## Attention"),
    ("code", "class Attention(torch.nn.Module):\n    pass"),  # cell 4: NameError (cascade)
    ("code", "def helper():\n    return 1"),  # cell 5 runs
    ("code", "\n\nclass Config:\n    x = 1 / 0"),  # cell 6 fails on its own (IPython drops
    # the leading blank lines before it numbers the lines)
)
ERRORS = [
    CellError(2, Status.ERROR, "ModuleNotFoundError: No module named 'tiktokenx'", line=2),
    CellError(4, Status.ERROR, "NameError: name 'torch' is not defined", line=1),
    CellError(6, Status.ERROR, "ZeroDivisionError: division by zero", line=2),
]


def test_the_root_cause_is_the_first_failed_cell_with_its_line_and_the_tests_it_blocked():
    tests = [
        _t("a", 1, "error", UNDEFINED.format("Attention")),  # cell 4 failed because of cell 2
        _t("b", 2, "error", UNDEFINED.format("Attention.forward")),
        _t("c", 2, "error", UNDEFINED.format("Config")),  # cell 6 failed on its own
        _t("d", 3, "error", UNDEFINED.format("Renamed")),  # defined nowhere: not blocked
        _t("e", 3, "failed", "wrong"),
    ]
    marked, cause, own = root_cause(NOTEBOOK, tests, ERRORS)
    assert cause is not None and own == []
    assert (cause.cell, cause.line, cause.source, cause.blocked) == (2, 2, "import tiktokenx", 2)
    assert [(t.problem, t.blocked_by) for t in marked] == [
        (Problem.BLOCKED, 2), (Problem.BLOCKED, 2), (Problem.BLOCKED, 6), ("", 0), ("", 0),
    ]  # fmt: skip
    assert [t.verdict for t in marked] == [
        "blocked by cell 2", "blocked by cell 2", "blocked by cell 6", "error", "wrong answer",
    ]  # fmt: skip


def test_the_line_that_raised_is_numbered_as_the_cell_shows_it():
    [error] = as_in_the_cell(NOTEBOOK, ERRORS[2:])  # IPython said line 2
    tests = [_t("c", 2, "error", UNDEFINED.format("Config"))]
    _, cause, _ = root_cause(NOTEBOOK, tests, [error])
    assert cause is not None and (cause.cell, cause.line, cause.source) == (6, 4, "x = 1 / 0")


def test_no_failed_cell_no_root_cause():
    tests = [_t("a", 1, "error", UNDEFINED.format("Attention"))]
    assert root_cause(NOTEBOOK, tests, []) == (tests, None, [])


def test_a_cell_that_does_not_compile_blocks_what_it_starts_to_define():
    nb = _notebook(
        ("code", "import torch"),
        ("code", "def layer_norm(x, w b):\n    return x\n\n\nclass LayerNorm:\n    pass"),
        ("code", "def self_check():\n    assert layer_norm(1, 2, 3) == 1\n\n\nself_check()"),
    )
    errors = [
        CellError(2, Status.ERROR, "SyntaxError: invalid syntax", line=1),
        CellError(3, Status.ERROR, "NameError: name 'layer_norm' is not defined", line=5),
    ]
    tests = [
        _t("a", 1, "error", UNDEFINED.format("layer_norm")),
        _t("b", 2, "error", UNDEFINED.format("LayerNorm.forward")),
        _t("c", 2, "error", "raised NameError: name 'layer_norm' is not defined"),  # a helper's
        _t("d", 3, "failed", "wrong"),
    ]
    marked, cause, own = root_cause(nb, tests, errors)
    assert cause is not None and (cause.cell, cause.blocked) == (2, 3)
    assert [t.blocked_by for t in marked] == [2, 2, 2, 0]
    assert own == []  # the self-check's NameError is cell 2's doing


def test_a_cell_that_blocks_no_test_is_the_notebooks_own_failure_not_the_root_cause():
    nb = _notebook(
        ("code", "def f(x):\n    return x"),
        ("code", "print(f(1) / 0)"),  # a try-out
        ("code", "def self_check():\n    assert f(1) == 2, 'f(1) is 2'\n\n\nself_check()"),
    )
    errors = [
        CellError(2, Status.ERROR, "ZeroDivisionError: division by zero", line=1),
        CellError(3, Status.ERROR, "AssertionError: f(1) is 2", line=5),
    ]
    marked, cause, own = root_cause(nb, [_t("a", 1, "failed", "wrong")], errors)
    assert cause is None and marked[0].problem == ""
    assert [(o.cell, o.self_check, o.source) for o in own] == [
        (2, False, "print(f(1) / 0)"), (3, True, "self_check()"),
    ]  # fmt: skip
    report = _report(marked, own_failures=own, hints=["f off by one?"])
    card = _card(report)
    assert "Root cause" not in card
    assert card.index("Likely bug") < card.index("Also failed  cell 2, line 1: ZeroDivision")
    assert "Self-check  your self-check failed: cell 3, line 5: AssertionError: f(1) is 2" in card
    again = GradeReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.own_failures == own


def test_the_card_opens_with_the_root_cause_and_one_row_for_the_blocked_tests():
    tests = [_t(f"t{i}", 1 + i % 3, "error", UNDEFINED.format("Attention")) for i in range(33)]
    marked, cause, _ = root_cause(NOTEBOOK, tests, ERRORS)
    report = _report(
        marked, root_cause=cause, headlines=["cell 2: `tiktokenx` is not available here"]
    )
    card = _card(report)
    assert card.index("Root cause  cell 2, line 2: ModuleNotFoundError") < card.index("Levels")
    assert "> import tiktokenx" in card
    assert "33 of 33 tests could not run because of it" in card
    assert "not available here" not in card  # the headline the root cause already says
    rows = failure_rows(report)
    assert len(rows) == 1 and rows[0].levels == "1-3" and len(rows[0].tests) == 33
    assert rows[0].verdict == "blocked by cell 2"
    assert "33 tests" in card and "they need Attention, defined by a cell that failed" in card


def test_identical_failures_collapse_into_one_row_with_a_count():
    stub = "not implemented: MultiHeadAttention._apply_masks"
    tests = [_t(f"t{i}", 1 + i % 3, "not_implemented", stub) for i in range(15)]
    tests += [_t("p", 3, "failed", "output: 3 of 8 elements outside the tolerance", hidden=False)]
    report = _report(tests)
    rows = failure_rows(report)
    assert [r.title for r in rows] == [
        "15 tests need MultiHeadAttention._apply_masks", "p (public)",
    ]  # fmt: skip
    card = _card(report)
    assert "15 tests need MultiHeadAttention._apply_masks" in card
    assert "t0, t1, t2 +12 more" in card
    assert "wrong answer: output: 3 of 8 elements" in card
    assert "p (public)" in card and "(public): also in the candidate's self-check" in card


def test_each_test_shows_its_description_and_interface_problems_are_labelled():
    tests = [
        _t("a", 1, "failed", "output: got a tuple of 2, want a torch.Tensor", problem=Problem.INTERFACE,
           description="forward returns the output tensor alone."),
        _t("b", 2, "failed", "weights on padded keys: max 0.31",
           description="Padded keys get zero weight."),
    ]  # fmt: skip
    report = _report(tests)
    card = _card(report)
    assert "interface: output: got a tuple of 2" in card
    assert "forward returns the output tensor alone." in card
    assert "wrong answer: weights on padded keys" in card
    assert json.loads(json.dumps(report.to_dict()))["tests"][1]["description"] == (
        "Padded keys get zero weight."
    )
    md = to_markdown(report)
    assert "interface: output: got a tuple of 2" in md and "Padded keys get zero weight." in md


# -- hints ---------------------------------------------------------------------------------


def _exercise(tmp_path: Path, known: list[tuple[str, str, dict[str, str]]]) -> Exercise:
    (tmp_path / HINTS_FILE).write_text(hints_document(known))
    return Exercise("demo", "Demo", "", LEVELS, (), folder=tmp_path)


SCALE = {"parity_a": "output: # of # elements outside the tolerance", "parity_b": "x off by #"}


def test_a_failure_pattern_that_matches_a_known_bug_names_it(tmp_path):
    exercise = _exercise(
        tmp_path,
        [
            ("scale", "scaled by 1/sqrt(d_out)?", SCALE),
            ("other", "no scaling at all?", {**SCALE, "parity_b": "different kind"}),
            ("axis", "softmax over the queries?", {"sums": "rows sum to #"}),
        ],
    )
    tests = [
        _t("shapes"), _t("parity_a", 3, "failed", "output: 7 of 840 elements outside the tolerance"),
        _t("parity_b", 3, "failed", "x off by 0.08"),
    ]  # fmt: skip
    assert pattern(tests) == SCALE
    assert hints(exercise, tests) == ["scaled by 1/sqrt(d_out)?"]  # messages too
    other = [*tests[:2], _t("parity_b", 3, "failed", "another message")]
    # the same tests with other messages: asked, not said (another bug may fail them so)
    assert hints(exercise, other) == [
        "perhaps: scaled by 1/sqrt(d_out)?",
        "perhaps: no scaling at all?",
    ]
    assert hints(exercise, [_t("shapes"), _t("parity_a"), _t("parity_b")]) == []  # all pass


def test_a_near_pattern_is_a_perhaps_and_a_far_one_nothing(tmp_path):
    known = {f"t{i}": "m" for i in range(10)}
    exercise = _exercise(tmp_path, [("bug", "the bug?", known)])
    near = [_t(f"t{i}", 1, "failed", "m") for i in range(9)]  # 9 of the 10
    assert hints(exercise, near) == ["perhaps: the bug?"]
    far = [_t(f"t{i}", 1, "failed", "m") for i in range(5)]
    assert hints(exercise, far) == []


def test_no_hint_while_tests_are_not_implemented_blocked_or_the_grading_is_void(tmp_path):
    exercise = _exercise(tmp_path, [("bug", "the bug?", {"a": "m"})])
    assert hints(exercise, [_t("a", 1, "failed", "m")]) == ["the bug?"]
    assert hints(exercise, [_t("a", 1, "failed", "m")], voided=True) == []
    assert hints(exercise, [_t("a", 1, "failed", "m"), _t("b", 1, "not_implemented")]) == []
    blocked = _t("b", 1, "error", "x", problem=Problem.BLOCKED, blocked_by=2)
    assert hints(exercise, [_t("a", 1, "failed", "m"), blocked]) == []


def test_hints_json_out_of_step_with_the_corpus_is_reported(tmp_path, monkeypatch):
    exercise = Exercise("demo", "Demo", "", LEVELS, (), folder=tmp_path)
    assert stale_hints(exercise) == []  # no corpus: nothing to check
    corpus = [("scale", "scaled by d_out?"), ("axis", "")]
    monkeypatch.setattr("grader.tools.hints.mutant_hints", lambda exercise: corpus)
    stale = stale_hints(exercise)
    assert stale[0].endswith("corpus.py: axis has no hint")
    assert stale[1].endswith("hints.json: missing or unreadable: run `grade hints demo`")
    (tmp_path / HINTS_FILE).write_text(hints_document([("scale", "scaled by d_out?", {})]))
    assert stale_hints(exercise)[1].endswith("out of date with corpus.py: run `grade hints demo`")
    (tmp_path / HINTS_FILE).write_text(hints_document([(n, h, {}) for n, h in corpus]))
    assert stale_hints(exercise)[1].endswith(
        "out of date with the suite, corpus or solution: run `grade hints demo`"
    )  # no digest of what the patterns were graded with
    current = hints_document([(n, h, {}) for n, h in corpus], hints_sources(exercise))
    (tmp_path / HINTS_FILE).write_text(current)
    assert stale_hints(exercise) == [stale[0]]
    (tmp_path / "suite.py").write_text("MESSAGE = 'reworded'\n")  # the suite changed
    assert stale_hints(exercise)[1].endswith(
        "out of date with the suite, corpus or solution: run `grade hints demo`"
    )
    (tmp_path / "suite.py").write_text("MESSAGE = 'reworded'  # a comment\n")
    (tmp_path / HINTS_FILE).write_text(
        hints_document([(n, h, {}) for n, h in corpus], hints_sources(exercise))
    )
    (tmp_path / "suite.py").write_text("MESSAGE = (\n    'reworded'\n)\n")  # reformatted
    assert stale_hints(exercise) == [stale[0]]
    # a mutant that writes other text under the same name: its failures may differ
    (tmp_path / "corpus.py").write_text("NEW = 'x / (rms + eps)'\n")
    assert stale_hints(exercise)[1].endswith(
        "out of date with the suite, corpus or solution: run `grade hints demo`"
    )


def test_build_warns_of_twins_and_of_mutants_that_lose_points_before_their_level(
    tmp_path, monkeypatch
):
    from grader.suite.corpus import Mutant
    from grader.suite.exercise import Check
    from grader.tools.hints import corpus_warnings

    exercise = Exercise("demo", "Demo", "", LEVELS, (), folder=tmp_path)
    exercise.checks = [Check(t, n, 1, True, print) for n, t in ((1, "a"), (2, "b"), (3, "c"))]
    mutants = [Mutant("early", "", "", "parity"), Mutant("t1", "", "", "masks"),
               Mutant("t2", "", "", "masks")]  # fmt: skip
    monkeypatch.setattr(
        "grader.suite.corpus.load_corpus", lambda e: type("C", (), {"mutants": mutants})
    )
    fails = [
        ("early", "e?", {"a": "m", "c": "m"}),
        ("t1", "1?", {"b": "x"}),
        ("t2", "2?", {"b": "x"}),
    ]
    (tmp_path / HINTS_FILE).write_text(hints_document(fails))
    assert corpus_warnings(exercise) == [
        "demo: mutants t1, t2 fail identically (the same tests, the same messages): the card "
        "cannot tell their hints apart",
        "demo: mutant early first loses points at level 1 (shapes), not at its declared level "
        "3 (parity)",
    ]


def test_the_card_and_markdown_show_the_likely_bug():
    report = _report([_t("a", 1, "failed", "m")], hints=["softmax over the queries?"])
    assert "Likely bug  softmax over the queries?" in _card(report)
    assert "**Likely bug** softmax over the queries?" in to_markdown(report)
    two = replace(report, hints=["a?", "b?"])
    assert "Likely bug  a?" in _card(two) and "or  b?" in _card(two)
    assert "**Likely bug** a? *or* b?" in to_markdown(two)


# -- the report for the candidate ----------------------------------------------------------


def test_reveal_shows_levels_up_to_n_in_full_and_above_only_counts():
    tests = [
        _t("a", 1, "failed", "level one detail"),
        _t("b", 2, "passed"),
        _t("c", 3, "failed", "hidden secret: want 0.1234"),
        _t("d", 3, "failed", "public detail", hidden=False),
    ]
    report = _report(tests, hints=["a hint about c?"])
    shown = for_candidate(report, 2)
    assert [t.id for t in shown.tests] == ["a", "b", "d"]  # the public one stays
    assert shown.levels == report.levels  # every level's passed/total
    assert shown.hints == []  # it explains a test the candidate does not see
    for text in (to_markdown(shown), _card(shown), to_html(shown)):
        assert "hidden secret" not in text and "0.1234" not in text
        assert "level one detail" in text and "public detail" in text
        assert "0/2" in text  # level 3's count
    assert "levels above 2" in to_markdown(shown)
    full = for_candidate(report, 3)
    assert full.tests == report.tests and full.hints == report.hints


def test_the_html_report_escapes_candidate_text():
    report = _report([_t("a", 1, "failed", "<script>alert(1)</script>")])
    page = to_html(report)
    assert page.lstrip().lower().startswith("<!doctype html>")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page


def test_a_root_cause_survives_json():
    marked, cause, _ = root_cause(
        NOTEBOOK, [_t("a", 1, "error", UNDEFINED.format("Config"))], ERRORS
    )
    report = _report(marked, root_cause=cause, hints=["h?"])
    again = GradeReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == replace(report, duration_s=again.duration_s)


# -- interface failures, and a notebook of another exercise ----------------------------------


def test_failures_the_interface_explains_get_no_hint(tmp_path):
    known = {f"t{i}": "m" for i in range(10)}
    shares = {"w": "weights: got a float32 tensor of shape (#, #), want None"}
    exercise = _exercise(tmp_path, [("bug", "the bug?", known), ("none", "weights?", shares)])
    missing = UNDEFINED.format("AttentionConfig")
    undefined = [_t(f"t{i}", 1, "error", missing, problem=Problem.INTERFACE) for i in range(9)]
    assert hints(exercise, undefined) == []  # was "perhaps: the bug?" (9 of its 10 tests)
    # a known bug that fails a test for the interface the same way still names it
    weights = _t("w", 1, "failed", "weights: got a float32 tensor of shape (2, 3), want None")
    assert hints(exercise, [replace(weights, problem=Problem.INTERFACE)]) == ["weights?"]
    # a known bug alongside an interface problem it does not explain: the bug is named
    wrong = [_t(f"t{i}", 1, "failed", "m") for i in range(10)]
    assert hints(exercise, [*wrong, replace(undefined[0], id="other")]) == ["the bug?"]


def _graded_as(exercise: Exercise, notebook: Notebook, catalog: dict[str, Exercise]):
    from grader.verdict.build import build_report

    missing = UNDEFINED.format("AttentionConfig")
    tests = [_t(f"t{i}", 1, "error", missing, problem=Problem.INTERFACE) for i in range(9)]
    return build_report(exercise, notebook, tests, [], 0, 1.0, catalog=catalog)


def test_a_notebook_of_another_exercise_is_named_instead_of_a_hint(tmp_path):
    known = {f"t{i}": "m" for i in range(10)}
    graded = _exercise(tmp_path, [("bug", "per-head weights returned?", known)])
    graded.defines = ("AttentionConfig", "MultiHeadAttention")
    causal = Exercise("causal", "Causal", "", LEVELS, ("CausalAttention", "MultiHeadAttention"))
    other = Exercise("softmax", "Softmax", "", LEVELS, ("softmax_rows",))
    notebook = _notebook(
        ("md", "# Causal attention"),
        ("code", "class CausalAttention:\n    pass"),
        ("code", "class MultiHeadAttention:\n    pass"),
    )
    report = _graded_as(graded, notebook, {"demo": graded, "causal": causal, "softmax": other})
    assert report.hints == []
    assert report.headlines == [
        "the notebook looks like exercise causal, not demo: it defines causal's names, "
        "not AttentionConfig (graded against the wrong exercise?)"
    ]
    assert "looks like exercise causal, not demo" in _card(report)
    # no other exercise fits: no hint, and nothing else said
    report = _graded_as(graded, notebook, {"demo": graded, "softmax": other})
    assert report.hints == [] and report.headlines == []


def test_a_hint_asked_with_less_confidence_is_never_labelled_a_likely_bug():
    from grader.report.card import labelled_bug

    report = _report([_t("a", 1, "failed", "m")], hints=["perhaps: a?", "perhaps: b?"])
    assert labelled_bug(report) == "perhaps: a? or b?"
    assert labelled_bug(replace(report, hints=["a?"])) == "likely bug: a?"

"""The cohort's outputs (JSON list, gradebook CSV, JUnit, Gradescope folder, --output DIR)
and `grade merge`. Pure: reports are built by hand, no kernel."""

from __future__ import annotations

import csv
import html
import io
import json
import random
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

from grader.core.errors import UsageError
from grader.core.outcomes import Status
from grader.core.records import Finding
from grader.core.results import CellError, CheckResult, GradeReport, Outcome
from grader.core.text import encodable
from grader.kernel.cells import CellRun
from grader.report import (
    COLUMNS,
    merge_texts,
    slugs,
    sort_outcomes,
    to_csv,
    to_junit_batch,
    write_gradescope_folder,
    write_output_dir,
)
from grader.report.card import markdown_literal, to_gradescope, to_json, to_junit, to_markdown
from grader.verdict.score import summarise

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ["shapes", "masks", "parity"]
# Two exercises share `shared`, two share `common`: one gradebook column each.
SUITES = {
    "alpha": ["a1", "shared", "a2"],
    "beta": ["b1", "shared", "b2", "common"],
    "gamma": ["common", "g1"],
}
SCRIPT = "<script>alert(1)</script>"
HOSTILE = f"{SCRIPT} =cmd() [x](javascript:y) | *b* \r\n \x00\x1b[2J \ud800"


def to_json_list(outcomes) -> str:
    """`--json` of a batch, without the reference solutions (no exercise here has one)."""
    from grader.report.cohort import cohort, to_json_batch

    outcomes = list(outcomes)
    return to_json_batch(outcomes, cohort(outcomes))


def _report(notebook: str, exercise: str, passed: int, message: str = "") -> GradeReport:
    """A report whose first `passed` tests pass (1.5 points each), the rest fail."""
    tests = [
        CheckResult(
            test, min(i + 1, 3), LEVELS[min(i, 2)],
            Status.PASSED if i < passed else Status.FAILED,
            1.5 if i < passed else 0, 1.5, "" if i < passed else message or "wrong",
        )
        for i, test in enumerate(SUITES[exercise])
    ]  # fmt: skip
    levels, reached = summarise(LEVELS, tests)
    return GradeReport(
        exercise=exercise, title=exercise.title(), notebook=notebook,
        score=sum(t.score for t in tests), max_score=sum(t.max_score for t in tests),
        level_reached=reached, level_reached_name=LEVELS[reached - 1] if reached else "",
        levels=levels, duration_s=1.23456 + passed, tests=tests,
        cell_errors=[CellError(2, Status.ERROR, f"ValueError: {message}")] if message else [],
        torch_version="2.4.1", grader_version="0.1.0", python_version="3.11.7",
        suite_hash=f"{exercise}-hash",
    )  # fmt: skip


def _graded(notebook: str, exercise: str, passed: int, message: str = "") -> Outcome:
    report = _report(notebook, exercise, passed, message)
    return Outcome(notebook, report, exit_code=0 if report.full_marks else 1)


def _cohort() -> list[Outcome]:
    """Notebooks of three exercises, two that could not be graded, hostile names and text
    (whose order changes when escaped or defused: `(`, `-`, `'`, `=`, controls)."""
    return [
        _graded("subs/alice/hw.ipynb", "alpha", 3),
        _graded("subs/bob/hw.ipynb", "beta", 1, HOSTILE),
        _graded("=cmd().ipynb", "gamma", 0, SCRIPT),
        _graded(f"subs/{SCRIPT}.ipynb", "alpha", 2),
        _graded("-x\x01\ud800.ipynb", "beta", 4),
        _graded("(paren).ipynb", "gamma", 2),
        Outcome("subs/carol/hw.ipynb", error=f"cannot read: {HOSTILE}", exit_code=2),
        Outcome("'quoted.ipynb", error="exercise alpha, check a1: the suite raised", exit_code=3),
        _graded("zed/\x1b[2J.ipynb", "beta", 0),
        _graded("a\x7fz.ipynb", "alpha", 1),
        # escaping reverses these pairs' order: \x01 < 0 < \\ and \\ < ~ < \ufffe
        _graded("q0.ipynb", "alpha", 0),
        _graded("q\x01.ipynb", "gamma", 1),
        _graded("r~.ipynb", "beta", 2),
        Outcome("r\ufffe.ipynb", error="unreadable", exit_code=2),
    ]


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


# -- order and JSON ------------------------------------------------------------------------


def test_outcomes_sort_by_notebook_path_whatever_order_they_came_in():
    cohort = _cohort()
    shuffled = random.Random(0).sample(cohort, len(cohort))
    assert [o.notebook for o in sort_outcomes(shuffled)] == [
        o.notebook for o in sort_outcomes(cohort)
    ]
    plain = [o.notebook for o in sort_outcomes(cohort) if o.notebook.isprintable()]
    assert plain == sorted(plain)


def test_json_list_holds_each_report_and_error_entry_in_order():
    cohort = _cohort()
    text = to_json_list(reversed(cohort))
    text.encode("utf-8")  # no lone surrogate
    data = json.loads(text)["notebooks"]
    assert [d["notebook"] for d in data] == [encodable(o.notebook) for o in sort_outcomes(cohort)]
    carol = next(d for d in data if d["notebook"] == "subs/carol/hw.ipynb")
    assert carol == {
        "notebook": "subs/carol/hw.ipynb",
        "error": "cannot read: " + encodable(HOSTILE),
        "exit_code": 2,
        "score": 0,
        "max_score": 0,
    }
    alice = next(d for d in data if d["notebook"] == "subs/alice/hw.ipynb")
    assert alice == json.loads(to_json(_cohort()[0].report))
    assert Outcome.from_dict(alice).to_dict() == alice


# -- the gradebook -------------------------------------------------------------------------


def test_gradebook_has_the_fixed_columns_then_one_per_test_by_exercise_then_suite():
    header, *_ = _rows(to_csv(_cohort()))
    assert header == [
        "notebook", "exercise", "score", "max_score", "level_reached", "level_name",
        "duration_s", "error", "failed", "grader", "suite_hash", "torch", "python",
        "a1", "shared", "a2", "b1", "b2", "common", "g1",
    ]  # fmt: skip
    assert tuple(header[: len(COLUMNS)]) == COLUMNS


def test_gradebook_rows_score_their_own_exercise_and_leave_other_tests_empty():
    text = to_csv(_cohort())
    rows = {row[0]: row for row in _rows(text)[1:]}
    header = _rows(text)[0]
    alice = dict(zip(header, rows["subs/alice/hw.ipynb"], strict=True))
    assert alice == {
        "notebook": "subs/alice/hw.ipynb", "exercise": "alpha", "score": "4.5",
        "max_score": "4.5", "level_reached": "3", "level_name": "parity", "duration_s": "4.235",
        "error": "", "failed": "0", "grader": "0.1.0", "suite_hash": "alpha-hash",
        "torch": "2.4.1", "python": "3.11.7",
        "a1": "1.5", "shared": "1.5", "a2": "1.5", "b1": "", "b2": "", "common": "", "g1": "",
    }  # fmt: skip
    bob = dict(zip(header, rows["subs/bob/hw.ipynb"], strict=True))
    assert [bob[t] for t in ("a1", "shared", "a2", "b1", "b2", "common", "g1")] == [
        "", "0", "", "1.5", "0", "0", "",
    ]  # fmt: skip
    assert bob["failed"] == "3" and bob["score"] == "1.5" and bob["level_reached"] == "1"
    carol = dict(zip(header, rows["subs/carol/hw.ipynb"], strict=True))
    assert carol["error"].startswith("cannot read: <script>")
    assert carol["score"] == "0"
    assert [carol[c] for c in header if c not in ("notebook", "score", "error")] == [""] * 17


def test_gradebook_defuses_formulas_and_escapes_controls_in_candidate_text():
    text = to_csv(_cohort())
    text.encode("utf-8")
    notebooks = [row[0] for row in _rows(text)[1:]]
    assert "'=cmd().ipynb" in notebooks
    assert "'-x\\x01\\ud800.ipynb" in notebooks
    assert "''quoted.ipynb" in notebooks  # so that it reads back as itself
    assert "zed/\\x1b[2J.ipynb" in notebooks
    assert "\x00" not in text and "\x1b" not in text
    error = replace(_cohort()[6], error="=HYPERLINK(1)")
    assert _rows(to_csv([error]))[1][7] == "'=HYPERLINK(1)"
    for row in _rows(text)[1:]:
        assert not row[0].startswith(("=", "+", "-", "@", "\t", "\r"))
        assert not row[7].startswith(("=", "+", "-", "@", "\t", "\r"))


# -- JUnit ---------------------------------------------------------------------------------


def test_junit_batch_holds_one_suite_per_notebook_and_the_totals():
    cohort = _cohort()
    root = ET.fromstring(to_junit_batch(cohort).encode("utf-8"))
    suites = root.findall("testsuite")
    assert root.tag == "testsuites" and len(suites) == len(cohort)
    for total in ("tests", "failures", "errors", "skipped"):
        assert int(root.get(total)) == sum(int(s.get(total)) for s in suites)
    assert float(root.get("time")) == pytest.approx(sum(float(s.get("time")) for s in suites))
    alice = next(s for s in suites if s.get("name") == "subs/alice/hw.ipynb")
    single = ET.fromstring(to_junit(cohort[0].report))
    assert [ET.tostring(c) for c in alice.findall("testcase")] == [
        ET.tostring(c) for c in single.findall("testcase")
    ]
    properties = {p.get("name"): p.get("value") for p in alice.find("properties")}
    assert properties == {
        "notebook": "subs/alice/hw.ipynb", "exercise": "alpha", "score": "4.5",
        "max_score": "4.5", "level_reached": "3", "grader": "0.1.0",
        "suite_hash": "alpha-hash", "torch": "2.4.1", "python": "3.11.7",
    }  # fmt: skip


def test_junit_is_never_green_when_the_time_ran_out_before_any_test():
    report = _report("nb.ipynb", "alpha", 0)
    reason = "not run: grading passed its 5 s limit"
    report = replace(
        report, tests=[replace(t, status=Status.SKIPPED, message=reason) for t in report.tests]
    )
    suite = ET.fromstring(to_junit(report))
    assert suite.get("errors") == "1" and suite.get("skipped") == str(len(report.tests))
    [case] = [c for c in suite.findall("testcase") if c.find("error") is not None]
    assert case.get("name") == "tests_not_run" and case.find("error").get("message") == reason
    assert int(suite.get("tests")) == len(suite.findall("testcase"))


def test_junit_batch_says_why_a_notebook_could_not_be_graded():
    root = ET.fromstring(to_junit_batch(_cohort()).encode("utf-8"))
    carol = next(s for s in root if s.get("name") == "subs/carol/hw.ipynb")
    assert (carol.get("tests"), carol.get("errors")) == ("1", "1")
    error = carol.find("testcase/error")
    assert error.get("message").startswith(f"could not grade: cannot read: {SCRIPT}")
    assert error.get("message").endswith("\r\n \\x00\\x1b[2J \\ud800")
    assert {p.get("name"): p.get("value") for p in carol.find("properties")}["exit_code"] == "2"


def test_junit_batch_is_well_formed_for_hostile_names_and_text():
    text = to_junit_batch(_cohort())
    root = ET.fromstring(text.encode("utf-8"))
    names = [s.get("name") for s in root]
    assert f"subs/{SCRIPT}.ipynb" in names and "-x\\x01\\ud800.ipynb" in names
    assert "<script>" not in text  # escaped as &lt;script&gt;


# -- Gradescope ----------------------------------------------------------------------------


def test_gradescope_folder_has_one_results_file_per_notebook(tmp_path):
    cohort = _cohort()
    write_gradescope_folder(cohort, tmp_path / "gs")
    names = slugs(cohort)
    assert sorted(p.name for p in (tmp_path / "gs").iterdir()) == sorted(
        f"{name}.json" for name in names.values()
    )
    alice = (tmp_path / "gs" / f"{names['subs/alice/hw.ipynb']}.json").read_text("utf-8")
    assert json.loads(alice) == json.loads(to_gradescope(cohort[0].report))
    carol = json.loads((tmp_path / "gs" / "subs__carol__hw.json").read_text("utf-8"))
    assert carol["score"] == 0 and carol["tests"] == []
    assert carol["output"].startswith(f"Could not grade subs/carol/hw.ipynb: cannot read: {SCRIPT}")


# -- slugs ---------------------------------------------------------------------------------


def _slugs(*paths: str) -> dict[str, str]:
    """Slugs of a run in this folder: names inside it are relative, others kept."""
    return slugs((Outcome(path, error="x", exit_code=2) for path in paths), root=".")


def test_slugs_are_the_path_with_folders_joined_by_double_underscores():
    assert _slugs("subs/alice/hw.ipynb", "../up/hw.ipynb", "/abs/./path/hw.IPYNB") == {
        "subs/alice/hw.ipynb": "subs__alice__hw",
        "../up/hw.ipynb": "up__hw",
        "/abs/./path/hw.IPYNB": "abs__path__hw",
    }


def test_slugs_are_safe_file_names_for_any_path():
    paths = [
        f"subs/{SCRIPT}.ipynb", "-x\x01\ud800.ipynb", "..", "/", "élève/hw.ipynb",
        "张三.ipynb", ".hidden.ipynb", "a b/c;d.ipynb", "x" * 300 + ".ipynb",
        "index.ipynb", "CON.ipynb", "C:\\Users\\bob\\hw.ipynb",
    ]  # fmt: skip
    names = _slugs(*paths)
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", name) for name in names.values())
    assert all(len(name) <= 100 for name in names.values())
    assert len({name.lower() for name in names.values()}) == len(paths)
    assert names["élève/hw.ipynb"] == "eleve__hw"
    assert names["index.ipynb"] == "index_" and names["CON.ipynb"] == "CON_"
    assert names["C:\\Users\\bob\\hw.ipynb"] == "C__Users__bob__hw"


def test_colliding_slugs_get_a_suffix_from_their_path_in_any_order():
    paths = ["a/b.ipynb", "a__b.ipynb", "A/B.ipynb", "c.ipynb"]
    names = _slugs(*paths)
    assert names == _slugs(*reversed(paths))
    assert names["c.ipynb"] == "c"
    assert len({n.lower() for n in names.values()}) == 4
    assert all(re.fullmatch(r"a__b-[0-9a-f]{8}", names[p], re.IGNORECASE) for p in paths[:3])


# -- merge ---------------------------------------------------------------------------------

WRITERS = {"json": to_json_list, "csv": to_csv, "junit": to_junit_batch}


@pytest.mark.parametrize("shards", [1, 2, 3])
@pytest.mark.parametrize("kind", ["json", "csv", "junit"])
def test_merging_shards_gives_what_one_run_writes(kind, shards):
    write = WRITERS[kind]
    ordered = sort_outcomes(_cohort())
    parts = [ordered[i::shards] for i in range(shards)]  # round-robin, as --shard I/N
    texts = [(f"part{i}", write(random.Random(i).sample(p, len(p)))) for i, p in enumerate(parts)]
    assert merge_texts(texts) == (kind, write(_cohort()))
    assert merge_texts(list(reversed(texts))) == (kind, write(_cohort()))


def test_a_shard_without_the_first_exercise_still_merges_into_its_columns():
    cohort = _cohort()
    betas = [o for o in cohort if o.report and o.report.exercise == "beta"]
    rest = [o for o in cohort if o not in betas]
    assert _rows(to_csv(betas))[0][len(COLUMNS) :] == ["b1", "shared", "b2", "common"]
    merged = merge_texts([("beta.csv", to_csv(betas)), ("rest.csv", to_csv(rest))])
    assert merged == ("csv", to_csv(cohort))


def test_merging_single_notebook_files_gives_what_one_run_writes():
    cohort = _cohort()
    reports = [o for o in cohort if o.report]
    errors = [o for o in cohort if not o.report]
    junit = [(f"{i}.xml", to_junit(o.report)) for i, o in enumerate(reports)]
    junit.append(("errors.xml", to_junit_batch(errors)))
    assert merge_texts(junit) == ("junit", to_junit_batch(cohort))
    objects = [(f"{i}.json", to_json(o.report)) for i, o in enumerate(reports)]
    objects.append(("errors.json", to_json_list(errors)))
    assert merge_texts(objects) == ("json", to_json_list(cohort))


def _read_back(text: str) -> str:
    """`text` as `Path.read_text` gives it back from a file: newlines made universal."""
    return io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8").read()


def test_merge_survives_parts_read_back_from_files():
    ordered = sort_outcomes(_cohort())
    for write in WRITERS.values():
        parts = [(f"p{i}", _read_back(write(ordered[i::2]))) for i in range(2)]
        parts[0] = ("p0", "\ufeff" + parts[0][1])  # as a spreadsheet saves it
        assert merge_texts(parts)[1] == write(ordered)
        assert "\r" not in write(ordered)


def test_merge_refuses_parts_of_different_kinds():
    cohort = _cohort()
    with pytest.raises(UsageError, match=r"^a\.json is JSON but b\.csv is a CSV gradebook"):
        merge_texts([("a.json", to_json_list(cohort[:2])), ("b.csv", to_csv(cohort[2:]))])


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", r"^bad: is empty$"),
        ("hello, world\n", r"^bad: not JSON, a gradebook CSV or JUnit XML"),
        ("[1, 2", r"^bad: invalid JSON at line 1, column 6$"),
        ('[{"notebook": "a.ipynb"}]', r"^bad: entry 1: not a grade report"),
        ('{"score": 1}', r"^bad: entry 1: not a grading result"),
        ("<testsuites><testsuite", r"^bad: not well-formed XML"),
        ("<html/>", r"^bad: JUnit XML begins <testsuites> or <testsuite>, not <html>"),
        ("<testsuite name='x'/>", r"^bad: a <testsuite> without a notebook property"),
        ("<testsuites><testsuite name='a' tests='many'/></testsuites>", r"tests='many' is not"),
        ("notebook,exercise\na,b\n", r"^bad: not a gradebook"),
        (",".join(COLUMNS) + "\na,b\n", r"^bad: line 2 has 2 cells, the header 13$"),
    ],
)
def test_merge_refuses_a_part_it_cannot_read_naming_it(text, problem):
    good = ("good", to_json_list(_cohort()[:1]))
    with pytest.raises(UsageError, match=problem):
        merge_texts([("bad", text)])
    if text.startswith(("[", "{")):
        with pytest.raises(UsageError, match=problem):
            merge_texts([good, ("bad", text)])


@pytest.mark.parametrize("kind", ["json", "csv", "junit"])
def test_merge_refuses_shards_that_overlap_naming_the_notebook(kind):
    write = WRITERS[kind]
    cohort = sort_outcomes(_cohort())
    parts = [("one", write(cohort[:4])), ("two", write(cohort[3:]))]
    name = cohort[3].notebook
    with pytest.raises(
        UsageError, match=rf"^{re.escape(name)} appears in one and two: the shards overlap"
    ):
        merge_texts(parts)


def test_merge_refuses_a_part_given_twice():
    part = ("p.csv", to_csv(_cohort()[:1]))
    with pytest.raises(UsageError, match=r"^subs/alice/hw.ipynb appears twice in p.csv"):
        merge_texts([part, part])


def test_merge_refuses_nothing_to_merge():
    with pytest.raises(UsageError, match="no parts"):
        merge_texts([])


# -- --output DIR --------------------------------------------------------------------------

ORIGINAL = ROOT / "notebooks" / "mha_causal.ipynb"  # code cells 1, 3, 5, 7, 9


def _executed_outcome() -> Outcome:
    report = _report(str(ORIGINAL), "alpha", 1, HOSTILE)
    cells = (
        CellRun(1, Status.PASSED, "", f"imported {SCRIPT}\n\ud800"),
        CellRun(3, Status.ERROR, "NameError: name 'x' is not defined", "before\nname 'x' is not defined"),
        CellRun(5, Status.TIMEOUT, "ran past the 1 s cell limit and was interrupted", "tick\r", 1234),
        CellRun(7, Status.CRASHED, "the kernel died while running this cell"),
        CellRun(9, Status.SKIPPED, "not run: grading passed its 60 s limit"),
    )  # fmt: skip
    return Outcome(str(ORIGINAL), report, exit_code=1, cells=cells)


def _write_cohort(tmp_path: Path) -> tuple[Path, list[Outcome]]:
    module = ROOT / "notebooks" / "mha_module.ipynb"
    cohort = [
        _executed_outcome(),
        Outcome(str(module), error=f"kernel would not start: {HOSTILE}", exit_code=2),
        Outcome(f"gone/{SCRIPT}.ipynb", error=f"no such file {SCRIPT}", exit_code=2),
        _graded("={cmd}().ipynb", "gamma", 2),
    ]
    write_output_dir(cohort, tmp_path / "out")
    return tmp_path / "out", cohort


def test_output_dir_has_a_notebook_and_a_page_per_notebook_and_an_index(tmp_path):
    out, cohort = _write_cohort(tmp_path)
    names = slugs(cohort)
    original, module, gone, formula = (names[o.notebook] for o in cohort)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "index.html", "cohort.json", "grades.csv", "tests.csv", "similar.csv",
            f"{original}.ipynb", f"{original}.html",
            f"{module}.ipynb", f"{module}.html",  # could not be graded, but readable
            f"{gone}.html",  # could not be read: no notebook
            f"{formula}.html",  # no such file to rebuild: no notebook
        ]
    )  # fmt: skip
    assert gone == "gone__script_alert_1__script"  # the / of </script> is a folder


def test_executed_notebook_has_the_grading_outputs_and_the_report_last(tmp_path):
    out, cohort = _write_cohort(tmp_path)
    before = ORIGINAL.read_text("utf-8")
    path = out / f"{slugs(cohort)[str(ORIGINAL)]}.ipynb"
    node = nbformat.reads(path.read_text("utf-8"), as_version=4)
    nbformat.validate(node)
    code = {i: c for i, c in enumerate(node.cells) if c.cell_type == "code"}
    assert [code[i].execution_count for i in (1, 3, 5, 7, 9)] == [1, 2, 3, 4, None]
    assert code[1].outputs[0].text == f"imported {SCRIPT}\n\\ud800"
    stream, error = code[3].outputs
    assert stream.text == "before\n"
    assert (error.ename, error.evalue) == ("NameError", "name 'x' is not defined")
    assert [o.text for o in code[5].outputs] == [
        "tick\r",
        "[grader: 1,234 more characters of output were cut]\n",
        "[grader] timeout: ran past the 1 s cell limit and was interrupted\n",
    ]
    assert code[7].outputs[0].name == "stderr" and "kernel died" in code[7].outputs[0].text
    assert "not run" in code[9].outputs[0].text
    last = node.cells[-1]
    assert last.cell_type == "markdown" and last.id == "grader-report"
    assert last.metadata == {"grader": {"report": True}}
    assert last.source == to_markdown(cohort[0].report)
    assert ORIGINAL.read_text("utf-8") == before  # the original is left alone
    module = nbformat.reads(
        (out / f"{slugs(cohort)[cohort[1].notebook]}.ipynb").read_text("utf-8"), as_version=4
    )
    nbformat.validate(module)
    assert module.cells[-1].source.startswith("## Could not grade")
    assert "&lt;script&gt;" in module.cells[-1].source


def test_the_report_cell_renders_candidate_text_as_text():
    report = replace(
        _report(f"{SCRIPT}.ipynb", "beta", 1, HOSTILE),
        headlines=[f"# {SCRIPT}"],
        integrity=[Finding("machinery", HOSTILE, 2, 3)],
        notes=[f"1. {HOSTILE}"],
    )
    source = to_markdown(report)
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(source)
    assert "<script" not in rendered and "<a " not in rendered  # no markup, no link
    assert "<em>b</em>" not in rendered  # the candidate's *b* stays literal
    assert rendered.count("<em>") == 2  # "Graded with", and the names of a grouped row
    assert "<ol" not in rendered and "<h1" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    assert "\x00" not in source and "\ud800" not in source
    # a header and its rows: levels (3), what did not pass (1: the two failures are alike),
    # cells (1), integrity (1)
    assert rendered.count("<tr>") == (1 + 3) + (1 + 1) + (1 + 1) + (1 + 1)
    assert markdown_literal("a" * 600).endswith("…") and len(markdown_literal("a" * 600)) == 500
    # "&" reads as written, unless it would start an entity
    assert markdown_literal("shapes & reduction") == "shapes & reduction"
    assert markdown_literal("&lt;b&gt; &#60;") == "&amp;lt;b&amp;gt; &amp;#60;"
    literal = MarkdownIt("commonmark", {"html": True}).render(markdown_literal("a & b &lt; c"))
    assert literal.strip() == "<p>a &amp; b &amp;lt; c</p>"


def test_pages_escape_candidate_text(tmp_path):
    out, cohort = _write_cohort(tmp_path)
    names = slugs(cohort)
    for page in out.glob("*.html"):
        text = page.read_text("utf-8")
        assert "<script>alert" not in text and "<script src" not in text, page.name
        assert text.count("<script") == (page.name == "index.html"), page.name  # sorting
        assert "\x00" not in text and "\x1b" not in text
    index = (out / "index.html").read_text("utf-8")
    assert "&lt;script&gt;" in index
    assert index.count("<tr class=") == 4
    assert f'href="{names[str(ORIGINAL)]}.ipynb"' in index
    assert f'href="{names[cohort[2].notebook]}.html"' in index
    assert f'href="{names[cohort[2].notebook]}.ipynb"' not in index
    card = (out / f"{names[str(ORIGINAL)]}.html").read_text("utf-8")
    assert "Level reached" in card and 'href="index.html"' in card
    gone = (out / f"{names[cohort[2].notebook]}.html").read_text("utf-8")
    assert "no such file &lt;script&gt;" in gone and "exit code 2: a problem with the input" in gone
    braces = (out / f"{names[cohort[3].notebook]}.html").read_text("utf-8")
    assert (
        "<title>={cmd}().ipynb: report card</title>" in braces
        and "</span>={cmd}().ipynb\n" in braces
    )


def test_a_notebook_cell_imitating_the_report_is_renamed_and_noted(tmp_path):
    """The grader's report cell is the only one with its id and metadata."""
    from grader.report.executed import executed_notebook

    node = nbformat.read(ORIGINAL, as_version=4)
    forged = nbformat.v4.new_markdown_cell("## Score 53/53", metadata={"grader": {"report": True}})
    forged.id = "grader-report"
    node.cells.append(forged)
    path = tmp_path / "forged.ipynb"
    nbformat.write(node, path)
    outcome = _graded(str(path), "beta", 1)
    executed = nbformat.reads(executed_notebook(outcome) or "", as_version=4)
    reports = [c for c in executed.cells if c.get("metadata", {}).get("grader")]
    assert [c.id for c in reports] == ["grader-report"] and reports[0] is executed.cells[-1]
    assert executed.cells[-2].id == f"notebook-cell-{len(node.cells)}"
    assert f"own cell {len(node.cells)} imitated this report" in executed.cells[-1].source


@pytest.mark.parametrize("mark", ["\u202e", "\u2066", "\u200b", "\u2028", "\ufeff"])
def test_text_that_reorders_or_hides_itself_is_escaped_everywhere(mark):
    message = f"expected 1{mark}0 got 2"
    report = _report("nb.ipynb", "beta", 1, message)
    escaped = f"\\u{ord(mark):04x}"
    for text in (to_markdown(report), to_gradescope(report), to_junit(report)):
        assert mark not in text and escaped in text


# -- what each cohort output says about a notebook: versions, the likely bug, short rows ---

HINT = "logits scaled by 1/sqrt(embed_dim), not 1/sqrt(head_dim)?"
RAW = (
    "output y vs nn.MultiheadAttention: 120 of 120 elements outside the tolerance; worst at "
    "[1, 2, 8]: got -0.1728022, want -0.1202299, off by 0.0526 where 1.12e-07 is allowed"
)


def _mutants() -> list[Outcome]:
    """Notebooks that fail as a known bug makes them fail (a hint), as an unknown one does
    (no hint: the first failure's long message), and one that could not be graded."""
    known = replace(_report("subs/known.ipynb", "beta", 1, RAW), cell_errors=[], hints=[HINT])
    unknown = replace(_report("subs/unknown.ipynb", "beta", 1, RAW), cell_errors=[])
    return [
        Outcome(known.notebook, known, exit_code=1),
        Outcome(unknown.notebook, unknown, exit_code=1),
        Outcome("subs/bad.ipynb", error="subs/bad.ipynb: JSON but not a notebook", exit_code=2),
    ]


def test_every_gradescope_result_says_what_graded_it(tmp_path):
    """extra_data carries the suite hash and the Python version, graded or not."""
    cohort = _mutants()
    write_gradescope_folder(cohort, tmp_path / "gs", root=".")
    for name in ("subs__known", "subs__bad"):
        extra = json.loads((tmp_path / "gs" / f"{name}.json").read_text("utf-8"))["extra_data"]
        assert {"suite_hash", "python_version", "grader_version"} <= set(extra), name
    known = json.loads((tmp_path / "gs" / "subs__known.json").read_text("utf-8"))["extra_data"]
    assert (known["suite_hash"], known["python_version"]) == ("beta-hash", "3.11.7")


def test_the_summary_table_shows_the_likely_bug_in_short_rows_at_80_columns():
    from rich.console import Console

    from grader.report.progress import render_summary

    console = Console(record=True, width=80, file=io.StringIO())
    render_summary(_mutants(), console, 12.0)
    text = console.export_text()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    flat = " ".join(text.split())
    assert f"likely bug: {HINT}" in flat
    assert "off by 0.0526" not in flat  # the raw failure stays on the notebook's card
    assert "3 not passed; first: shared (wrong answer)" in flat
    start = next(i for i, line in enumerate(lines) if "subs/known.ipynb" in line)
    rows = lines[start : lines.index(" " * 80, start)]
    assert len(rows) <= 3 * 3  # per notebook: its name, then what went wrong in two lines
    assert sum("subs/bad.ipynb" in line for line in rows) == 1  # not repeated in its reason


def test_the_index_shows_the_likely_bug_and_puts_the_links_first(tmp_path):
    cohort = _mutants()
    write_output_dir(cohort, tmp_path / "out")
    index = (tmp_path / "out" / "index.html").read_text("utf-8")
    rows = re.findall(r"<tr class=.*?</tr>", index)
    assert len(rows) == 3
    for row in rows:
        first, *rest = re.findall(r"<td[^>]*>(.*?)</td>", row)
        assert '.html">' in first and not any("href" in cell for cell in rest)
        assert rest[-1].count("<br>") <= 1  # what went wrong: two lines at most
    known = next(row for row in rows if ">known.ipynb</a>" in row)  # relative to subs/
    assert f"likely bug: {html.escape(HINT)}" in known and "off by" not in index
    # usable on a laptop screen and narrower: the table takes the page's width, and a
    # narrow screen stacks each row's cells (tests/test_browser.py looks at it)
    assert "width: 100%" in index and "@media (max-width:" in index

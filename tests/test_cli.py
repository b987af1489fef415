"""The `grade` command line: exit codes, one-line errors, catalog, build check."""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from rich.console import Console

from grader.cli import main
from grader.cli.args import format_size, grading_parser, parse_size
from grader.core.limits import Limits
from grader.run import catalog
from grader.run.inprocess import InProcessSession
from grader.run.profile import render_profile, run_profile
from grader.suite.exercise import Exercise, load_catalog
from grader.suite.handle import Kernel
from grader.tools.hints import hints_document
from tests.cohort import Cohort
from tests.exercise_packages import (
    BROKEN,
    BROKEN_PROBLEMS,
    GOOD_SUITE,
    exercises_package,
    forget_package,
)
from tests.helpers import ROOT, SOLUTIONS, grade, grading_until_started, leftovers, notebook_with


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "no notebooks (.ipynb) in"),  # a folder is a batch
        (lambda p: p.write_text(""), "file is empty"),
        (lambda p: p.write_text("{oops"), "invalid JSON"),
        (lambda p: p.write_bytes(b"\x00\xff" * 100), "not a text file"),
    ],
)
def test_unreadable_notebook_exits_2_with_one_line(tmp_path, capsys, setup, expected):
    path = tmp_path / "nb.ipynb"
    setup(path)
    code, out, err = _run(capsys, str(path))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and expected in err and str(path) in err
    assert "Traceback" not in err


def test_unknown_exercise_exits_2(tmp_path, capsys):
    code, _, err = _run(capsys, str(SOLUTIONS / "mha_interview.ipynb"), "--exercise", "nope")
    assert code == 2 and "unknown exercise 'nope'" in err


def test_notebook_matching_no_exercise_exits_2(tmp_path, capsys):
    path = tmp_path / "plain.ipynb"
    nbformat.write(notebook_with("x = 1"), path)
    code, _, err = _run(capsys, str(path))
    assert code == 2 and "pass --exercise" in err


@pytest.mark.parametrize("flag", [["--cell-timeout", "0"], ["--memory-limit", "lots"], ["--bogus"]])
def test_bad_flags_exit_2(capsys, flag):
    code, _, err = _run(capsys, str(SOLUTIONS / "mha_interview.ipynb"), *flag)
    assert code == 2 and err.startswith("grade: error:") and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--junit", "--gradescope"])
@pytest.mark.parametrize(
    ("where", "problem"),
    [("absent/out.json", "no folder"), (".", "is a directory")],
)
def test_output_file_that_cannot_be_written_exits_2_before_grading(
    tmp_path, capsys, flag, where, problem
):
    code, out, err = _run(
        capsys, str(SOLUTIONS / "mha_interview.ipynb"), flag, str(tmp_path / where)
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and problem in err and str(tmp_path) in err


def test_sizes_parse():
    assert parse_size("8G") == 8 * 1024**3
    assert parse_size("512M") == 512 * 1024**2
    assert parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert parse_size("none") is None


@pytest.mark.parametrize("flag", ["--memory-limit", "--max-output"])
@pytest.mark.parametrize("text", ["none", "0", "0K", "off"])
def test_every_size_flag_reads_none_and_zero_as_no_limit(flag, text):
    args = grading_parser().parse_args(["nb.ipynb", flag, text])
    assert getattr(args, flag[2:].replace("-", "_")) is None


def test_the_command_lines_defaults_are_the_limits_defaults():
    args = grading_parser().parse_args(["nb.ipynb"])
    limits = Limits()
    assert (args.cell_timeout, args.call_timeout, args.timeout, args.max_timeouts) == (
        limits.cell_timeout, limits.call_timeout, limits.total_timeout, limits.max_timeouts
    )  # fmt: skip
    assert (args.memory_limit, args.max_output) == (limits.memory_bytes, limits.cell_output_bytes)
    assert limits.total_output_bytes == 16 * limits.cell_output_bytes
    assert format_size(limits.memory_bytes) in grading_parser().format_help()


def test_list_prints_the_catalog(capsys):
    code, out, _ = _run(capsys, "list", "--json")
    rows = json.loads(out)
    assert code == 0
    assert {"id", "title", "seed", "levels", "points", "packages", "broken"} <= set(rows[0])
    assert "mha_interview" in {r["id"] for r in rows}
    assert all(r["broken"] is None and isinstance(r["packages"], list) for r in rows)
    packages = {r["id"]: r["packages"] for r in rows}
    assert "numpy" in packages["mha_interview"]  # the default
    assert packages["bpe"] == []  # an exercise that allows the standard library alone


def test_list_carries_tags_and_minutes_and_filters_by_tag(capsys):
    _, out, _ = _run(capsys, "list", "--json")
    everything = json.loads(out)
    assert all(r["tags"] and r["minutes"] > 0 for r in everything)
    code, out, _ = _run(capsys, "list", "--json", "--tag", "attention", "--tag", "positional")
    picked = json.loads(out)
    assert code == 0 and {"rope", "alibi"} <= {r["id"] for r in picked}
    assert all({"attention", "positional"} <= set(r["tags"]) for r in picked)
    assert len(picked) < len(everything)
    code, out, _ = _run(capsys, "list", "--json", "--max-minutes", "30")
    short = json.loads(out)
    assert code == 0 and short and all(r["minutes"] <= 30 for r in short)
    code, out, _ = _run(capsys, "list", "--tag", "attention")
    assert code == 0 and "mha_interview" in out and "bpe" not in out and "attention" in out


def test_list_names_the_tags_there_are_for_an_unknown_one(capsys):
    code, out, err = _run(capsys, "list", "--tag", "nonsense")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "no exercise is tagged 'nonsense'; tags: " in err and "attention" in err


@pytest.fixture
def broken_exercises(tmp_path, monkeypatch):
    """The catalog is a package of `alpha`, mha_interview (the real one) and broken folders."""
    suites = {
        "alpha": GOOD_SUITE,
        "mha_interview": "from grader.exercises.mha_interview.suite import exercise\n",
        **BROKEN,
    }
    package = exercises_package(tmp_path / "lib", monkeypatch, suites)
    for module in ("grader.run.catalog", "grader.run.pipeline"):
        monkeypatch.setattr(f"{module}.load_catalog", lambda: load_catalog(package))
    monkeypatch.setattr("grader.run.catalog.indexed_rows", lambda: None)  # not the built-in index
    yield
    forget_package(tmp_path / "lib")


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_list_shows_broken_exercises_with_the_reason(capsys, broken_exercises, as_json):
    code, out, _ = _run(capsys, "list", *(["--json"] if as_json else []))
    assert code == 0
    if as_json:
        rows = {r["id"]: r for r in json.loads(out)}
        assert rows["alpha"]["broken"] is None and rows["alpha"]["tests"] == 1
        for folder, problem in BROKEN_PROBLEMS.items():
            assert problem in rows[folder]["broken"]
    else:
        text = " ".join(out.split())
        assert "alpha" in text and "Broken" in text and "bad_syntax" in text
        assert "SyntaxError" in text and "no suite.py" in text


def test_build_check_passes_on_this_checkout(capsys):
    code, _, _ = _run(capsys, "build", "--check", "--root", str(ROOT))
    assert code == 0


def test_list_reads_the_index_while_it_matches_the_suites(monkeypatch):
    indexed = catalog.indexed_rows()
    assert indexed is not None and indexed == catalog.catalog_rows(load_catalog())
    monkeypatch.setattr(catalog, "sources_digest", lambda folder: "an edited suite")
    assert catalog.indexed_rows() is None  # stale: the suites are loaded instead
    assert {r.id for r in catalog.catalog_rows()} == {r.id for r in indexed}


def test_build_check_fails_on_a_stale_index(capsys, monkeypatch):
    monkeypatch.setattr(catalog, "sources_digest", lambda folder: "an edited suite")
    code, _, err = _run(capsys, "build", "--check", "--root", str(ROOT))
    assert code == 1 and "catalog.json: out of date with the suites" in err


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["list"], ["list", "--json"], ["no-such.ipynb"], ["--bogus"], ["x.ipynb", "-j"]],
)
def test_what_grades_nothing_never_imports_torch(argv):
    code = (
        "import sys\nfrom grader.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr


def test_build_check_fails_on_a_stale_scaffold(tmp_path, capsys):
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    code, _, err = _run(capsys, "build", "--check", "--root", str(tmp_path))
    assert code == 1 and "out of date" in err


@pytest.mark.kernel
def test_console_script_grades_and_writes_junit_and_gradescope_results(tmp_path):
    junit, gradescope = tmp_path / "out.xml", tmp_path / "results.json"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "grade"),
            str(SOLUTIONS / "mha_interview.ipynb"),
            "--junit",
            str(junit),
            "--gradescope",
            str(gradescope),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Score" in done.stdout and "Level reached" in done.stdout
    assert "<testsuite" in junit.read_text()
    results = json.loads(gradescope.read_text())
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) > 0
    assert {t["status"] for t in results["tests"]} == {"passed"}


COHORT = Cohort("cli")


@COHORT.notebooks
def _notebooks(folder: Path) -> dict[str, Path]:
    made = {}
    nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    nb.metadata["grader"] = {"exercise": "something_else"}
    made["renamed"] = nb
    nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    del nb.metadata["grader"]
    made["anonymous"] = nb
    nb = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first, nbformat.v4.new_code_cell("import not_a_real_package_xyz"))
    made["imports_missing"] = nb
    paths = {}
    for name, notebook in made.items():
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(notebook, paths[name])
    return paths


@pytest.mark.kernel
def test_exercise_flag_overrides_metadata(cohort):
    path = Path(json.loads(cohort["cli"]["renamed"].stdout)["notebook"])
    assert cohort["cli"]["renamed"].returncode == 2
    graded = grade(path, "--exercise", "mha_interview")
    assert graded.returncode == 0 and graded.report["exercise"] == "mha_interview"


@pytest.mark.kernel
def test_notebook_without_metadata_is_matched_by_its_names(cohort):
    graded = cohort["cli"]["anonymous"]
    assert graded.returncode == 0 and graded.report["exercise"] == "mha_interview"


@pytest.mark.kernel
def test_a_broken_exercise_stops_only_its_own_notebooks(tmp_path, capsys, broken_exercises):
    path = tmp_path / "for_broken.ipynb"
    nbformat.write(notebook_with("x = 1", exercise="bad_syntax"), path)
    code, out, err = _run(capsys, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "'bad_syntax', which cannot be loaded" in err
    assert "bad_syntax/suite.py, line 2: SyntaxError" in err
    code, out, err = _run(capsys, str(SOLUTIONS / "mha_interview.ipynb"), "--json")
    assert code == 0, err
    assert json.loads(out)["score"] == json.loads(out)["max_score"]


@pytest.mark.kernel
def test_a_missing_package_is_headlined_once(cohort):
    graded = cohort["cli"]["imports_missing"]
    solution = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
    first = next(i for i, c in enumerate(solution.cells) if c.cell_type == "code")
    report = graded.report
    assert report["headlines"] == [
        f"cell {first + 1}: `not_a_real_package_xyz` is not available in the grading environment"
    ]
    assert [e["cell"] for e in report["cell_errors"]] == [first + 1]
    assert graded.returncode == 0, graded.stderr


STARTED_AND_HUNG = """
import subprocess, time
child = subprocess.Popen(['sleep', '306'])
open('started', 'w').close()
time.sleep(600)
"""


@pytest.mark.kernel
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_grader_stopped_by_a_signal_cleans_up_and_says_so(tmp_path, request, signum, code):
    path = tmp_path / "hangs.ipynb"
    nbformat.write(notebook_with(STARTED_AND_HUNG, exercise="mha_interview"), path)
    grading, scratch = grading_until_started([str(path), "--json"], tmp_path, request)
    grading.send_signal(signum)
    out, err = grading.communicate(timeout=60)
    assert grading.returncode == code, err
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert leftovers(str(scratch)) == []
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("size", ["512M", "1G", "1.9G"])
def test_a_memory_limit_below_what_a_kernel_needs_is_refused_naming_the_minimum(capsys, size):
    code, _, err = _run(capsys, str(SOLUTIONS / "mha_interview.ipynb"), "--memory-limit", size)
    assert code == 2 and err.count("\n") == 1 and "at least 2G" in err


def test_every_example_in_the_help_is_accepted():
    """The help's own examples parse (a size in an example that cannot start a kernel
    would fail every grading)."""
    text = " ".join(grading_parser().format_help().split())
    for size in ("8G", "4G"):
        assert "e.g. 8G or 4G" in text
        grading_parser().parse_args(["nb.ipynb", "--memory-limit", size])


def test_an_unknown_kernel_user_is_refused_before_any_grading(capsys):
    paths = [str(SOLUTIONS / "mha_interview.ipynb"), str(SOLUTIONS / "mha_causal.ipynb")]
    code, out, err = _run(capsys, *paths, "--kernel-user", "no-such-user-here")
    assert code == 2 and out == "" and err.count("\n") == 1 and "no-such-user-here" in err


# -- small items: not a notebook, --json errors, an empty profile, twin mutants, a pipe ---


def test_a_python_file_is_not_a_notebook(tmp_path, capsys):
    path = tmp_path / "foo.py"
    path.write_text("import torch\n\nx = torch.ones(3)\n")
    code, out, err = _run(capsys, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"{path}: not a notebook" in err
    assert "invalid JSON" not in err and "Traceback" not in err


def test_one_unreadable_notebook_with_json_prints_its_error_object_as_a_batch_does(
    tmp_path, capsys
):
    path = tmp_path / "nb.ipynb"
    path.write_text("{oops")
    code, out, err = _run(capsys, str(path), "--json")
    assert code == 2 and err.count("\n") == 1 and "invalid JSON" in err
    reason = f"{path}: invalid JSON at line 1, column 2"
    assert json.loads(out) == {
        "notebook": str(path), "error": reason, "exit_code": 2, "score": 0, "max_score": 0
    }  # fmt: skip
    code, out, _ = _run(capsys, str(path), "--json", "--cell-timeout", "0")
    assert code == 2 and out == ""  # a bad flag is not the notebook's


def test_profile_on_an_exercise_without_one_is_refused_before_grading(capsys, tmp_path):
    plot = tmp_path / "p.svg"
    for flags in (["--profile"], ["--profile-plot", str(plot)]):
        code, out, err = _run(capsys, str(SOLUTIONS / "cross_entropy.ipynb"), *flags)
        assert code == 2 and out == "" and "Grade report" not in err
        [line] = err.strip().splitlines()
        assert "--profile: exercise cross_entropy has no profile (exercises with one: " in line
        assert "mha_module" in line
    assert not plot.exists()  # no empty plot
    listed = json.loads(_run(capsys, "list", "--json")[1])
    assert {r["id"]: r["profile"] for r in listed}["mha_module"] is True
    assert {r["id"]: r["profile"] for r in listed}["cross_entropy"] is False


def test_a_profile_that_measured_nothing_prints_only_why():
    exercise = Exercise(id="plain", title="t", seed="-", levels=["a"], defines=("f",))
    profile = run_profile(exercise, Kernel(InProcessSession([])), Limits())
    console = Console(file=io.StringIO(), width=100)
    render_profile(profile, console)
    assert console.file.getvalue() == "exercise plain has no profile\n"


def test_hints_warns_about_mutants_that_fail_identically(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "exercises" / "alpha"
    folder.mkdir(parents=True)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "alpha.ipynb").write_text("{}")
    exercise = Exercise(id="alpha", title="Alpha", seed="-", levels=["one"], defines=("alpha",))
    exercise.folder = folder
    same = {"runs": "output: # of # elements outside the tolerance"}

    def write_hints(exercise, solution, jobs, limits):  # the mutants, as if graded
        patterns = [("a", "a?", same), ("b", "b?", {"runs": "raised"}), ("c", "c?", same)]
        (folder / "hints.json").write_text(hints_document(patterns))
        return folder / "hints.json"

    monkeypatch.setattr("grader.tools.hints.write_hints", write_hints)
    monkeypatch.setattr("grader.suite.exercise.load_catalog", lambda: {"alpha": exercise})
    code, out, err = _run(capsys, "hints", "alpha", "--root", str(tmp_path))
    assert code == 0 and out.startswith(f"alpha: wrote {folder / 'hints.json'}\nalpha: 3 mutants")
    assert "alpha: hint precision 100%" in out
    assert err.count("\n") == 1 and "alpha: mutants a, c fail identically" in err


@pytest.mark.kernel
@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["card", "json"])
def test_a_reader_that_leaves_changes_no_exit_code(flags):
    """`grade NB | head -1` on a full-marks notebook: exit 0, and nothing on stderr."""
    command = [sys.executable, "-m", "grader.cli", str(SOLUTIONS / "mha_interview.ipynb"), *flags]
    grading = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert grading.stdout is not None and grading.stderr is not None
    grading.stdout.close()  # the reader is gone before the first line: every write fails
    with grading.stderr:
        err = grading.stderr.read().decode()
    assert grading.wait(timeout=300) == 0, err
    assert err == ""

"""Writing an exercise as docs/authoring.md says: `grade new softmax_rows` writes a project in a
temporary folder (the files the "Write your own exercise" section shows, word for word),
builds it, and `grade --exercises` grades it. Nothing here knows about attention, and the
grader is not reinstalled."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from grader.suite.corpus import apply
from grader.tools.new import skeleton
from tests.helpers import ROOT, Graded, assert_full_marks, grade_many

_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def readme_files() -> dict[str, str]:
    """The section's code blocks that start with a `# <path>` comment, by path."""
    text = (ROOT / "docs" / "authoring.md").read_text()
    section = text.split("# Write your own exercise", 1)[1].split("\n## ", 1)[0]
    files = {}
    for match in _BLOCK.finditer(section):
        source = textwrap.dedent(match.group(2))
        first, _, rest = source.partition("\n")
        if first.startswith("# ") and "/" in first:
            files[first[2:].strip()] = rest
    return files


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project made by `grade new softmax_rows` (which also builds it)."""
    root = tmp_path_factory.mktemp("authoring")
    done = run("new", "softmax_rows", "--root", str(root), cwd=root)
    assert done.returncode == 0, done.stderr
    return root


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_the_readme_shows_what_grade_new_writes():
    files = skeleton("softmax_rows")
    shown = readme_files()
    assert set(shown) == {
        "solutions/softmax_rows.ipynb",
        "exercises/softmax_rows/suite.py",
        "exercises/softmax_rows/corpus.py",
    }
    for path in ("exercises/softmax_rows/suite.py", "exercises/softmax_rows/corpus.py"):
        assert shown[path] == files[path], path
    cells = nbformat.reads(files["solutions/softmax_rows.ipynb"], as_version=4).cells
    assert [c.cell_type for c in cells] == ["markdown", "code", "markdown", "code"]
    assert shown["solutions/softmax_rows.ipynb"] == cells[1].source + "\n"


@pytest.mark.kernel
def test_grade_new_writes_files_that_build_and_format_clean(project):
    checked = run("build", "--check", "--root", str(project), cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ruff = Path(sys.executable).parent / "ruff"
    for config in ([], ["--config", str(ROOT / "pyproject.toml")]):
        done = subprocess.run(
            [str(ruff), "format", "--check", *config, "exercises"],
            cwd=project, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    again = run("new", "softmax_rows", "--root", str(project), cwd=project)
    assert again.returncode == 2 and "exists already" in again.stderr, again.stderr
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr


@pytest.mark.parametrize("name", ["Softmax", "2x", "my-exercise", "_private"])
def test_grade_new_refuses_an_id_that_is_not_a_lowercase_name(name, tmp_path):
    done = run("new", name, "--root", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "lowercase Python name" in done.stderr and not list(tmp_path.iterdir())


def test_grade_new_says_in_one_line_where_it_cannot_write(tmp_path):
    (tmp_path / "exercises").write_text("a file where a folder should be")
    done = run("new", "softmax_rows", "--root", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "cannot write" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_formatting_a_suite_or_adding_a_corpus_keeps_the_index_current(tmp_path):
    from grader.suite.exercise import sources_digest

    (tmp_path / "one").mkdir()
    suite = tmp_path / "one" / "suite.py"
    suite.write_text("x = {'a':1}\n")
    before = sources_digest(tmp_path)
    suite.write_text('x = {\n    "a": 1,  # a comment\n}\n')
    (tmp_path / "one" / "corpus.py").write_text("MUTANTS = []\n")
    assert sources_digest(tmp_path) == before
    suite.write_text('x = {"a": 2}\n')
    assert sources_digest(tmp_path) != before


@pytest.mark.kernel
def test_grade_list_shows_the_new_exercise_and_where_it_came_from(project):
    listed = run("list", "--json", "--exercises", str(project / "exercises"), cwd=project)
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows["softmax_rows"]["broken"] is None, rows["softmax_rows"]
    assert rows["softmax_rows"]["folder"] == str(project / "exercises" / "softmax_rows")
    assert "mha_interview" in rows  # the built-in ones are still there
    table = run("list", "--exercises", str(project / "exercises"), cwd=project).stdout
    assert "--exercises" in " ".join(table.split())


@dataclass(frozen=True)
class Authored:
    """`grade hints` run on the new project, then every notebook the tests read graded in
    one batch with `--exercises`."""

    hints: subprocess.CompletedProcess[str]
    corpus: dict  # corpus.py's names
    notebooks: dict[str, Graded]  # by name: solution, scaffold, builtin, each change's


@pytest.fixture(scope="module")
def graded(project, tmp_path_factory) -> Authored:
    exercises = project / "exercises"
    hints = run("hints", "--exercises", str(exercises), "--root", str(project), cwd=project)
    corpus: dict = {}
    exec((exercises / "softmax_rows" / "corpus.py").read_text(), corpus)
    solution = nbformat.read(project / "solutions" / "softmax_rows.ipynb", as_version=4)
    folder = tmp_path_factory.mktemp("authoring-graded")
    paths = {
        "solution": project / "solutions" / "softmax_rows.ipynb",
        "scaffold": project / "notebooks" / "softmax_rows.ipynb",
    }
    for change in [*corpus["MUTANTS"], *corpus["VARIANTS"]]:
        paths[change.name] = folder / f"{change.name}.ipynb"
        nbformat.write(apply(solution, change), paths[change.name])
    builtin = nbformat.read(paths["solution"], as_version=4)
    cell = builtin.cells[1]
    start = cell.source.index("    # BEGIN SOLUTION")
    cell.source = cell.source[:start] + "    return torch.softmax(x, dim=-1)\n"
    paths["builtin"] = folder / "builtin.ipynb"
    nbformat.write(builtin, paths["builtin"])
    return Authored(hints, corpus, grade_many(paths, "--exercises", str(exercises)))


@pytest.mark.kernel
def test_the_solution_earns_full_marks_and_the_scaffold_nothing(graded):
    assert_full_marks(graded.notebooks["solution"])
    scaffold = graded.notebooks["scaffold"]
    assert scaffold.returncode == 1, scaffold.stderr
    report = scaffold.report
    assert report["score"] == 0
    [error] = report["cell_errors"]  # the candidate's self-check calls the stub
    assert error["message"] == "NotImplementedError: implement softmax_rows"
    assert {(t["status"], t["message"]) for t in report["tests"]} == {
        ("not_implemented", "not implemented: softmax_rows")
    }


@pytest.mark.kernel
def test_the_corpus_is_caught_and_the_variant_keeps_full_marks(graded):
    assert graded.corpus["MUTANTS"] and graded.corpus["VARIANTS"]
    for change in [*graded.corpus["MUTANTS"], *graded.corpus["VARIANTS"]]:
        result = graded.notebooks[change.name]
        if hasattr(change, "level"):
            assert result.returncode == 1, result.stderr
            assert result.failing_levels()[:1] == [change.level], (change.name, result.report)
        else:
            assert_full_marks(result)


@pytest.mark.kernel
def test_grade_hints_records_the_corpus_and_the_card_names_each_mutants_bug(project, graded):
    exercises = project / "exercises"
    assert graded.hints.returncode == 0, graded.hints.stderr
    written = exercises / "softmax_rows" / "hints.json"
    wrote, spread, precision = graded.hints.stdout.strip().splitlines()
    assert wrote == f"softmax_rows: wrote {written}"
    # each feature mutant (all but the one marked values=True) loses points at one level only
    assert spread == (
        "softmax_rows: 4 mutants; 3 feature mutants lose points at a median of 1 level(s), "
        "at most 1"
    )
    assert precision.startswith("softmax_rows: hint precision 100%: 4 of 4 named outright")
    for mutant in graded.corpus["MUTANTS"]:
        assert graded.notebooks[mutant.name].report["hints"] == [mutant.hint], mutant.name
    assert graded.notebooks["solution"].report["hints"] == []


@pytest.mark.kernel
def test_builtin_softmax_is_caught_by_the_exercises_own_watch(graded):
    report = graded.notebooks["builtin"].report
    bad = {t["id"]: t["message"] for t in report["tests"] if t["status"] != "passed"}
    assert list(bad) == ["no_builtin_softmax"], bad
    assert bad["no_builtin_softmax"].startswith("built-in softmax in the source: ")


@pytest.mark.kernel
def test_build_names_twin_mutants_a_stale_corpus_and_a_c_builtin_in_the_watch(project, tmp_path):
    """Following the page: two mutants that fail identically are named by `grade build`;
    a mutant whose text changes under the same name makes `--check` fail; a C built-in in
    `Watch.instrument` is named, entry and field, and the build fails."""
    root = tmp_path / "project"
    shutil.copytree(project, root)
    corpus = root / "exercises" / "softmax_rows" / "corpus.py"
    text = corpus.read_text()
    first = re.search(r'    Mutant\(\n        "(\w+)",.*?\n    \),\n', text, re.S)
    assert first is not None
    twin = first[0].replace(f'"{first[1]}"', '"the_same_bug_again"', 1)
    corpus.write_text(text.replace(first[0], first[0] + twin, 1))
    done = run("build", "--root", str(root), cwd=root)
    assert done.returncode == 0, done.stderr
    assert re.search(
        rf"grade build: warning: softmax_rows: mutants [\w, ]*{first[1]}[\w, ]*the_same_bug_again"
        r"[\w, ]* fail identically",
        done.stderr,
    ) or re.search(rf"mutants [\w, ]*the_same_bug_again[\w, ]*{first[1]}", done.stderr), done.stderr
    assert run("build", "--check", "--root", str(root), cwd=root).returncode == 0

    # the twin now writes other text under the same name: its hints are stale
    text = corpus.read_text()
    new = re.search(r'"the_same_bug_again",\n        "[^"\n]*",\n        "([^"\n]*)"', text)
    assert new is not None
    corpus.write_text(text[: new.end(1)] + " * 1.0" + text[new.end(1) :])
    done = run("build", "--check", "--root", str(root), cwd=root)
    assert done.returncode == 1
    assert "hints.json: out of date with the suite, corpus or solution" in done.stderr

    suite = root / "exercises" / "softmax_rows" / "suite.py"
    suite.write_text(suite.read_text() + "\nWatch(instrument=('torch.nn.functional:conv1d',))\n")
    done = run("build", "--check", "--root", str(root), cwd=root)
    assert done.returncode == 1
    assert (
        "grade build: error: " in done.stderr
        and "Watch.instrument entry 'torch.nn.functional:conv1d': conv1d is a "
        "builtin_function_or_method, not a Python function"
        in done.stderr
        and "Watch.functions" in done.stderr
    ), done.stderr


@pytest.mark.kernel
def test_build_and_new_keep_their_exit_code_when_the_reader_leaves(tmp_path):
    """`grade new X | head -1`, `grade build | head -1`: the reader gone before the first
    line changes no exit code and writes nothing on stderr."""
    for args in (["new", "alpha", "--root", str(tmp_path)], ["build", "--root", str(tmp_path)]):
        command = [sys.executable, "-m", "grader.cli", *args]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
        )
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        with process.stderr:
            err = process.stderr.read().decode()
        assert process.wait(timeout=600) == 0, err
        assert "Traceback" not in err and "Broken pipe" not in err, err
    assert (tmp_path / "exercises" / "alpha" / "hints.json").is_file()

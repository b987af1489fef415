"""Writing an exercise from the README alone: the "Write your own exercise" section's code
blocks (a softmax exercise: solution cell, suite, corpus) become a project in a temporary
folder; `grade build` writes its scaffold and `grade --exercises` grades it. Nothing here
knows about attention, and the grader is not reinstalled."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from grader.corpus import apply
from tests.helpers import ROOT, Graded, assert_full_marks

pytestmark = pytest.mark.kernel

_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def readme_files() -> dict[str, str]:
    """The section's code blocks that start with a `# <path>` comment, by path."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Write your own exercise", 1)[1].split("\n## ", 1)[0]
    files = {}
    for match in _BLOCK.finditer(section):
        source = textwrap.dedent(match.group(2))
        first, _, rest = source.partition("\n")
        if first.startswith("# ") and "/" in first:
            files[first[2:].strip()] = rest
    return files


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """solutions/, notebooks/ and exercises/ built from the README alone."""
    root = tmp_path_factory.mktemp("authoring")
    files = readme_files()
    (root / "notebooks").mkdir()
    (root / "solutions").mkdir()
    for path, source in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.endswith(".ipynb"):
            nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
            nb.metadata["grader"] = {"exercise": target.stem}
            nbformat.write(nb, target)
        else:
            target.write_text(source)
            (target.parent / "__init__.py").touch()
    return root


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def grade_in(project: Path, notebook: Path) -> Graded:
    done = run(str(notebook), "--json", "--exercises", str(project / "exercises"), cwd=project)
    return Graded(done.returncode, done.stdout, done.stderr)


def test_the_readme_gives_a_solution_a_suite_and_a_corpus():
    assert set(readme_files()) == {
        "solutions/softmax_rows.ipynb",
        "exercises/softmax_rows/suite.py",
        "exercises/softmax_rows/corpus.py",
    }


def test_grade_list_shows_the_new_exercise_and_where_it_came_from(project):
    listed = run("list", "--json", "--exercises", str(project / "exercises"), cwd=project)
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows["softmax_rows"]["broken"] is None, rows["softmax_rows"]
    assert rows["softmax_rows"]["folder"] == str(project / "exercises" / "softmax_rows")
    assert "mha_interview" in rows  # the built-in ones are still there
    table = run("list", "--exercises", str(project / "exercises"), cwd=project).stdout
    assert "--exercises" in " ".join(table.split())


def test_the_solution_earns_full_marks_and_the_scaffold_nothing(project):
    built = run("build", "--root", str(project), cwd=project)
    assert built.returncode == 0, built.stderr
    assert_full_marks(grade_in(project, project / "solutions" / "softmax_rows.ipynb"))
    scaffold = grade_in(project, project / "notebooks" / "softmax_rows.ipynb")
    assert scaffold.returncode == 1, scaffold.stderr
    report = scaffold.report
    assert report["score"] == 0 and report["cell_errors"] == []  # it has no self-check cell
    assert {(t["status"], t["message"]) for t in report["tests"]} == {
        ("not_implemented", "not implemented: softmax_rows")
    }


def test_the_corpus_is_caught_and_the_variant_keeps_full_marks(project, tmp_path):
    namespace: dict = {}
    exec((project / "exercises" / "softmax_rows" / "corpus.py").read_text(), namespace)
    solution = nbformat.read(project / "solutions" / "softmax_rows.ipynb", as_version=4)
    for change in [*namespace["MUTANTS"], *namespace["VARIANTS"]]:
        path = tmp_path / f"{change.name}.ipynb"
        nbformat.write(apply(solution, change), path)
        graded = grade_in(project, path)
        if hasattr(change, "level"):
            assert graded.returncode == 1, graded.stderr
            assert graded.failing_levels()[:1] == [change.level], (change.name, graded.report)
        else:
            assert_full_marks(graded)


def test_grade_hints_records_the_corpus_and_the_card_names_each_mutants_bug(project, tmp_path):
    exercises = project / "exercises"
    done = run("hints", "--exercises", str(exercises), "--root", str(project), cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"softmax_rows: wrote {exercises / 'softmax_rows' / 'hints.json'}"
    namespace: dict = {}
    exec((exercises / "softmax_rows" / "corpus.py").read_text(), namespace)
    solution = nbformat.read(project / "solutions" / "softmax_rows.ipynb", as_version=4)
    for mutant in namespace["MUTANTS"]:
        path = tmp_path / f"{mutant.name}.ipynb"
        nbformat.write(apply(solution, mutant), path)
        assert grade_in(project, path).report["hints"] == [mutant.hint]
    assert grade_in(project, project / "solutions" / "softmax_rows.ipynb").report["hints"] == []


def test_builtin_softmax_is_caught_by_the_exercises_own_watch(project, tmp_path):
    solution = nbformat.read(project / "solutions" / "softmax_rows.ipynb", as_version=4)
    cell = solution.cells[0]
    start = cell.source.index("    # BEGIN SOLUTION")
    cell.source = cell.source[:start] + "    return torch.softmax(x, dim=-1)\n"
    path = tmp_path / "builtin.ipynb"
    nbformat.write(solution, path)
    report = grade_in(project, path).report
    bad = {t["id"]: t["message"] for t in report["tests"] if t["status"] != "passed"}
    assert list(bad) == ["no_builtin_softmax"], bad
    assert bad["no_builtin_softmax"].startswith("built-in softmax in the source: ")

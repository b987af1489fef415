"""`grade build`: scaffolds come from solutions, and the committed ones are up to date."""

from __future__ import annotations

import nbformat
import pytest

from grader.core.errors import NotebookError
from grader.tools.build import build_scaffolds, scaffold, stub_source
from tests.helpers import ROOT


def test_marked_region_becomes_a_stub_at_its_indentation():
    source = "def f(x):\n    # BEGIN SOLUTION implement f\n    y = x + 1\n    return y\n    # END SOLUTION\n"
    assert stub_source(source) == "def f(x):\n    raise NotImplementedError('implement f')"


def test_region_without_message_gets_the_default():
    assert "NotImplementedError('replace this line" in stub_source(
        "# BEGIN SOLUTION\nx = 1\n# END SOLUTION"
    )


@pytest.mark.parametrize(
    "source",
    [
        "# BEGIN SOLUTION\nx = 1",
        "x = 1\n# END SOLUTION",
        "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION",
    ],
)
def test_unbalanced_markers_are_errors(source):
    with pytest.raises(NotebookError):
        stub_source(source)


def test_scaffold_clears_outputs_and_drops_solution_only_cells():
    code = nbformat.v4.new_code_cell("# BEGIN SOLUTION\nx = 1\n# END SOLUTION", execution_count=3)
    code.outputs = [nbformat.v4.new_output("stream", text="hi")]
    secret = nbformat.v4.new_code_cell(
        "print('answer')", metadata={"tags": ["grader:solution-only"]}
    )
    nb = nbformat.v4.new_notebook(cells=[code, secret], metadata={"grader": {"exercise": "demo"}})
    out = scaffold(nb)
    assert len(out.cells) == 1
    assert out.cells[0].outputs == [] and out.cells[0].execution_count is None
    assert out.metadata["grader"]["exercise"] == "demo"


def test_committed_scaffolds_are_up_to_date():
    assert build_scaffolds(ROOT, check=True) == []


def test_check_reports_a_stale_scaffold(tmp_path):
    (tmp_path / "solutions").mkdir()
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x = 1")], metadata={"grader": {"exercise": "demo"}}
    )
    nbformat.write(nb, tmp_path / "solutions" / "demo.ipynb")
    assert build_scaffolds(tmp_path, check=True) == [
        f"{tmp_path / 'notebooks' / 'demo.ipynb'}: out of date with {tmp_path / 'solutions' / 'demo.ipynb'}; run `grade build`"
    ]
    build_scaffolds(tmp_path)
    assert build_scaffolds(tmp_path, check=True) == []

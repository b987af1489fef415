"""Reading notebooks: every way a file can be bad gets one line naming the file and the problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest

from grader.core.errors import NotebookError
from grader.core.imports import FORMAT_CHECKER_EXTRAS, hidden
from grader.core.notebook import defined_names, read_notebook


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "file is empty"),
        ("   \n", "file is empty"),
        ("{not json", "invalid JSON at line 1"),
        ("[1, 2, 3]", "JSON but not a notebook"),
        ('{"hello": "world"}', "JSON but not a notebook"),
        ('{"cells": []}', "no 'nbformat' version"),
        (
            json.dumps({"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}),
            "nbformat 3 is too old",
        ),
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not a text file"),
        (
            json.dumps(
                {
                    "nbformat": 4,
                    "nbformat_minor": 5,
                    "cells": [{"cell_type": "bogus"}],
                    "metadata": {},
                }
            ),
            "not a valid nbformat 4 notebook",
        ),
    ],
)
def test_bad_content_is_named_in_one_line(tmp_path, content, problem):
    path = _write(tmp_path, "bad.ipynb", content)
    with pytest.raises(NotebookError) as raised:
        read_notebook(path)
    message = str(raised.value)
    assert message.startswith(str(path))
    assert problem in message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(NotebookError, match="no such file"):
        read_notebook(tmp_path / "absent.ipynb")


def test_directory(tmp_path):
    with pytest.raises(NotebookError, match="is a directory"):
        read_notebook(tmp_path)


def test_file_over_the_size_limit(tmp_path):
    path = _write(tmp_path, "big.ipynb", nbformat.writes(nbformat.v4.new_notebook()))
    with pytest.raises(NotebookError, match="over the 10-byte limit"):
        read_notebook(path, max_bytes=10)


def test_good_notebook_exposes_code_cells_and_exercise(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("hi"),
            nbformat.v4.new_code_cell("x = 1"),
            nbformat.v4.new_code_cell("  "),
        ],
        metadata={"grader": {"exercise": "mha_interview"}},
    )
    path = tmp_path / "ok.ipynb"
    nbformat.write(nb, path)
    notebook = read_notebook(path)
    assert notebook.code_cells == [(1, "x = 1")]
    assert notebook.exercise_id == "mha_interview"


def test_defined_names_reads_what_a_cell_that_does_not_parse_starts_to_define():
    sources = [
        "class A:\n    pass\nx = 1",
        "def f(:\n    return 1\n\n\nclass B(\ny: int = 2\n    z = 3\nif y == 2: pass",
        "%matplotlib inline\nimport torch\ndef g():\n    pass",
    ]
    # f, B and y are what the cell with the syntax error should have defined (the
    # indented z and the comparison define nothing); imports define their names
    assert defined_names(sources) == {"A", "x", "f", "B", "y", "torch", "g"}


def test_hidden_modules_import_as_missing_only_inside_the_block(tmp_path, monkeypatch):
    (tmp_path / "optional_extra.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with hidden(["optional_extra"]), pytest.raises(ModuleNotFoundError):
        import optional_extra  # noqa: F401
    import optional_extra

    assert optional_extra.VALUE == 1
    sys.modules.pop("optional_extra")


def test_nbformat_is_read_without_the_format_checker_extras(tmp_path):
    # a stand-in for jsonschema's slow optional extra: it says when it is imported
    (tmp_path / "rfc3987_syntax.py").write_text("import sys\nprint('imported', file=sys.stderr)\n")
    code = (
        "import sys\nimport grader.core.notebook\nprint('read', file=sys.stderr)\n"
        "import rfc3987_syntax\n"  # afterwards, it imports as usual
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stderr.split() == ["read", "imported"], done.stderr
    assert "rfc3987_syntax" in FORMAT_CHECKER_EXTRAS

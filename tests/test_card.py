"""The report card's diagnosis against real kernels: the root cause of a failed cell first,
identical failures on one row, interface problems labelled apart from wrong answers, one
cell numbering everywhere, and the report written for the candidate (`--reveal`,
`--format`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.suite.exercise import load_catalog
from tests.cohort import Cohort
from tests.helpers import ROOT, SCAFFOLDS, SOLUTIONS

pytestmark = pytest.mark.kernel

CATALOG = load_catalog()


def _solution(exercise: str) -> nbformat.NotebookNode:
    return nbformat.read(SOLUTIONS / f"{exercise}.ipynb", as_version=4)


def _replace(nb: nbformat.NotebookNode, old: str, new: str) -> nbformat.NotebookNode:
    """`nb` with `old` (in exactly one code cell, possibly several times) made `new`."""
    hits = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
    assert len(hits) == 1, old
    hits[0].source = hits[0].source.replace(old, new)
    return nb


def _between(source: str, begin: str, end: str = "# END SOLUTION") -> str:
    start = source.index(begin)
    return source[start : source.index(end, start)]


def _notebooks() -> dict[str, nbformat.NotebookNode]:
    made = {}
    nb = _solution("mha_causal")
    first = next(c for c in nb.cells if c.cell_type == "code")
    first.source = "import torch\nimport tiktokenx\n" + first.source
    made["import_fails"] = nb

    nb = _solution("mha_interview")
    cell = next(c for c in nb.cells if "implement _merge_heads" in c.source)
    body = _between(cell.source, "# BEGIN SOLUTION implement _merge_heads")
    cell.source = cell.source.replace(body, "raise NotImplementedError('merge heads')\n        ")
    made["half_done"] = nb

    nb = _solution("mha_module")
    for name in ("W_Q", "W_K", "W_V"):
        nb = _replace(nb, f"self.{name}", f"self.{name.lower()}")
    made["layers_renamed"] = nb
    made["output_alone"] = _replace(
        _solution("mha_module"),
        "return output, (weights if return_attention else None)",
        "return output",
    )
    made["no_mask_argument"] = _replace(
        _replace(
            _solution("mha_module"),
            "        mask: Optional[torch.Tensor] = None,\n        return_attention",
            "        return_attention",
        ),
        "heads, weights = attend(Q, K, V, mask, self.dropout)",
        "heads, weights = attend(Q, K, V, None, self.dropout)",
    )

    nb = _solution("mha_causal")
    nb.cells.append(nbformat.v4.new_markdown_cell("## A note"))
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "from torch.nn import functional as G\n\n\ndef helper(q):\n"
            "    return G.scaled_dot_product_attention(q, q, q)\n\n\n"
            # patched into a graded class: the graded code reaches it
            "CausalAttention.helper = staticmethod(helper)\n"
        )
    )
    made["builtin_in_last_cell"] = nb
    return made


COHORT = Cohort("card")


@COHORT.notebooks
def _written(folder: Path) -> dict[str, Path]:
    paths = {"solution": SOLUTIONS / "mha_module.ipynb"}
    for name, nb in _notebooks().items():
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(nb, paths[name])
    return paths


@pytest.fixture
def graded(cohort):
    return {name: g.report for name, g in cohort["card"].items()}


def test_a_failed_import_is_the_root_cause_and_blocks_every_test(graded):
    report = graded["import_fails"]
    cause = report["root_cause"]
    assert cause["cell"] == 2 and cause["line"] == 2 and cause["source"] == "import tiktokenx"
    assert "tiktokenx" in cause["message"]
    assert cause["blocked"] == len(report["tests"])
    assert {t["problem"] for t in report["tests"]} == {"blocked"}
    assert {t["blocked_by"] for t in report["tests"]} == {2}
    assert report["hints"] == []


def test_a_half_done_notebook_names_the_missing_stub_once(graded):
    report = graded["half_done"]
    stub = [t for t in report["tests"] if t["status"] == "not_implemented"]
    assert len(stub) >= 5
    assert {t["message"] for t in stub} == {"not implemented: MultiHeadAttention._merge_heads"}
    from grader.core.results import GradeReport
    from grader.report.card import failure_rows

    rows = failure_rows(GradeReport.from_dict(report))
    titles = [r.title for r in rows]
    assert f"{len(stub)} tests need MultiHeadAttention._merge_heads" in titles


def test_every_test_carries_its_docstring(graded):
    report = graded["half_done"]
    checks = {c.id: c.doc for c in CATALOG["mha_interview"].checks}
    assert all(t["description"] == checks[t["id"]] != "" for t in report["tests"])


@pytest.mark.parametrize("case", ["layers_renamed", "output_alone", "no_mask_argument"])
def test_interface_problems_are_labelled_apart_from_wrong_answers(graded, case):
    report = graded[case]
    problems = [t for t in report["tests"] if t["status"] != "passed"]
    interface = [t for t in problems if t["problem"] == "interface"]
    assert interface, problems
    expected = {
        "layers_renamed": "has no W_Q",
        "output_alone": "want a pair (output, weights)",
        "no_mask_argument": "unexpected keyword argument 'mask'",
    }[case]
    assert any(expected in t["message"] for t in interface), interface


def test_the_solution_has_no_interface_problem_nor_hint(graded):
    report = graded["solution"]
    assert report["hints"] == [] and report["root_cause"] is None
    assert {t["problem"] for t in report["tests"]} == {""}


def test_cells_are_numbered_among_all_cells_everywhere(graded):
    report = graded["builtin_in_last_cell"]
    last = len(_solution("mha_causal").cells) + 2  # a markdown cell, then this one
    [source] = [t for t in report["tests"] if t["id"] == "no_builtin_attention_in_source"]
    assert f"cell {last}, line 5" in source["message"], source
    assert "code cell" not in source["message"]
    places = [f["cell"] for f in report["integrity"] if f["cell"]]
    assert all(cell == last for cell in places), report["integrity"]


# -- the report for the candidate, through the command line ---------------------------------


def _grade(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grader.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600)


def test_format_md_and_html_write_the_candidates_report(tmp_path):
    notebook = tmp_path / "alice.ipynb"
    nbformat.write(
        _replace(_solution("mha_module"), "/ math.sqrt(Q.size(-1))", "/ math.sqrt(Q.size(-1) + 1)"),
        notebook,
    )
    done = _grade(str(notebook), "--format", "md", "--reveal", "1", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    md = (tmp_path / "alice-report.md").read_text()
    assert "### Levels" in md and "levels above 1" in md
    levels = CATALOG["mha_module"].levels
    hidden_above = [c for c in CATALOG["mha_module"].checks if c.level > 1 and c.hidden]
    assert not any(c.id in md for c in hidden_above)
    assert all(re.search(rf"\| {n} \| {re.escape(name)} \|", md.replace("\\", "")) for n, name in
               enumerate(levels, 1))  # fmt: skip
    assert "Grade report" in done.stdout  # the interviewer's card, in full, on the terminal
    assert any(c.id in done.stdout for c in hidden_above)

    out = tmp_path / "sent.html"
    done = _grade(str(notebook), "--format", "html", "--report-file", str(out), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert out.read_text().lstrip().lower().startswith("<!doctype html>")

    done = _grade(str(notebook), "--format", "md", "--report-file", "-", cwd=tmp_path)
    assert done.stdout.startswith("## Grade report: mha\\_module") and "─" not in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reveal", "2"], "--reveal shapes the candidate's report: add --format md or html"),
        (["--report-file", "x.md"], "--report-file shapes the candidate's report"),
        (["--format", "md", "--report-file", "-", "--json"], "would both write to stdout"),
        (["--profile-plot", "p.png"], "the plot is SVG; name a .svg file"),
        (["--format", "pdf"], "invalid choice: 'pdf'"),
    ],
)
def test_report_flags_refuse_what_they_cannot_do_in_one_line(tmp_path, args, message):
    done = _grade(str(SCAFFOLDS / "mha_module.ipynb"), *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2 and "Traceback" not in done.stderr


def test_device_cuda_without_a_gpu_says_so_plainly(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: tests/test_profile.py grades on it")
    done = _grade(str(SOLUTIONS / "mha_module.ipynb"), "--device", "cuda", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("grade: error: --device cuda: no GPU to grade on (")


def test_the_build_check_sees_the_hints_match_the_corpora():
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "build", "--check"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_batch_writes_one_candidate_report_per_notebook(tmp_path):
    for name in ("alice", "bob"):
        nbformat.write(_solution("mha_module"), tmp_path / f"{name}.ipynb")
    done = _grade("alice.ipynb", "bob.ipynb", "-j", "2", "--format", "html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (tmp_path / "candidate-reports").iterdir())
    assert written == ["alice.html", "bob.html"]

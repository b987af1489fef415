"""Grading a cohort: `grade PATH...` over notebooks and folders, in parallel, with every
output; shards and `grade merge`; a batch that survives broken notebooks, a killed
worker and a stopping signal."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from grader.core.errors import UsageError
from grader.core.results import Outcome
from grader.run.batch import collect, parse_shard, take_shard, worst
from tests.helpers import (
    SCAFFOLDS,
    SOLUTIONS,
    grading_until_started,
    leftovers,
    notebook_with,
)


def grade(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The `grade` command, as a user runs it."""
    command = [sys.executable, "-m", "grader.cli", *argv]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
    )


# -- which notebooks -------------------------------------------------------------------


def test_collect_searches_folders_skips_dot_folders_and_sorts(tmp_path):
    for name in ("b/2.ipynb", "b/1.ipynb", "a.ipynb", ".ipynb_checkpoints/a.ipynb",
                 "b/.hidden/x.ipynb", "b/notes.txt"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    found = collect([str(tmp_path / "b"), str(tmp_path), str(tmp_path / "a.ipynb")])
    assert found == sorted(str(tmp_path / n) for n in ("a.ipynb", "b/1.ipynb", "b/2.ipynb"))


def test_collect_takes_a_named_file_whatever_its_suffix_and_refuses_a_missing_path(tmp_path):
    (tmp_path / "upload.json").write_text("{}")
    assert collect([str(tmp_path / "upload.json")]) == [str(tmp_path / "upload.json")]
    with pytest.raises(UsageError, match="nope: no such file or folder"):
        collect([str(tmp_path / "nope")])


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_refused(text):
    with pytest.raises(UsageError, match="--shard"):
        parse_shard(text)


def test_shards_are_disjoint_deterministic_and_cover_everything():
    notebooks = [f"n{k:02}.ipynb" for k in range(11)]
    shards = [take_shard(list(reversed(notebooks)), i, 3) for i in (1, 2, 3)]
    assert sorted(sum(shards, [])) == notebooks
    assert [len(s) for s in shards] == [4, 4, 3]
    assert shards[0] == take_shard(notebooks, 1, 3)


def test_the_worst_exit_code_wins():
    codes = [Outcome("a", exit_code=0), Outcome("b", exit_code=2), Outcome("c", exit_code=1)]
    assert worst(codes) == 2 and worst([]) == 0


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["missing"], "missing: no such file"),
        (["empty", "missing"], "missing: no such file or folder"),
        (["empty"], "no notebooks (.ipynb) in empty"),
        (["empty", "--shard", "3/2"], "--shard 3/2"),
        (["empty", "--shard", "1/1", "--output", "file.txt"], "not a folder"),
    ],
)
def test_batch_usage_errors_are_one_line(tmp_path, argv, problem):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("")
    done = grade(*argv, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and problem in done.stderr, done.stderr


def test_an_empty_shard_is_an_empty_result(tmp_path):
    (tmp_path / "subs").mkdir()
    shutil.copy(SOLUTIONS / "mha_parity.ipynb", tmp_path / "subs")
    done = grade("subs", "--shard", "2/2", "--json", "--csv", "book.csv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["notebooks"] == []
    assert (tmp_path / "book.csv").read_text().splitlines()[0].startswith("notebook,")


# -- a cohort, graded once with every output (module fixture: real kernels) -------------

COHORT = {
    "alice/mha_causal.ipynb": SOLUTIONS / "mha_causal.ipynb",
    "bob/mha_causal.ipynb": SCAFFOLDS / "mha_causal.ipynb",
    "carol.ipynb": SOLUTIONS / "mha_parity.ipynb",
    "dave.ipynb": None,  # unreadable
    ".ipynb_checkpoints/carol.ipynb": SOLUTIONS / "mha_parity.ipynb",
}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    subs = root / "subs"
    for name, source in COHORT.items():
        path = subs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source.read_text() if source else "{not json")
    outputs = ["--csv", "book.csv", "--junit", "junit.xml", "--gradescope", "gs", "--output", "out"]
    whole = grade("subs", "-j", "2", "--json", *outputs, cwd=root)
    shards = [
        grade(
            "subs",
            "--shard",
            f"{i}/2",
            "-j",
            "1",
            "--json",
            "--csv",
            f"part{i}.csv",
            "--junit",
            f"part{i}.xml",
            cwd=root,
        )  # fmt: skip
        for i in (1, 2)
    ]
    for i, shard in enumerate(shards, start=1):
        (root / f"part{i}.json").write_text(shard.stdout)
    return root, whole, shards


EXPECTED = {  # notebook -> exit code
    "subs/alice/mha_causal.ipynb": 0,
    "subs/bob/mha_causal.ipynb": 1,
    "subs/carol.ipynb": 0,
    "subs/dave.ipynb": 2,
}


@pytest.mark.kernel
def test_a_folder_is_graded_as_a_batch_and_the_worst_exit_code_wins(cohort):
    _, whole, _ = cohort
    assert whole.returncode == 2, whole.stderr
    entries = json.loads(whole.stdout)["notebooks"]
    assert [e["notebook"] for e in entries] == list(EXPECTED)  # sorted; checkpoints skipped
    by_name = {e["notebook"]: e for e in entries}
    alice = by_name["subs/alice/mha_causal.ipynb"]
    assert alice["score"] == alice["max_score"] > 0
    assert by_name["subs/carol.ipynb"]["score"] == by_name["subs/carol.ipynb"]["max_score"] > 0
    assert by_name["subs/bob/mha_causal.ipynb"]["score"] == 0
    broken = by_name["subs/dave.ipynb"]
    assert broken["exit_code"] == 2 and broken["score"] == 0
    assert "subs/dave.ipynb" in broken["error"] and "invalid JSON" in broken["error"]
    # Progress on stderr, a line per notebook when it is not a terminal.
    lines = whole.stderr.splitlines()
    assert len(lines) == 4 and all(line.startswith("[") for line in lines), whole.stderr


@pytest.mark.kernel
def test_every_result_records_what_it_was_graded_with(cohort):
    _, whole, _ = cohort
    for entry in json.loads(whole.stdout)["notebooks"]:
        if "error" in entry:
            continue
        assert entry["grader_version"] and entry["torch_version"] and entry["python_version"]
        assert len(entry["suite_hash"]) == 64 and entry["exercise"] in ("mha_causal", "mha_parity")


@pytest.mark.kernel
def test_a_batch_writes_every_output_for_every_notebook(cohort):
    root, _, _ = cohort
    rows = list(csv.DictReader(io.StringIO((root / "book.csv").read_text())))
    assert [r["notebook"] for r in rows] == list(EXPECTED)
    assert rows[3]["error"] and rows[3]["score"] == "0"
    suites = ET.fromstring((root / "junit.xml").read_text()).findall("testsuite")
    assert [s.get("name") for s in suites] == list(EXPECTED)
    assert len(list((root / "gs").glob("*.json"))) == 4
    for doc in (json.loads(p.read_text()) for p in (root / "gs").glob("*.json")):
        assert "score" in doc and "output" in doc
    out = root / "out"
    assert (out / "index.html").is_file()
    assert len(list(out.glob("*.html"))) == 5  # four reports and the index
    executed = [nbformat.read(p, as_version=4) for p in out.glob("*.ipynb")]
    assert len(executed) == 3  # not the unreadable one
    for nb in executed:
        nbformat.validate(nb)
        assert nb.cells[-1].cell_type == "markdown"


def _without_durations(text: str) -> str:
    """A document with every duration zeroed: two runs differ in nothing else."""
    if text.lstrip().startswith("<"):
        root = ET.fromstring(text)
        for element in root.iter():
            if "time" in element.attrib:
                element.set("time", "0")
        return ET.tostring(root, encoding="unicode")
    if text.lstrip().startswith("{"):
        document = json.loads(text)
        for entry in document["notebooks"]:
            entry["duration_s"] = 0
            for test in entry.get("tests", []):
                test["duration_s"] = 0
        return json.dumps(document)
    rows = list(csv.DictReader(io.StringIO(text)))
    return json.dumps([{**r, "duration_s": "0"} for r in rows])


@pytest.mark.kernel
@pytest.mark.parametrize(
    ("kind", "whole_file"), [("json", None), ("csv", "book.csv"), ("xml", "junit.xml")]
)
def test_two_shards_merged_equal_one_run(cohort, kind, whole_file):
    root, whole, shards = cohort
    assert [s.returncode for s in shards] == [0, 2]  # alice, carol; bob, dave
    merged = grade("merge", f"part1.{kind}", f"part2.{kind}", cwd=root)
    assert merged.returncode == 0, merged.stderr
    expected = whole.stdout if whole_file is None else (root / whole_file).read_text()
    assert _without_durations(merged.stdout) == _without_durations(expected)


def test_merge_refuses_mixed_parts_in_one_line(tmp_path):
    (tmp_path / "a.json").write_text("[]")
    (tmp_path / "b.csv").write_text("notebook,score\n")
    done = grade("merge", "a.json", "b.csv", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr


# -- a batch survives its notebooks -------------------------------------------------------

HANGS = "import time\nopen('started', 'w').close()\ntime.sleep(600)"


def _workers(pid: int) -> list[int]:
    """The batch's workers: its children forked from it (its other child is the warm
    template, a program of its own)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    command = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [c for c in found if Path(f"/proc/{c}/cmdline").read_bytes() == command]


@pytest.mark.kernel
def test_a_worker_that_dies_costs_only_its_notebook(tmp_path, request):
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(notebook_with(HANGS, exercise="mha_parity"), subs / "a.ipynb")
    shutil.copy(SOLUTIONS / "mha_parity.ipynb", subs / "b.ipynb")
    grading, scratch = grading_until_started(["subs", "-j", "1", "--json"], tmp_path, request)
    (worker,) = _workers(grading.pid)
    os.kill(worker, signal.SIGKILL)  # what the OOM killer, or a stray kill, would do
    out, err = grading.communicate(timeout=120)
    first, second = json.loads(out)["notebooks"]
    assert first["exit_code"] == 3 and "grading process died (signal 9)" in first["error"]
    assert second["score"] == second["max_score"] > 0  # a fresh worker took over
    assert grading.returncode == 3, err
    assert leftovers(str(scratch)) == []  # the dead worker's kernel too


@pytest.mark.kernel
def test_a_stopped_batch_cleans_up_every_kernel(tmp_path, request):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("a", "b", "c"):
        nbformat.write(notebook_with(HANGS, exercise="mha_parity"), subs / f"{name}.ipynb")
    grading, scratch = grading_until_started(
        ["subs", "-j", "2", "--json"], tmp_path, request, count=2
    )
    grading.send_signal(signal.SIGTERM)
    out, err = grading.communicate(timeout=60)
    assert grading.returncode == 143, err
    assert out == "" and "stopped by SIGTERM" in err and "Traceback" not in err
    assert leftovers(str(scratch)) == []
    assert list(scratch.iterdir()) == []


def test_grade_gradescope_is_a_command_with_one_line_errors(tmp_path):
    done = grade("gradescope", "nope", "-o", "ag.zip", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "nope" in done.stderr
    done = grade("gradescope", "mha_parity", "-o", "ag.zip", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ag.zip").is_file()

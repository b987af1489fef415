"""Shared test helpers: grading through the real `grade` CLI, and single-bug mutants."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.suite.corpus import Mutant

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
SCAFFOLDS = ROOT / "notebooks"
WORKERS = max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class Graded:
    """What one `grade` run produced."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict:
        return json.loads(self.stdout)

    def statuses(self) -> dict[str, str]:
        return {t["id"]: t["status"] for t in self.report["tests"]}

    def failing_levels(self) -> list[str]:
        levels = {
            (t["level"], t["level_name"]) for t in self.report["tests"] if t["status"] != "passed"
        }
        return [name for _, name in sorted(levels)]


def grade(notebook: Path, *args: str, timeout: float = 600) -> Graded:
    """Run `python -m grader.cli NOTEBOOK --json ARGS` and capture everything."""
    command = [sys.executable, "-m", "grader.cli", str(notebook), "--json", *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=notebook.parent
    )
    return Graded(done.returncode, done.stdout, done.stderr)


def grade_many(notebooks: dict[str, Path], *args: str, timeout: float = 3600) -> dict[str, Graded]:
    """Grade several notebooks in one batch (`grade PATH... --json -j WORKERS`), each as
    if graded alone: its exit code, its JSON object, and the batch's stderr."""
    return Batch(notebooks, *args).result(timeout)


def yielding(command: list[str]) -> list[str]:
    """`command` run at a lower priority (`nice -n 10`): a module's `start_in_background`
    work takes the cores the tests in the foreground leave, instead of slowing them down
    and then running on one core alone at the end. (The cohort's batch keeps the ordinary
    priority: niced, it coincided with kernels of the fault corpus dying at start.)"""
    return ["nice", "-n", "10", *command] if shutil.which("nice") else command


class Batch:
    """A `grade PATH... --json -j WORKERS` batch started now, in the background; `result`
    waits for it."""

    def __init__(self, notebooks: dict[str, Path], *args: str) -> None:
        self.paths = {str(path.resolve()): name for name, path in notebooks.items()}
        command = [sys.executable, "-m", "grader.cli", *self.paths, "--json", "-j", str(WORKERS)]
        # files, not pipes: a batch's JSON outgrows a pipe's buffer (`result` closes them)
        self.out = tempfile.TemporaryFile()  # noqa: SIM115
        self.err = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen([*command, *args], stdout=self.out, stderr=self.err)

    def result(self, timeout: float = 3600) -> dict[str, Graded]:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        with self.out, self.err:
            self.out.seek(0)
            self.err.seek(0)
            stdout, stderr = self.out.read().decode(), self.err.read().decode()
        assert code in (0, 1, 2, 3), stderr
        graded = {}
        for entry in json.loads(stdout)["notebooks"]:
            if "error" in entry:
                code = entry["exit_code"]
            else:
                code = 0 if entry["max_score"] > 0 and entry["score"] >= entry["max_score"] else 1
            graded[self.paths[entry["notebook"]]] = Graded(code, json.dumps(entry), stderr)
        assert sorted(graded) == sorted(self.paths.values()), stderr
        return graded


def notebook_with(*sources: str, exercise: str | None = None) -> nbformat.NotebookNode:
    """A notebook of code cells built in a test."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    if exercise:
        nb.metadata["grader"] = {"exercise": exercise}
    return nb


def assert_full_marks(graded: Graded) -> dict:
    """Exit 0, every test passed, every level reached, no cell errors."""
    assert graded.returncode == 0, graded.stderr
    report = graded.report
    assert report["score"] == report["max_score"] > 0
    assert report["level_reached"] == len(report["levels"])
    assert all(t["status"] == "passed" for t in report["tests"])
    assert report["cell_errors"] == []
    return report


def assert_nothing_implemented(graded: Graded) -> dict:
    """A scaffold: exit 1, zero points, every test `not_implemented`, and the public
    self-check cell's NotImplementedError in the report."""
    assert graded.returncode == 1, graded.stderr
    report = graded.report
    assert report["score"] == 0 and report["level_reached"] == 0
    assert {t["status"] for t in report["tests"]} == {"not_implemented"}
    assert all(t["message"].startswith("not implemented: ") for t in report["tests"])
    assert [e["kind"] for e in report["cell_errors"]] == ["error"]
    assert "NotImplementedError" in report["cell_errors"][0]["message"]
    return report


def assert_first_fails_at(graded: Graded, mutant: Mutant) -> dict:
    """A mutant: exit 1, points lost, and the first level with a failure is the expected one."""
    assert graded.returncode == 1, graded.stderr
    report = graded.report
    assert report["score"] < report["max_score"]
    failing = graded.failing_levels()
    assert failing and failing[0] == mutant.level, (
        f"first failing level {failing[:1]}, want {mutant.level}"
    )
    return report


def leftovers(marker: str) -> list[int]:
    """Processes whose command line or environment mentions `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                if marker.encode() in Path(f"/proc/{entry}/{part}").read_bytes():
                    state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found.append(int(entry))
                    break
            except OSError:
                break
    return found


def grading_until_started(
    argv: list[str], cwd: Path, request, count: int = 1
) -> tuple[subprocess.Popen, Path]:
    """Start `grade ARGV` with its scratch spaces in a fresh short folder under /tmp
    (removed after the test), and return once `count` kernels have created a file named
    `started` in their working folder (a batch's are in the batch's own folder there)."""
    scratch = Path(tempfile.mkdtemp(dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    grading = subprocess.Popen(
        [sys.executable, "-m", "grader.cli", *argv],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while len(list(scratch.glob("**/grader-*/work/started"))) < count:
        assert grading.poll() is None and time.monotonic() < deadline, grading.communicate()
        time.sleep(0.1)
    return grading, scratch


@contextlib.contextmanager
def private_tmpdir(prefix: str) -> Iterator[Path]:
    """A fresh, short TMPDIR for one grading; whatever is left that carries it is killed,
    and it is removed, afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield folder
    finally:
        for pid in leftovers(str(folder)):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


class InAProcess:
    """A module's background work (its `start_in_background`, tests/conftest.py): the
    function `target` ("tests.module:function", given a folder and `args`, writing its JSON
    answer to folder/result.json) run by a Python process of its own from the end of
    collection, on the cores the other tests leave free (`yielding`). `result()` waits for
    it and reads the answer."""

    def __init__(self, folder: Path, target: str, *args: object) -> None:
        self.folder = folder
        module, function = target.split(":")
        call = ", ".join(repr(a) for a in (str(folder), *args))
        code = f"from {module} import {function} as f; f({call})"
        with open(folder / "stderr", "wb") as err:  # a file: a full pipe would stop it
            self.process = subprocess.Popen(
                yielding([sys.executable, "-c", code]), stdout=subprocess.DEVNULL, stderr=err
            )

    def result(self) -> object:
        self.process.wait()
        err = (self.folder / "stderr").read_text(errors="replace")
        assert self.process.returncode == 0, err[-3000:]
        return json.loads((self.folder / "result.json").read_text())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class InProcesses:
    """`InAProcess` on one core each: `target(folder, shard, shards)` does its share of the
    work; `result()` merges their answers (JSON objects)."""

    def __init__(self, folder: Path, target: str, shards: int = WORKERS) -> None:
        self.parts = []
        for shard in range(shards):
            (folder / str(shard)).mkdir()
            self.parts.append(InAProcess(folder / str(shard), target, shard, shards))

    def result(self) -> dict:
        merged: dict = {}
        for part in self.parts:
            answer = part.result()
            assert isinstance(answer, dict)
            merged.update(answer)
        return merged

    def stop(self) -> None:
        for part in self.parts:
            part.stop()

"""`grade --watch NOTEBOOK`: a card and a status line per grading, a fresh grading after
each save (a half-written save waits, saves during a grading are graded after it), and
Ctrl-C or SIGTERM ends it with 130 or 143, no kernel and no scratch folder left."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.cli import main
from grader.cli.watch import REFUSED
from grader.kernel.processes import alive, descendants
from grader.suite.exercise import load_catalog
from tests.helpers import SOLUTIONS, leftovers, private_tmpdir

NOTEBOOK = "nb.ipynb"
FULL = int(load_catalog()["mha_interview"].max_score)  # the solution's score
STATUS = re.compile(
    rf"^watching {re.escape(NOTEBOOK)}: grading (\d+) took (\d+\.\d\d) s; "
    r"saved changes are graded again \(Ctrl-C to stop\)$"
)
# softmax over the query axis: the normalization level and those above lose points
VALUES = {"--json": [], "--format": ["md"]}  # what each refused flag is given in the test
RIGHT, WRONG = "masked_fill(blocked, 0.0), dim=-1)", "masked_fill(blocked, 0.0), dim=-2)"


class Watching:
    """`grade --watch nb.ipynb` in a folder of its own, its scratch space in a fresh
    TMPDIR; its stdout read line by line in the background."""

    def __init__(self, folder: Path, scratch: Path) -> None:
        self.notebook = folder / NOTEBOOK
        shutil.copy(SOLUTIONS / "mha_interview.ipynb", self.notebook)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.cli", "--watch", NOTEBOOK],
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TMPDIR": str(scratch)}, start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, pattern: str, timeout: float = 120) -> tuple[str, list[str]]:
        """The first line from now that matches `pattern`, and the lines before it."""
        before: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, f"grade ended: {before[-20:]} {self.process.stderr}"
            if re.search(pattern, line):
                return line, before
            before.append(line)

    def graded(self, count: int) -> int:
        """Wait for grading `count`'s status line; the score on the card above it."""
        line, card = self.until(rf"^watching .*: grading {count} took")
        assert STATUS.match(line), line
        scores = [m for text in card if (m := re.search(rf"Score (\d+)/{FULL}", text))]
        assert scores, card
        return int(scores[-1].group(1))

    def stop(self, signum: int, scratch: Path) -> None:
        """Send `signum`; it exits 128 + signum, quietly, leaving no process and no file."""
        below = descendants(self.process.pid)
        assert below, "no kernel below grade"
        self.process.send_signal(signum)
        _, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 128 + signum, err
        assert "Traceback" not in err, err
        assert [pid for pid in below if alive(pid)] == []  # what ran below grade is gone
        assert leftovers(str(scratch)) == []  # and nothing that carried its TMPDIR
        assert list(scratch.iterdir()) == []  # no grader-* folder


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A fresh, short TMPDIR; whatever is left in it is killed and removed afterwards."""
    with private_tmpdir("gw-") as folder:
        yield folder


@pytest.fixture
def watching(tmp_path: Path, scratch: Path) -> Iterator[Watching]:
    run = Watching(tmp_path, scratch)
    yield run
    if run.process.poll() is None:
        os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait()


@pytest.mark.kernel
def test_a_saved_change_is_graded_again_and_ctrl_c_leaves_nothing(watching, scratch):
    assert watching.graded(1) == FULL
    text = watching.notebook.read_text()
    assert text.count(RIGHT) == 1
    broken = text.replace(RIGHT, WRONG)
    # An editor writing in two goes: the first half cannot be read, and is waited out.
    watching.notebook.write_text(broken[: len(broken) // 2])
    line, _ = watching.until(r"^waiting: ")
    assert "invalid JSON" in line
    watching.notebook.write_text(broken)
    assert watching.graded(2) < FULL
    watching.stop(signal.SIGINT, scratch)


@pytest.mark.kernel
def test_saves_during_a_grading_are_graded_after_it_and_sigterm_stops_it(watching, scratch):
    assert watching.graded(1) == FULL
    content = watching.notebook.read_bytes()
    watching.notebook.write_bytes(content)  # a save that changes nothing
    time.sleep(0.5)  # grading 2 is under way
    watching.notebook.write_bytes(content)
    assert watching.graded(2) == FULL
    assert watching.graded(3) == FULL
    watching.stop(signal.SIGTERM, scratch)


@pytest.mark.parametrize(
    "argv",
    [
        ["a.ipynb", "b.ipynb"],
        ["."],
        ["a.ipynb", "--shard", "1/2"],
        *(["a.ipynb", flag, *VALUES.get(flag, ["x"])] for _, flag in REFUSED),
    ],
    ids=lambda argv: " ".join(argv),
)
def test_watch_refuses_more_than_one_notebook_and_every_output_flag(capsys, argv):
    code = main(["--watch", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("grade: error: --watch"), err

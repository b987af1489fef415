"""A batch stopped at any moment leaves nothing behind: `grade DIR -j 2` sent Ctrl-C (SIGINT
to its whole process group, as a terminal sends it), or SIGINT or SIGTERM alone, exits
130 or 143 with no report, no kernel left and its scratch folder (TMPDIR) empty."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.core import signals
from tests.helpers import SOLUTIONS, leftovers, private_tmpdir

COPIES = 40  # twenty rounds of two workers: a batch still running at the latest moment,
# even with kernels forked from the template (half a second a notebook)


@pytest.fixture(scope="module")
def subs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("subs")
    for k in range(COPIES):
        shutil.copy(SOLUTIONS / "mha_interview.ipynb", folder / f"candidate{k}.ipynb")
    return folder


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A fresh, short TMPDIR; whatever is left in it is killed and removed afterwards."""
    with private_tmpdir("gs-") as folder:
        yield folder


def _start(subs: Path, scratch: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "grader.cli", str(subs), "-j", "2", "--json"],
        cwd=subs, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(scratch)}, start_new_session=True,
    )  # fmt: skip


def _stop(grading: subprocess.Popen, signum: int, group: bool, scratch: Path) -> None:
    """Send the signal (to the process group: Ctrl-C), then check what is left."""
    if group:
        os.killpg(grading.pid, signum)
    else:
        grading.send_signal(signum)
    out, err = grading.communicate(timeout=120)
    assert grading.returncode == 128 + signum, err
    assert out == "" and "Traceback" not in err, err
    assert leftovers(str(scratch)) == []  # no kernel, no worker
    assert sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*")) == []


@pytest.mark.kernel
@pytest.mark.parametrize(
    ("signum", "group", "delay"),
    [
        (signal.SIGINT, True, 1.0),  # grade loads its suites and torch
        (signal.SIGINT, True, 3.0),  # the workers start their templates and kernels
        (signal.SIGINT, True, 6.0),  # cells and hidden tests run
        (signal.SIGINT, False, 6.0),
        (signal.SIGTERM, False, 3.0),
    ],
)
def test_a_batch_stopped_at_any_moment_leaves_nothing(subs, scratch, signum, group, delay):
    grading = _start(subs, scratch)
    time.sleep(delay)
    assert grading.poll() is None, grading.communicate()
    _stop(grading, signum, group, scratch)


@pytest.mark.kernel
@pytest.mark.parametrize(("signum", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_a_batch_stopped_while_a_worker_holds_its_next_kernel_leaves_nothing(
    subs, scratch, signum, group
):
    """A worker starts the next notebook's kernel while the one in hand runs its tests:
    stopped then, it has two sessions to close."""
    grading = _start(subs, scratch)
    deadline = time.monotonic() + 120
    while len(list(scratch.glob("**/grader-*/work"))) < 3:  # two workers, one kernel ahead
        assert grading.poll() is None and time.monotonic() < deadline, grading.communicate()
        time.sleep(0.02)
    _stop(grading, signum, group, scratch)


# -- the signal's exception, lost or waiting: without a kernel ----------------------------


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in signals.STOPPING}
    signals.stop_on_signals()
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
    signals._raised = 0
    signals._pending = None
    signals._held = 0


def _let_the_handler_run() -> None:
    for _ in range(1000):  # the handler runs between bytecodes
        pass


def test_a_signal_whose_exception_a_library_swallowed_stops_at_the_next_check(handlers):
    try:  # torch's C code importing numpy clears any exception, this one too
        os.kill(os.getpid(), signal.SIGINT)
        _let_the_handler_run()
    except KeyboardInterrupt:
        pass
    os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C is still ignored
    _let_the_handler_run()
    with signals.held():
        signals.check()  # a held section is never cut short
    with pytest.raises(KeyboardInterrupt):
        signals.check()


def test_a_worker_forked_in_a_held_section_raises_what_arrived_meanwhile(handlers):
    signals._held = 1  # the parent's section, which the forked worker never leaves
    os.kill(os.getpid(), signal.SIGTERM)
    _let_the_handler_run()
    with pytest.raises(signals.Stopped):
        signals.forked()
    assert signals._held == 0

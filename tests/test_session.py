"""The session's recovery policy, with a fake kernel process: what a timeout, an interrupt
that does not take, a dead kernel and a passed deadline lead to, and that every restart
is counted once. (The same paths with real kernels are in test_faults.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from grader.core.limits import Limits
from grader.core.outcomes import CallTimeout, KernelCrashed, NoAnswer, Status
from grader.kernel import wire
from grader.kernel.cells import CellRun, Execution
from grader.kernel.session import Session


class FakeProcess:
    """Plays a kernel process: `call` and `execute` give the scripted statuses in turn
    (then PASSED, a call answering None); `settles` says whether an interrupt takes."""

    def __init__(self, log: list[str], script: list[Status], settles: bool = True) -> None:
        self.log = log
        self.script = script
        self.settles = settles
        self.running = True
        self.pid = None
        self.shim = "shim"
        self.namespace = "ns"
        self.last_message_id = ""
        self.restart_loop = True  # what a call's error says of the loop

    def _next(self, what: str) -> Execution:
        status = self.script.pop(0) if self.script else Status.PASSED
        self.log.append(f"{what}:{status.value}")
        error = status == Status.ERROR
        answer = wire.pack({"value": None})
        return Execution(status=status, answer=answer, restart_loop=error and self.restart_loop)

    def call(self, payload: bytes, timeout: float) -> Execution:
        return self._next("call")

    def execute(self, source: str, timeout: float, keep_output: bool) -> Execution:
        return self._next(f"{'cell' if keep_output else 'replay'} {source}")

    def interrupt(self) -> None:
        self.log.append("interrupt")

    def settled(self) -> bool:
        self.log.append(f"settled:{self.settles}")
        return self.settles

    def stop(self) -> None:
        self.log.append("stop")
        self.running = False


def session_with(tmp_path: Path, *scripts: list[Status], settles: bool = True, **limits):
    """A session whose kernels are fake: the first runs `scripts[0]`, each fresh one the
    next script (or nothing)."""
    session = Session([(0, "a"), (1, "b"), (2, "c")], Limits(**limits))
    log: list[str] = []
    queue = list(scripts)

    def launch() -> None:
        log.append("start")
        session._process = FakeProcess(log, queue.pop(0) if queue else [], settles)  # type: ignore[assignment]

    session._launch = launch  # type: ignore[method-assign]
    session._connect = lambda: None  # type: ignore[method-assign]
    launch()
    return session, log


def with_cells(session: Session, *statuses: Status) -> Session:
    session.cells = [CellRun(i, s) for i, s in enumerate(statuses)]
    return session


def test_a_timeout_that_the_interrupt_ends_keeps_the_kernel(tmp_path):
    session, log = session_with(tmp_path, [Status.TIMEOUT])
    with pytest.raises(CallTimeout, match="20 s limit"):
        session.call({"op": "call"})
    assert log == ["start", "call:timeout", "interrupt", "settled:True"]
    assert session.restarts == 0


def test_an_interrupt_that_does_not_take_means_a_fresh_kernel_and_a_replay(tmp_path):
    session, log = session_with(tmp_path, [Status.TIMEOUT], settles=False)
    with_cells(session, Status.PASSED, Status.TIMEOUT, Status.ERROR)
    with pytest.raises(CallTimeout):
        session.call({"op": "call"})
    assert log == [
        "start", "call:timeout", "interrupt", "settled:False", "stop", "start",
        "replay a:passed", "replay c:passed",  # cells that completed, raising or not
    ]  # fmt: skip
    assert session.restarts == 1


def test_a_dead_kernel_is_replaced_and_the_test_is_crashed(tmp_path):
    session, log = session_with(tmp_path, [Status.CRASHED])
    with_cells(session, Status.PASSED)
    with pytest.raises(KernelCrashed):
        session.call({"op": "call"})
    assert log == ["start", "call:crashed", "stop", "start", "replay a:passed"]
    assert session.restarts == 1


def test_a_cell_that_kills_the_kernel_counts_as_a_restart(tmp_path):
    session, log = session_with(tmp_path, [Status.PASSED, Status.CRASHED])
    session._count_cut_output = lambda: None  # type: ignore[method-assign]
    session._run_cells()
    assert [c.status for c in session.cells] == [Status.PASSED, Status.CRASHED, Status.PASSED]
    assert log == ["start", "cell a:passed", "cell b:crashed", "stop", "start",
                   "replay a:passed", "cell c:passed"]  # fmt: skip
    assert session.restarts == 1


def test_a_replayed_cell_that_dies_ends_the_replay(tmp_path):
    session, log = session_with(tmp_path, [Status.CRASHED], [Status.CRASHED])
    with_cells(session, Status.PASSED, Status.PASSED)
    with pytest.raises(KernelCrashed):
        session.call({"op": "call"})
    assert log == ["start", "call:crashed", "stop", "start", "replay a:crashed"]
    assert session.restarts == 1


def test_past_the_deadline_nothing_is_restarted(tmp_path):
    session, log = session_with(tmp_path, [Status.CRASHED])
    session.deadline = time.monotonic() - 1
    with pytest.raises(CallTimeout, match="grading passed its 900 s limit"):
        session.call({"op": "call"})
    assert "start" not in log[1:] and session.restarts == 0
    with pytest.raises(CallTimeout, match="grading passed"):  # and no kernel is left to call
        session.call({"op": "call"})


@pytest.mark.parametrize("out_of_step", [True, False], ids=["out of step", "no loop"])
def test_a_channel_error_is_no_answer_and_interrupts_only_a_loop_out_of_step(tmp_path, out_of_step):
    session, log = session_with(tmp_path, [Status.ERROR])
    session._process.restart_loop = out_of_step  # type: ignore[union-attr]
    with pytest.raises(NoAnswer):
        session.call({"op": "call"})
    steps = ["interrupt", "settled:True"] if out_of_step else []
    assert log == ["start", "call:error", *steps]
    assert session.calls == 1 and session.restarts == 0
    assert session.call({"op": "call"}) == {"value": None}


def _frame(tree: object, blob: bytes = b"") -> bytes:
    import json

    structure = json.dumps(tree).encode()
    return wire._WIRE_LENGTH.pack(len(structure)) + structure + blob


@pytest.mark.parametrize(
    "entry",
    [
        {"T": ["float32", [0, 2**70], 0, 0, [1, 1]]},  # a size past int64, empty
        {"T": ["float32", [2**63 + 5], 0, 4, [1]]},  # past int64
        {"T": ["float32", [2, 2], 0, 16, [2**62, 1]]},  # a stride torch cannot hold
        {"size": [2**70]},
    ],
)
def test_a_forged_answer_is_no_answer_never_a_grader_error(entry):
    """What the graded code forges on the wire is that call's `no answer` (the
    candidate's failure, exit 0 or 1), never an exception out of the grader."""
    from grader.core.outcomes import NoAnswer
    from grader.kernel.session import read_answer

    with pytest.raises(NoAnswer, match="malformed (tensor entry|structure)"):
        read_answer(_frame({"d": {"value": entry}}, b"\0" * 16))

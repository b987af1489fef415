"""The grader's own bounds and defences, without a kernel: what it accepts from the kernel,
what it passes to it, and how a stopping signal waits for cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest
import torch

from grader.core import signals
from grader.core.outcomes import NoAnswer, Status
from grader.core.records import Finding, RecordReader
from grader.kernel import launch, sandbox, wire
from grader.kernel import session as session_module
from grader.kernel.channel import Channel
from grader.kernel.session import read_answer


def _read(value: object) -> dict:
    return read_answer(wire.pack(value))


def _forged(structure: object, blob: bytes = b"") -> bytes:
    """A payload as a kernel could write it by hand: any structure, any bytes."""
    data = json.dumps(structure).encode()
    return len(data).to_bytes(4, "little") + data + blob


def test_a_plain_answer_is_read():
    answer = _read({"value": (torch.ones(2, 3), 4, "x", torch.float64, torch.Size([2]))})
    value = answer["value"]
    assert torch.equal(value[0], torch.ones(2, 3)) and value[1:] == (4, "x", torch.float64, (2,))


def test_every_dtype_crosses_the_wire_unchanged():
    for dtype in wire.wire_dtypes().values():
        tensor = (torch.arange(6) % 2).to(dtype).reshape(2, 3)
        assert torch.equal(_read({"value": tensor})["value"], tensor), dtype
    assert _read({"value": torch.zeros(0, 3)})["value"].shape == (0, 3)


def test_bytes_and_dicts_with_other_keys_cross_the_wire():
    """What a tokenizer or a sampler answers: bytes, and dicts keyed by ints, bytes or
    tuples of them (merges, vocabularies)."""
    value = {"text": b"\x00\xffab", 3: [b"x", (2, b"")], (1, 2): torch.arange(3), b"k": {"s": 1}}
    answer = _read({"value": value})["value"]
    assert answer.keys() == value.keys() and answer["text"] == b"\x00\xffab"
    assert answer[3] == [b"x", (2, b"")] and answer[b"k"] == {"s": 1}
    assert torch.equal(answer[(1, 2)], torch.arange(3))


def test_a_forged_mapping_or_bytes_entry_is_refused():
    for forged in ({"m": [[{"b": "zz"}, 1]]}, {"m": [[[1], 2]]}, {"m": [[1]]}, {"b": "0g"}):
        with pytest.raises(NoAnswer):
            read_answer(_forged({"d": {"value": forged}}))


def test_a_tensor_that_claims_more_bytes_than_it_holds_is_refused():
    forged = _forged({"d": {"value": {"T": ["float32", [2**20], 0, 4, [1]]}}}, b"\0" * 4)
    with pytest.raises(NoAnswer, match="do not match its shape"):
        read_answer(forged)


def test_a_tensors_layout_crosses_and_a_stride_zero_view_counts_at_its_full_size():
    transposed = torch.randn(2, 12, 5).transpose(1, 2)
    value = _read({"value": transposed})["value"]
    assert torch.equal(value, transposed) and value.stride() == transposed.stride()
    view = torch.zeros(1).expand(2**31)  # 4 bytes of storage, 8 GiB once used
    payload = wire.pack({"value": view})
    assert len(payload) < 200
    with pytest.raises(NoAnswer, match="more than the grader accepts"):
        read_answer(payload)


def test_many_tensors_add_up():
    entry = {"T": ["float32", [1024, 1024], 0, 4 * 2**20, [1024, 1]]}
    forged = _forged({"d": {"value": [entry] * 20}}, b"\0" * 4 * 2**20)
    with pytest.raises(NoAnswer, match="more than the grader accepts"):
        read_answer(forged)


def test_a_large_structure_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr(session_module, "MAX_STRUCTURE_BYTES", 1000)
    with pytest.raises(NoAnswer, match="structure is too large"):
        _read({"value": list(range(5000))})


def test_a_deeply_nested_answer_is_refused():
    value: object = 1
    for _ in range(40):
        value = [value]
    with pytest.raises(NoAnswer, match="nested too deeply"):
        _read({"value": value})


def test_a_garbled_answer_is_the_candidates_doing():
    for garbled in (b'\x03\0\0\0{"d', _forged({"x": 1, "y": 2}), _forged({"dtype": "evil"})):
        with pytest.raises(NoAnswer):
            read_answer(garbled)


def test_no_pickle_crosses_the_wire():
    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    with pytest.raises(wire.WireError, match="does not carry .*Evil"):
        wire.pack({"value": Evil()})


class Kernel:
    """The kernel's ends of a call channel, played by this process."""

    def __init__(self, channel: Channel) -> None:
        self.requests, self.answers = (os.dup(fd) for fd in channel.kernel_fds)
        self.alive = True
        channel.launched(None, lambda: self.alive)

    def write(self, data: bytes) -> None:
        os.write(self.answers, data)

    def frame(self, sequence: int, value: object) -> bytes:
        payload = wire.pack(value)
        return wire.WIRE_HEADER.pack(sequence, len(payload)) + payload

    def close(self) -> None:
        os.close(self.requests)
        os.close(self.answers)


@pytest.fixture
def pipes():
    channel = Channel()
    kernel = Kernel(channel)
    yield channel, kernel
    channel.close()
    with contextlib.suppress(OSError):
        kernel.close()


def test_a_fresh_loop_skips_what_an_interrupted_one_left(pipes):
    channel, kernel = pipes
    soon = time.monotonic() + 5
    kernel.write(kernel.frame(1, {"value": "late"})[:30])  # half an old answer
    kernel.write(b"TOKEN" + kernel.frame(1, {"value": "fresh"}))
    assert channel.resync(b"TOKEN", soon).status == Status.PASSED
    assert channel.send(wire.pack({"op": "call"}), soon).status == Status.PASSED
    answer = channel.receive(soon)
    assert read_answer(answer.payload) == {"value": "fresh"}


def test_a_loop_that_ends_before_it_begins_is_known_at_once(pipes):
    channel, kernel = pipes
    kernel.write(b"ENDED")  # the loop's `finally`, with no start token before it
    started = time.monotonic()
    gone = channel.resync(b"TOKEN", started + 5, b"ENDED")
    assert (gone.status, gone.message) == (Status.ERROR, "the grader's shim is gone")
    assert time.monotonic() - started < 1
    kernel.write(b"TOKEN" + b"ENDED")  # a loop that began, then ended: it began
    assert channel.resync(b"TOKEN", time.monotonic() + 5, b"ENDED").status == Status.PASSED


def test_an_answer_out_of_step_or_too_long_is_an_error(pipes):
    channel, kernel = pipes
    soon = time.monotonic() + 5
    channel.send(b"x", soon)
    kernel.write(kernel.frame(7, {"value": 1}))
    assert channel.receive(soon).message == "an answer out of step with its request"
    kernel.write(b"T")  # a fresh loop
    channel.resync(b"T", soon)
    channel.send(b"x", soon)
    kernel.write(wire.WIRE_HEADER.pack(2, 2**40))
    assert "more than the grader reads" in channel.receive(soon).message


def test_no_answer_in_time_is_a_timeout_and_a_dead_kernel_a_crash(pipes, monkeypatch):
    monkeypatch.setattr("grader.kernel.channel.EXIT_SECONDS", 0.2)
    channel, kernel = pipes
    started = time.monotonic()
    assert channel.receive(started + 0.2).status == Status.TIMEOUT
    assert 0.2 <= time.monotonic() - started < 2
    kernel.close()  # then it dies: the pipes close a moment before it is gone
    kernel.alive = False
    assert channel.receive(time.monotonic() + 5).status == Status.CRASHED
    assert channel.send(b"x" * 10, time.monotonic() + 5).status == Status.CRASHED


def test_a_kernel_that_closes_its_ends_itself_is_out_of_step_for_good(pipes, monkeypatch):
    monkeypatch.setattr("grader.kernel.channel.EXIT_SECONDS", 0.2)
    channel, kernel = pipes
    kernel.close()
    closed = channel.receive(time.monotonic() + 5)
    assert (closed.status, closed.message) == (Status.ERROR, "the kernel closed the call channel")
    started = time.monotonic()  # from now on, at once
    assert channel.send(b"x", started + 5).status == Status.ERROR
    assert channel.resync(b"T", started + 5).status == Status.ERROR
    assert time.monotonic() - started < 0.1


def test_the_kernel_environment_is_an_allow_list(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = launch.kernel_environment(tmp_path / "home", "token")
    assert "secret" not in env.values()
    assert env["LC_ALL"] == "C.UTF-8" and env["OMP_NUM_THREADS"] == "2"
    assert env["HOME"] == str(tmp_path / "home")
    assert env["TMPDIR"].startswith(str(tmp_path / "home"))
    assert env["IPYTHONDIR"].startswith(str(tmp_path / "home"))


def test_the_sandbox_empties_the_scratch_spaces_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    scratch = tmp_path / "grader-x"
    scratch.mkdir()
    argv = sandbox.wrap(["python"], writable=[scratch], private=[tmp_path])
    tmpfs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert str(tmp_path) in tmpfs or any(str(tmp_path).startswith(t + "/") for t in tmpfs)
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert binds == [str(scratch)]
    assert argv.index("--bind") > max(i for i, a in enumerate(argv) if a == "--tmpfs")


def test_contain_adds_only_a_pid_namespace(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    argv = sandbox.contain(["python", "-c", "pass"])
    assert argv[-3:] == ["python", "-c", "pass"]
    assert "--unshare-pid" in argv and "--unshare-all" not in argv
    assert "--dev-bind" in argv and "--ro-bind" not in argv
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    assert sandbox.contain(["python"]) == ["python"]


def test_findings_are_bounded_per_kind():
    reader = RecordReader([])
    for i in range(500):
        reader.add(Finding("machinery", f"event {i}"))
    reader.add(Finding("hidden", "opened the suites"))
    machinery = [f for f in reader.findings if f.kind == "machinery"]
    assert len(machinery) == 51
    assert machinery[-1].message == "... and 450 more of this kind"
    assert Finding("hidden", "opened the suites") in reader.findings


def test_forged_pid_records_are_bounded():
    reader = RecordReader([])
    reader.feed(b"".join(b'{"k": "pid", "m": "%d"}\n' % i for i in range(10_000)))
    assert reader.pids == list(range(9_990, 10_000))


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in signals.STOPPING}
    signals.stop_on_signals()
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
    signals._raised = False
    signals._pending = None


def test_a_signal_during_cleanup_waits_for_its_end(handlers):
    done = []
    with pytest.raises(signals.Stopped), signals.held():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes: give it the chance
            pass
        done.append("cleanup finished")
    assert done == ["cleanup finished"]


def test_later_signals_are_ignored_once_stopping(handlers):
    with pytest.raises(signals.Stopped):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    os.kill(os.getpid(), signal.SIGTERM)  # on the way out: ignored, no second exception
    for _ in range(1000):
        pass


def test_sigint_is_a_keyboard_interrupt(handlers):
    with pytest.raises(KeyboardInterrupt), signals.held():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass


def test_held_sections_nest(handlers):
    order = []
    with pytest.raises(signals.Stopped), signals.held():
        with signals.held():
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):
                pass
            order.append("inner")
        order.append("outer")
    assert order == ["inner", "outer"]


# -- --memory-limit caps what the kernel holds, all its processes together ------------------

SPREAD_OUT = """\
import subprocess, sys, time
hold = "x = bytearray(700 * 2**20)\\nimport time\\ntime.sleep(30)"
children = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(4)]
time.sleep(6)
alive = sum(c.poll() is None for c in children)
print(f"alive={alive}")
"""


@pytest.mark.kernel
def test_a_memory_limit_caps_the_kernels_processes_together():
    """Four children of 700 MiB each: each is under a 2G address-space cap of its own, but
    not together. Where a memory cgroup can be made, the limit is their sum (some are
    killed, or the kernel itself); elsewhere docs/security.md says the cap is per process."""
    from grader.core.limits import GiB, Limits
    from grader.kernel import Session, memory

    if not memory.available():
        pytest.skip("no memory cgroup can be made here")
    with Session([(0, SPREAD_OUT)], Limits(cell_timeout=40, memory_bytes=2 * GiB)) as session:
        session.prepare()
        [cell] = session.cells
    assert not (cell.status == Status.PASSED and "alive=4" in cell.output), cell

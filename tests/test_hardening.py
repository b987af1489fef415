"""The grader's own bounds and defences, without a kernel: what it accepts from the kernel,
what it passes to it, and how a stopping signal waits for cleanup."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from grader import signals
from grader.kernel import channel, launch, sandbox
from grader.kernel.channel import read_answer as _read_answer
from grader.outcomes import NoAnswer
from grader.records import Finding, RecordReader


def _answer_file(tmp_path: Path, value: object) -> Path:
    path = tmp_path / "answer.pt"
    torch.save(value, path)
    return path


def test_a_plain_answer_is_read(tmp_path):
    answer = _read_answer(_answer_file(tmp_path, {"value": (torch.ones(2, 3), 4, "x")}))
    assert answer is not None and torch.equal(answer["value"][0], torch.ones(2, 3))


def test_a_missing_answer_is_none(tmp_path):
    assert _read_answer(tmp_path / "absent.pt") is None


def test_a_stride_zero_view_is_counted_at_its_full_size(tmp_path):
    view = torch.zeros(1).expand(2**31)  # 4 bytes of storage, 8 GiB once used
    path = _answer_file(tmp_path, {"value": view})
    assert path.stat().st_size < 10_000
    with pytest.raises(NoAnswer, match="more than the grader accepts"):
        _read_answer(path)


def test_many_small_tensors_add_up(tmp_path):
    base = torch.zeros(1024, 1024)
    tensors = [base[:] for _ in range(20)]  # one 4 MiB storage in the file, 80 MiB in use
    with pytest.raises(NoAnswer, match="more than the grader accepts"):
        _read_answer(_answer_file(tmp_path, {"value": tensors}))


def test_a_large_structure_is_refused_before_it_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(channel, "MAX_STRUCTURE_BYTES", 1000)
    with pytest.raises(NoAnswer, match="structure is too large"):
        _read_answer(_answer_file(tmp_path, {"value": list(range(5000))}))


def test_a_deeply_nested_answer_is_refused(tmp_path):
    value: object = 1
    for _ in range(40):
        value = [value]
    with pytest.raises(NoAnswer, match="nested too deeply"):
        _read_answer(_answer_file(tmp_path, {"value": value}))


def test_an_oversized_file_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(channel, "MAX_ANSWER_BYTES", 100)
    with pytest.raises(NoAnswer, match="sane size"):
        _read_answer(_answer_file(tmp_path, {"value": torch.zeros(100)}))


def test_a_garbled_answer_is_the_candidates_doing(tmp_path):
    path = tmp_path / "answer.pt"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(NoAnswer, match="unreadable answer"):
        _read_answer(path)


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

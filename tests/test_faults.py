"""The fault corpus: hostile and broken submissions, each graded through the real CLI.

Every case asserts the exit code, the verdict, that grading finished within its bound,
that no process it started is left, and that the notebook's folder is unchanged.
Each grading runs with its own TMPDIR, so its scratch space, its kernel and everything the
candidate started carry a marker we can look for afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from tests.helpers import SOLUTIONS, WORKERS, Graded, leftovers

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

SOLUTION = nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4)
FORWARD = "        source = x if kv is None else kv\n"
RETURN = "        return y, (weights.mean(dim=1) if need_weights else None)\n"
FAST = ["--cell-timeout", "3", "--call-timeout", "3"]


@dataclass(frozen=True)
class Fault:
    """A submission built from the solution: `replace` pairs applied, `cells` appended
    (or, with `only`, the notebook is just those cells)."""

    name: str
    expect: Callable[[dict], None]
    cells: tuple[str, ...] = ()
    replace: tuple[tuple[str, str], ...] = ()
    only: bool = False
    flags: tuple[str, ...] = tuple(FAST)
    exit_code: int | None = 1  # None: 0 or 1, as the expectation decides
    bound: float = 90.0
    env: dict[str, str] = field(default_factory=dict)


def statuses(report: dict) -> dict[str, str]:
    return {t["id"]: t["status"] for t in report["tests"]}


def message(report: dict, test: str) -> str:
    return next(t["message"] for t in report["tests"] if t["id"] == test)


def full_marks_with_cell(kind: str, text: str = "") -> Callable[[dict], None]:
    def expect(report: dict) -> None:
        assert report["score"] == report["max_score"]
        assert [e["kind"] for e in report["cell_errors"]] == [kind], report["cell_errors"]
        assert text in report["cell_errors"][0]["message"], report["cell_errors"]

    return expect


def only_test(test: str, status: str, text: str) -> Callable[[dict], None]:
    """Exactly one test does not pass, with this status and message."""

    def expect(report: dict) -> None:
        bad = {k: v for k, v in statuses(report).items() if v != "passed"}
        assert bad == {test: status}, bad
        assert text in message(report, test), message(report, test)

    return expect


def every_test(status: str, text: str) -> Callable[[dict], None]:
    def expect(report: dict) -> None:
        assert set(statuses(report).values()) == {status}, statuses(report)
        assert all(text in t["message"] for t in report["tests"]), report["tests"][0]["message"]

    return expect


def three_then_skipped(status: str) -> Callable[[dict], None]:
    """The first three tests run (the public ones come first) end with `status`; the
    rest are skipped, saying why."""

    def expect(report: dict) -> None:
        s = statuses(report)
        assert sorted(s.values()) == sorted([status] * 3 + ["skipped"] * (len(s) - 3)), s
        skipped = [t for t in report["tests"] if t["status"] == "skipped"]
        assert all("the last 3 tests timed out or killed the kernel" in t["message"]
                   for t in skipped)  # fmt: skip
        assert report["score"] == 0

    return expect


hung_forward = three_then_skipped("timeout")


def cell_crashed_then_recovered(report: dict) -> None:
    full_marks_with_cell("crashed", "kernel died")(report)
    assert "the kernel was restarted 1 time(s)" in report["notes"], report["notes"]


def crashed_then_recovered(report: dict) -> None:
    only_test("single_token_and_batch_of_one", "crashed", "kernel died")(report)
    assert any("restarted" in n for n in report["notes"])


def flood_cut(report: dict) -> None:
    assert report["score"] == report["max_score"]
    assert report["cell_errors"] == []
    [cut] = report["cut_output"]
    assert cut["start"].startswith("xxxx") and cut["cut"] > 99_000_000, cut


def from_scratch_fails_naming(call: str) -> Callable[[dict], None]:
    """The run-time check fails, naming `call`; everything else passes (a built-in found by
    a computed name is a note in the source: the evidence is the call)."""

    def expect(report: dict) -> None:
        bad = {k for k, v in statuses(report).items() if v != "passed"}
        assert bad == {"no_builtin_attention_at_run_time"}, bad
        assert call in message(report, "no_builtin_attention_at_run_time")

    return expect


def from_scratch_runtime_names(call: str) -> Callable[[dict], None]:
    def expect(report: dict) -> None:
        assert statuses(report)["no_builtin_attention_at_run_time"] == "failed"
        assert call in message(report, "no_builtin_attention_at_run_time")

    return expect


def noted_or_seen_working(text: str) -> Callable[[dict], None]:
    """A program that never stops working (it forks without end, burning CPU): the notes
    name it, and if the grader caught it working while the hidden tests ran, the run-time
    check fails saying so (a program working then is taken to work for the graded calls);
    nothing else is lost either way."""

    def expect(report: dict) -> None:
        bad = {k: v for k, v in statuses(report).items() if v != "passed"}
        assert bad in ({}, {"no_builtin_attention_at_run_time": "failed"}), bad
        if bad:
            assert "while the hidden tests ran" in message(
                report, "no_builtin_attention_at_run_time"
            )
        notes = [f["message"] for f in report["integrity"] if f["kind"] == "note"]
        assert any(text in n for n in notes), report["integrity"]

    return expect


def one_test_and_from_scratch(
    test: str, status: str, text: str = "", scratch: str = ""
) -> Callable[[dict], None]:
    """`test` does not pass (with this status, its message saying `text`), nor does the
    run-time from-scratch test (its message saying `scratch`: machinery that can switch
    the watch off, used by the graded code); everything else passes."""

    def expect(report: dict) -> None:
        bad = {k: v for k, v in statuses(report).items() if v != "passed"}
        assert bad == {test: status, "no_builtin_attention_at_run_time": "failed"}, bad
        assert text in message(report, test)
        assert scratch in message(report, "no_builtin_attention_at_run_time")

    return expect


crashed_and_ctypes_seen = one_test_and_from_scratch(
    "single_token_and_batch_of_one", "crashed", scratch="ctypes"
)
# A forged frame on the call channel costs the call it lands in, nothing after it; the
# frame walk that found the channel is machinery.
forged_frame = one_test_and_from_scratch("single_token_and_batch_of_one", "error", "out of step")


def full_marks_noting(text: str) -> Callable[[dict], None]:
    """Machinery in the cells (processes, builtins, sys.modules) that the graded calls do
    not use costs nothing (a penalty needs evidence): full marks, and the card's integrity
    notes name it."""

    def expect(report: dict) -> None:
        full_marks(report)
        notes = [f["message"] for f in report["integrity"] if f["kind"] == "note"]
        assert any(text in n for n in notes), report["integrity"]

    return expect


def no_credit(kind: str, text: str) -> Callable[[dict], None]:
    """Sabotage: zero points, and the card's integrity findings say what was touched."""

    def expect(report: dict) -> None:
        assert report["score"] == 0, report["score"]
        found = [f for f in report["integrity"] if f["kind"] == kind]
        assert found and text in found[0]["message"], report["integrity"]

    return expect


def full_marks(report: dict) -> None:
    assert report["score"] == report["max_score"], [
        t for t in report["tests"] if t["status"] != "passed"
    ]


SPAWN_DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "301"])
    os._exit(0)
time.sleep(0.5)
"""

# The same, from a fresh environment (no session token); the scratch path in its command
# line lets the test find it.
CLEAN_ENV_DAEMON = """
import os, time
marker = os.environ.get("TMPDIR", "")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sh", ["sh", "-c", f"sleep 305; : {marker}"], {"PATH": "/usr/bin:/bin"})
    os._exit(0)
time.sleep(0.5)
"""


CANARY = "canary-5e1f0c2d9a"
LEAK_SECRETS = """
import glob, os
found = [v for v in os.environ.values() if 'canary' in v]
try:
    paths = glob.glob('/proc/*/environ')
except Exception:
    paths = []
for path in [f'/proc/{os.getppid()}/environ', *paths][:50]:
    try:
        with open(path, 'rb') as f:
            found += [v for v in f.read().decode(errors='replace').split('\\0') if 'canary' in v]
    except Exception:
        pass
raise RuntimeError(f'leaked: {found}')
"""

# Startup files and a module named like one the kernel imports, left for the next kernel.
PLANT_FOR_NEXT_KERNEL = """
import os
startup = os.path.join(os.environ['IPYTHONDIR'], 'profile_default', 'startup')
os.makedirs(startup, exist_ok=True)
with open(os.path.join(startup, '00-sabotage.py'), 'w') as f:
    f.write('import os\\nos._exit(1)\\n')
with open('torch.py', 'w') as f:
    f.write('raise ImportError(\"planted\")\\n')
"""

# Fast the first time, slow on every replay (the marker outlives the kernel).
SLOW_ON_REPLAY = """
import os, time
marker = os.path.join(os.path.dirname(os.getcwd()), 'ran-{i}')
if os.path.exists(marker):
    time.sleep(60)
open(marker, 'w').close()
"""

# Every answer becomes a view of 4 bytes that claims 8 GiB.
FORGE_A_VIEW = """
import sys, torch
shim = next(m for n, m in sys.modules.items() if n.startswith('_grader_shim'))
shim._encode = lambda value, depth=0: torch.zeros(1).expand(2**31)
"""

# A process whose pid changes every millisecond or so (a small Python that forks and
# exits, again and again): one look at /proc sees a pid that is already gone. It touches
# a heartbeat file in the grading's TMPDIR, which `run_fault` watches afterwards.
WALKING_PROCESS = """
import os, subprocess, sys, time
beat = os.path.join(os.path.dirname(os.path.dirname(os.getcwd())), 'heartbeat')
walk = 'import os, sys\\nwhile True:\\n    os.utime(sys.argv[1]) if os.path.exists(sys.argv[1]) else open(sys.argv[1], "w").close()\\n    if os.fork():\\n        os._exit(0)'
subprocess.Popen([sys.executable, '-c', walk, beat], start_new_session=True)
time.sleep(0.5)
"""


def no_canary(report: dict) -> None:
    text = json.dumps(report)
    assert CANARY not in text
    [error] = report["cell_errors"]
    assert "leaked: []" in error["message"], error


def within_the_deadline(report: dict) -> None:
    s = statuses(report)
    assert report["score"] == 0
    assert "skipped" in s.values(), s
    assert any("limit" in t["message"] for t in report["tests"] if t["status"] == "skipped")


def not_stubs(text: str) -> Callable[[dict], None]:
    """The candidate's forward is not a stub: no test says "not implemented"; some say `text`."""

    def expect(report: dict) -> None:
        assert "not_implemented" not in statuses(report).values(), statuses(report)
        assert any(text in t["message"] for t in report["tests"]), report["tests"][0]

    return expect


def few_findings(report: dict) -> None:
    machinery = [f for f in report["integrity"] if f["kind"] == "machinery"]
    assert 1 < len(machinery) <= 51, len(machinery)
    assert machinery[-1]["message"].startswith("... and "), machinery[-1]


FAULTS = [
    Fault(
        "hang_in_top_level_cell",
        full_marks_with_cell("timeout", "cell limit"),
        cells=("while True:\n    pass",),
        exit_code=0,
    ),
    Fault(
        "sleep_in_top_level_cell",
        full_marks_with_cell("timeout", "cell limit"),
        cells=("import time\ntime.sleep(600)",),
        exit_code=0,
    ),
    Fault(
        "cell_that_swallows_the_interrupt",
        full_marks_with_cell("timeout", "cell limit"),
        cells=(
            "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except KeyboardInterrupt:\n        pass",
        ),
        exit_code=0,
    ),
    Fault(
        "forward_that_hangs",
        hung_forward,
        replace=((FORWARD, "        while True:\n            pass\n" + FORWARD),),
    ),
    Fault(
        "forward_that_hangs_and_swallows_the_interrupt",
        hung_forward,
        replace=(
            (
                FORWARD,
                "        import time\n        while True:\n            try:\n                time.sleep(0.05)\n            except KeyboardInterrupt:\n                pass\n"
                + FORWARD,
            ),
        ),
        bound=150,
    ),
    Fault(
        "forward_that_hangs_for_one_shape",
        only_test("single_token_and_batch_of_one", "timeout", "3 s limit"),
        replace=((FORWARD, "        while x.shape[1] == 1:\n            pass\n" + FORWARD),),
    ),
    Fault(
        "os_exit_in_top_level_cell",
        cell_crashed_then_recovered,
        cells=("import os\nos._exit(3)", "print('after')"),
        exit_code=0,
    ),
    Fault(
        "quit_in_top_level_cell",
        full_marks_with_cell("error", "exit() and quit() are disabled"),
        cells=("quit()", "print('after')"),
        exit_code=0,
    ),
    Fault(
        "kills_the_kernel_in_every_test",
        three_then_skipped("crashed"),
        replace=(
            (
                "        super().__init__()\n",
                "        super().__init__()\n"
                "        if getattr(__import__('builtins'), '_graded', False):\n"
                "            __import__('os')._exit(1)\n",
            ),
        ),
        cells=("import builtins\nbuiltins._graded = True",),
        bound=120,
    ),
    Fault(
        "os_exit_in_forward",
        crashed_then_recovered,
        replace=(
            (
                FORWARD,
                "        import os\n        if x.shape[1] == 1:\n            os._exit(1)\n"
                + FORWARD,
            ),
        ),
    ),
    Fault(
        "segfault_in_forward",
        crashed_and_ctypes_seen,
        replace=(
            (
                FORWARD,
                "        import ctypes\n        if x.shape[1] == 1:\n            ctypes.string_at(0)\n"
                + FORWARD,
            ),
        ),
    ),
    Fault(
        "sigkill_in_forward",  # what the OOM killer does
        crashed_then_recovered,
        replace=(
            (
                FORWARD,
                "        import os, signal\n        if x.shape[1] == 1:\n"
                "            os.kill(os.getpid(), signal.SIGKILL)\n" + FORWARD,
            ),
        ),
    ),
    Fault(
        "memory_hog_in_forward",
        only_test("single_token_and_batch_of_one", "failed", "memory limit exceeded"),
        replace=(
            (
                FORWARD,
                "        if x.shape[1] == 1:\n            hog = torch.ones(3 * 2**30 // 4)\n"
                + FORWARD,
            ),
        ),
        flags=(*FAST, "--memory-limit", "2G"),
    ),
    Fault(
        "memory_hog_in_top_level_cell",
        full_marks_with_cell("error", "memory limit exceeded"),
        cells=("hog = bytearray(3 * 2**30)",),
        flags=(*FAST, "--memory-limit", "2G"),
        exit_code=0,
    ),
    Fault(
        "print_flood_in_top_level_cell",
        flood_cut,
        cells=("print('x' * 100_000_000)\nprint('y' * 1_000_000)",),
        exit_code=0,
    ),
    Fault(
        "print_flood_in_forward",
        full_marks,
        replace=((FORWARD, "        print('z' * 1_000_000)\n" + FORWARD),),
        exit_code=0,
    ),
    Fault(
        "input_in_top_level_cell",
        full_marks_with_cell("error", "StdinNotImplementedError"),
        cells=("name = input('your name? ')",),
        exit_code=0,
    ),
    Fault(
        "input_in_forward",
        only_test("single_token_and_batch_of_one", "error", "StdinNotImplementedError"),
        replace=(
            (FORWARD, "        if x.shape[1] == 1:\n            input('continue? ')\n" + FORWARD),
        ),
    ),
    Fault(
        "child_process_left_running",
        full_marks_noting("subprocess"),
        cells=("import subprocess\nchild = subprocess.Popen(['sleep', '302'])",),
        exit_code=0,
    ),
    Fault("double_forked_daemon", full_marks_noting("os.fork"), cells=(SPAWN_DAEMON,), exit_code=0),
    Fault(
        "double_forked_daemon_with_a_clean_environment",
        full_marks_noting("os.fork"),
        cells=(CLEAN_ENV_DAEMON,),
        exit_code=0,
    ),
    Fault(
        "writes_files_in_its_directory",
        full_marks,
        cells=(
            "import os\nopen('out.txt', 'w').write('x')\nos.makedirs('sub/dir', exist_ok=True)",
        ),
        exit_code=0,
    ),
    Fault("no_code_cells", every_test("error", "does not define AttentionConfig"), only=True),
    Fault(
        "syntax_error_in_the_module_cell",
        every_test("error", "does not define MultiHeadAttention"),
        replace=(("class MultiHeadAttention(nn.Module):", "class MultiHeadAttention(nn.Module)"),),
    ),
    Fault(
        "wrong_forward_signature",
        lambda r: (
            None
            if statuses(r)["self_attention_shapes"] == "error"
            and "TypeError" in message(r, "self_attention_shapes")
            else pytest.fail(message(r, "self_attention_shapes"))
        ),
        replace=(
            (
                "        x: torch.Tensor,\n        kv: Optional[torch.Tensor] = None,\n        *,",
                "        x: torch.Tensor,\n        *,",
            ),
        ),
    ),
    Fault(
        "returns_a_tensor_not_a_pair",
        lambda r: (
            None
            if "want a pair (output, weights)" in message(r, "self_attention_shapes")
            else pytest.fail(message(r, "self_attention_shapes"))
        ),
        replace=((RETURN, "        return y\n"),),
    ),
    Fault(
        "returns_none",
        lambda r: (
            None
            if "got None, want a pair" in message(r, "self_attention_shapes")
            else pytest.fail(message(r, "self_attention_shapes"))
        ),
        replace=((RETURN, "        return None\n"),),
    ),
    Fault(
        "returns_python_lists",
        lambda r: (
            None
            if "output y: got a list of 2, want a torch.Tensor"
            in message(r, "self_attention_shapes")
            else pytest.fail(message(r, "self_attention_shapes"))
        ),
        replace=((RETURN, "        return y.tolist(), None\n"),),
    ),
    Fault(
        "builtin_attention_through_an_alias",
        from_scratch_fails_naming("scaled_dot_product_attention"),
        replace=(
            (
                "        y = self.out_proj(self._merge_heads(self.dropout(weights) @ v))\n",
                "        fast = getattr(F, 'scaled_dot_product_' + 'attention')\n"
                "        y = self.out_proj(self._merge_heads(self.dropout(weights) @ v))\n"
                "        if attn_mask is None and key_padding_mask is None and not self.training:\n"
                "            y = self.out_proj(self._merge_heads(fast(q, k, v)))\n",
            ),
        ),
        exit_code=1,
    ),
    Fault(
        "builtin_attention_with_torch_function_disabled",
        from_scratch_runtime_names("scaled_dot_product"),
        replace=(
            (
                "        y = self.out_proj(self._merge_heads(self.dropout(weights) @ v))\n",
                "        y = self.out_proj(self._merge_heads(self.dropout(weights) @ v))\n"
                "        with torch._C.DisableTorchFunction():\n"
                "            F.scaled_dot_product_attention(q, k, v)\n",
            ),
        ),
    ),
    Fault(
        "overrides_display_print_and_exceptions",
        full_marks_noting("builtins"),
        cells=(
            "import builtins, sys\nsys.displayhook = lambda value: None\nget_ipython().display_pub.publish = lambda *a, **k: None\n"
            "builtins.print = lambda *a, **k: None\nbuiltins.AssertionError = RuntimeError\ntorch.allclose = lambda *a, **k: False",
        ),
        exit_code=0,
    ),
    Fault(
        "overrides_torch_save_and_load",
        full_marks,
        cells=(
            "torch.save = lambda *a, **k: None\ntorch.load = lambda *a, **k: {'value': 'forged'}",
        ),
        exit_code=0,
    ),
    Fault(
        "sys_exit_in_forward",
        only_test("single_token_and_batch_of_one", "error", "SystemExit"),
        replace=(
            (
                FORWARD,
                "        import sys\n        if x.shape[1] == 1:\n            sys.exit(0)\n"
                + FORWARD,
            ),
        ),
    ),
    Fault(
        "removes_the_grader_shim",
        every_test("error", "gave no answer"),
        cells=(
            "import sys\nfor name in [n for n in sys.modules if n.startswith('_grader_shim')]:\n    del sys.modules[name]",
        ),
    ),
    Fault(
        "writes_over_every_descriptor",  # its own sockets too: the grader waited forever
        no_credit("tamper", "unreadable data on the grader's record channel"),
        cells=(
            "import os\nfor fd in range(3, 1024):\n    try:\n"
            "        os.set_blocking(fd, False)\n        os.write(fd, b'junk on every line')\n"
            "    except OSError:\n        pass",
        ),
    ),
    Fault(
        "redirects_the_call_channel",  # the grader sees it from /proc, outside the kernel
        no_credit("tamper", "redirected the grader's"),
        cells=(
            "import os, stat\nnull = os.open('/dev/null', os.O_RDWR)\n"
            "for fd in range(3, 1024):\n    try:\n"
            "        if stat.S_ISFIFO(os.fstat(fd).st_mode):\n            os.dup2(null, fd)\n"
            "    except OSError:\n        pass",
        ),
    ),
    Fault(
        "writes_forged_frames_during_a_call",  # out of step: no answer, then a fresh loop
        forged_frame,
        replace=(
            (
                FORWARD,
                "        import os, struct, sys\n        if x.shape[1] == 1:\n"
                "            frame = sys._getframe(1)\n"
                "            while frame is not None and '_answers' not in frame.f_locals:\n"
                "                frame = frame.f_back\n"
                "            if frame is not None:\n"
                "                os.write(frame.f_locals['_answers'], struct.pack('<QQ', 999, 2) + b'{}')\n"
                + FORWARD,
            ),
        ),
    ),
    Fault(
        "replaces_the_answer_file_with_a_fifo",
        lambda r: None if r["score"] < r["max_score"] else pytest.fail("a FIFO earned credit"),
        replace=(
            (
                FORWARD,
                "        import os, sys\n        frame = sys._getframe(1)\n"
                "        while frame is not None and 'response_path' not in frame.f_locals:\n"
                "            frame = frame.f_back\n"
                "        if frame is not None:\n"
                "            os.mkfifo(frame.f_locals['response_path'])\n" + FORWARD,
            ),
        ),
        bound=120,
    ),
    Fault(
        "forges_the_cut_output_counts",
        full_marks_noting("sys.modules"),
        cells=(
            "import sys\nshim = next(m for n, m in sys.modules.items() if n.startswith('_grader_shim'))\n"
            "shim._cut[get_ipython().parent_header['header']['msg_id']] = 'lots'",
        ),
        exit_code=0,
    ),
    Fault(
        "prints_a_fake_score",
        lambda r: None if r["score"] < r["max_score"] / 2 else pytest.fail("forgery earned credit"),
        replace=((RETURN, "        return torch.zeros_like(x), None\n"),),
        cells=('print(\'{"score": 53, "max_score": 53, "level_reached": 8}\')',),
    ),
    # -- hardening: secrets, planted files, deadlines, streams, sizes, statuses ----------
    Fault(
        "reads_the_graders_environment",
        no_canary,
        cells=(LEAK_SECRETS,),
        env={"GRADER_TEST_SECRET": CANARY, "AWS_SECRET_ACCESS_KEY": CANARY},
        # sandboxed, /proc holds the kernel's own processes only: the reads find nothing of
        # the grader's, and nothing is refused (the operating system is the defence)
        exit_code=None,
    ),
    Fault(
        "reads_the_graders_environment_unsandboxed",
        no_canary,
        cells=(LEAK_SECRETS,),
        env={"GRADER_TEST_SECRET": CANARY, "AWS_SECRET_ACCESS_KEY": CANARY},
        flags=(*FAST, "--no-sandbox"),  # the guard refuses the reads (a finding)
    ),
    Fault(
        "plants_startup_files_for_the_next_kernel",
        crashed_then_recovered,
        cells=(PLANT_FOR_NEXT_KERNEL,),
        replace=(
            (
                FORWARD,
                "        import os\n        if x.shape[1] == 1:\n            os._exit(1)\n"
                + FORWARD,
            ),
        ),
    ),
    Fault(
        "slow_replays_stay_within_the_timeout",
        within_the_deadline,
        cells=tuple(SLOW_ON_REPLAY.format(i=i) for i in range(12)),
        replace=((FORWARD, "        __import__('os')._exit(1)\n" + FORWARD),),
        flags=(*FAST, "--timeout", "20"),
        bound=32,
    ),
    Fault(
        "keeps_forking_away",
        noted_or_seen_working("subprocess"),
        cells=(WALKING_PROCESS,),
        exit_code=None,
    ),
    Fault(
        "keeps_forking_away_without_bubblewrap",  # no PID namespace: the kill loop alone
        noted_or_seen_working("subprocess"),
        cells=(WALKING_PROCESS,),
        env={"PATH": str(Path(sys.executable).parent)},
        exit_code=None,
    ),
    Fault(
        "replaces_the_standard_streams",
        full_marks,
        cells=("import sys\nsys.stdout = None\nsys.stderr = None",),
        exit_code=0,
        bound=60,
    ),
    Fault(
        "returns_a_meta_tensor",
        not_stubs("cannot receive"),
        replace=((RETURN, "        return torch.empty_like(y, device='meta'), None\n"),),
    ),
    Fault(
        "torch_raises_not_implemented_in_forward",
        not_stubs("NotImplementedError"),
        replace=((FORWARD, "        torch.empty(3, device='meta').nonzero()\n" + FORWARD),),
    ),
    Fault(
        "returns_a_stride_zero_view_of_gigabytes",
        not_stubs("too large"),
        replace=((RETURN, "        return torch.zeros(1).expand(2**31), None\n"),),
    ),
    Fault(
        "forges_a_stride_zero_answer",  # the shim's encoder replaced: the wire's bound holds
        not_stubs("too large"),
        cells=(FORGE_A_VIEW,),
    ),
    Fault(
        "display_flood_past_the_kernels_cap",
        full_marks_noting("get_ipython"),
        cells=(
            "from IPython.display import HTML, display\n"
            "get_ipython().display_pub._hooks.clear()\n"
            "for _ in range(3):\n    display(HTML('x' * 100_000_000))",
        ),
        exit_code=0,
    ),
    Fault(
        "floods_the_guard_with_findings",
        few_findings,
        # unsandboxed: there the guard refuses each read of /proc/1/fd (sandboxed, /proc is
        # the kernel's own and read-only, and nothing is refused)
        flags=(*FAST, "--no-sandbox"),
        cells=(
            "import os\nfor i in range(5000):\n    try:\n"
            "        os.listdir(f'/proc/1/fd/{i}')\n    except Exception:\n        pass",
        ),
    ),
    Fault(
        "markup_and_control_characters_in_messages",
        only_test("single_token_and_batch_of_one", "error", "[/x] [batch, seq]"),
        replace=(
            (
                FORWARD,
                "        if x.shape[1] == 1:\n"
                "            raise ValueError('[/x] [batch, seq] \\x1b[2J\\x00\\udc80')\n"
                + FORWARD,
            ),
        ),
    ),
]


def build(fault: Fault, folder: Path) -> Path:
    nb = nbformat.from_dict(SOLUTION)
    if fault.only:
        nb.cells = [c for c in nb.cells if c.cell_type == "markdown"]
    for old, new in fault.replace:
        hits = [c for c in nb.cells if old in c.source]
        assert len(hits) == 1, f"{fault.name}: {old!r} found {len(hits)} times"
        hits[0].source = hits[0].source.replace(old, new, 1)
    nb.cells += [nbformat.v4.new_code_cell(s) for s in fault.cells]
    folder.mkdir()
    path = folder / "submission.ipynb"
    nbformat.write(nb, path)
    return path


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


@dataclass(frozen=True)
class Outcome:
    graded: Graded
    seconds: float
    left: list[int]
    folder_before: dict
    folder_after: dict


def still_beating(heartbeat: Path) -> list[int]:
    """[-1] if a candidate process still touches `heartbeat` (one too quick to be seen in
    /proc), else []."""
    if not heartbeat.exists():
        return []
    before = heartbeat.stat().st_mtime_ns
    time.sleep(0.5)
    return [-1] if heartbeat.stat().st_mtime_ns != before else []


def run_fault(fault: Fault, root: Path) -> Outcome:
    folder = root / fault.name
    notebook = build(fault, folder)
    # Short, so the scratch space goes inside it (a deep TMPDIR gives way to /tmp) and the
    # kernel's own TMPDIR, below it, carries the marker.
    scratch = Path(tempfile.mkdtemp(prefix="gf-", dir="/tmp"))
    before = snapshot(folder)
    env = {**os.environ, "TMPDIR": str(scratch), **fault.env}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", str(notebook), "--json", *fault.flags],
        capture_output=True, text=True, timeout=fault.bound * 3, env=env, cwd=folder,
    )  # fmt: skip
    seconds = time.monotonic() - started
    left = leftovers(str(scratch)) + still_beating(scratch / "heartbeat")
    shutil.rmtree(scratch, ignore_errors=True)
    return Outcome(
        Graded(done.returncode, done.stdout, done.stderr), seconds, left, before, snapshot(folder)
    )


class Corpus:
    """Every fault graded in the background from the end of collection (tests/conftest.py
    starts it), one more at a time than there are cores (several spend most of their
    time waiting out a timeout), the longest bounds first."""

    def __init__(self, root: Path) -> None:
        self.pool = ThreadPoolExecutor(WORKERS + 1)
        ordered = sorted(FAULTS, key=lambda f: -f.bound)
        self.futures = {f.name: self.pool.submit(run_fault, f, root) for f in ordered}

    def result(self) -> dict[str, Outcome]:
        return {name: future.result() for name, future in self.futures.items()}

    def stop(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


start_in_background = Corpus


@pytest.fixture(scope="module")
def outcomes(background) -> dict[str, Outcome]:
    return background


def test_corpus_is_big_enough():
    assert len(FAULTS) >= 25
    assert len({f.name for f in FAULTS}) == len(FAULTS)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_fault_is_graded_safely(outcomes, fault):
    outcome = outcomes[fault.name]
    graded = outcome.graded
    expected = (0, 1) if fault.exit_code is None else (fault.exit_code,)
    assert graded.returncode in expected, (graded.returncode, graded.stderr[-2000:])
    assert "Traceback" not in graded.stderr
    fault.expect(graded.report)
    assert outcome.seconds < fault.bound, f"took {outcome.seconds:.1f} s, bound {fault.bound} s"
    assert outcome.left == [], f"processes left behind: {outcome.left}"
    assert outcome.folder_after == outcome.folder_before


# -- signals and literal text: through the real command, outside the corpus ---------------


def _notebook_with(folder: Path, *cells: str, replace: tuple[tuple[str, str], ...] = ()) -> Path:
    return build(Fault(folder.name, full_marks, cells=cells, replace=replace), folder)


def _start_grade(notebook: Path, scratch: Path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(scratch)}
    command = [sys.executable, "-m", "grader.cli", str(notebook), "--json", *flags]
    return subprocess.Popen(
        command, env=env, cwd=notebook.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _wait_for_kernel(grading: subprocess.Popen, marker: str, bound: float = 30) -> None:
    """Until a process of the grading other than `grade` itself (which has the marker in
    its own environment) is there."""
    deadline = time.monotonic() + bound
    while not set(leftovers(marker)) - {grading.pid}:
        assert time.monotonic() < deadline, "the kernel never started"
        time.sleep(0.05)


@pytest.mark.parametrize("delay", [0.0, 1.0, 3.0])
def test_a_storm_of_sigterms_leaves_nothing_behind(tmp_path, delay):
    """SIGTERM every few milliseconds, from `delay` seconds after the kernel appears until
    `grade` exits: cleanup still runs to the end (nothing left, scratch space removed)."""
    notebook = _notebook_with(tmp_path / "storm", "import time\ntime.sleep(600)")
    scratch = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
    try:
        grading = _start_grade(notebook, scratch, "--cell-timeout", "600")
        _wait_for_kernel(grading, str(scratch))
        time.sleep(delay)
        deadline = time.monotonic() + 30
        while grading.poll() is None and time.monotonic() < deadline:
            grading.send_signal(signal.SIGTERM)
            time.sleep(0.003)
        grading.communicate(timeout=30)
        assert grading.returncode == 128 + signal.SIGTERM
        assert leftovers(str(scratch)) == []
        assert list(scratch.iterdir()) == []
    finally:
        for pid in leftovers(str(scratch)):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)


def test_the_kernel_dies_with_the_grader(tmp_path):
    """Even SIGKILL, which no cleanup can catch: the kernel goes with the grader."""
    notebook = _notebook_with(tmp_path / "orphan", "import time\ntime.sleep(600)")
    scratch = Path(tempfile.mkdtemp(prefix="gk-", dir="/tmp"))
    try:
        grading = _start_grade(notebook, scratch, "--cell-timeout", "600")
        _wait_for_kernel(grading, str(scratch))
        grading.kill()
        grading.communicate(timeout=30)
        deadline = time.monotonic() + 5
        while leftovers(str(scratch)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers(str(scratch)) == []
    finally:
        for pid in leftovers(str(scratch)):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)


def test_candidate_text_is_literal_in_every_output(tmp_path):
    """Rich markup, terminal escapes, NUL and a lone surrogate in a candidate's message:
    the card prints them as text, the JUnit file is well-formed XML, results.json loads."""
    raise_it = (
        "        if x.shape[1] == 1:\n"
        "            raise ValueError('[/x] [batch, seq] [bold]b[/bold] \\x1b[2J\\x00\\udc80')\n"
    )
    notebook = _notebook_with(tmp_path / "markup", replace=((FORWARD, raise_it + FORWARD),))
    junit, gradescope = tmp_path / "junit.xml", tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", str(notebook), "--junit", str(junit),
         "--gradescope", str(gradescope)],
        capture_output=True, cwd=notebook.parent, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr.decode(errors="replace")[-2000:]
    card = done.stdout.decode()  # strict: the card is valid UTF-8
    assert all(word in card for word in ("[/x]", "[batch,", "seq]", "[bold]b[/bold]", "\\x1b"))
    assert "\x1b" not in card and "\x00" not in card
    suite = ET.fromstring(junit.read_bytes())
    messages = [e.get("message", "") for e in suite.iter("error")]
    assert any("[/x] [batch, seq]" in m for m in messages), messages
    results = json.loads(gradescope.read_text(encoding="utf-8"))
    assert any("[batch, seq]" in t["output"] for t in results["tests"])

"""Kernels forked from a warm template: each grading's kernel in a fraction of a second.

A cold kernel boots a Python, ipykernel and torch: about two seconds of CPU, paid again
for every notebook. The template (`zygote.py`, run as its own interpreter) pays it once
per `grade` command (a batch's workers share their parent's) and forks each kernel from
itself. Each grading still gets a fresh
process that no earlier grading touched: the template never runs candidate code, and a
forked kernel is never reused.

Isolation is the cold kernel's. Per kernel, the grader starts bubblewrap with exactly the
cold kernel's flags (`sandbox.wrap` under `--sandbox`, `sandbox.contain` otherwise) around
a placeholder (a shell that waits for the grader to go), and the template's kernel enters
the placeholder's namespaces and root, drops its capabilities where the sandbox has none,
and takes the kernel's environment, descriptors and memory cap (see zygote.py). Killing
the placeholder ends the PID namespace, and with it the kernel and all it started. The
template itself sits outside every sandbox: no kernel can see it (its PID namespace),
reach its socket (not in the sandbox's view; and it serves only the process that started
it and that process's children, which no kernel is) or write its files.

Why forking is safe with torch on the CPU: the template imports torch but runs no op, so
its OpenMP pool never started (a child of a process whose pool ran hangs on its first
parallel op); it starts no thread or event loop of its own; each kernel reseeds torch,
numpy and `random`. CUDA is never initialised in the template: `--device cuda` kernels
start cold, and so do kernels where bubblewrap
does not work, and every kernel under `--cold`. `--verbose` says which way each started.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from grader.core.limits import Limits
from grader.kernel import processes as procs
from grader.kernel import syscalls
from grader.kernel.sandbox import kernel_path

log = logging.getLogger("grader.kernel")

# (with the system-call filter's installer, which the forked kernel runs: syscalls.py)
ZYGOTE_SOURCE = syscalls.INSTALL + (Path(__file__).parent / "zygote.py").read_text()
SHARE_VARIABLE = "GRADER_TEMPLATE"  # "KEY ADDRESS": the template a parent shares
TEMPLATE_KEY = "\0template"  # its entry in `processes.register_kernel`: spared by all sessions
# The placeholder every forked kernel's sandbox is built around. It waits for its stdin to
# close: only the grader holds the other end, so it ends, and the PID namespace with it,
# when the grader does, however the grader went (bubblewrap's --die-with-parent misses a
# grader killed before bubblewrap asks for the signal, which a loaded machine makes likely).
PLACEHOLDER = ["/bin/sh", "-c", "echo ready; read _"]
# Modules a kernel imports on its way to answering, beyond what zygote.py imports itself:
# preloaded, the forked kernel does not spend its own CPU on them.
PRELOAD = (
    "IPython.core.completer", "IPython.core.history", "IPython.core.magics",
    "ipykernel.comm", "ipykernel.compiler", "ipykernel.debugger", "ipykernel.eventloops",
    "ipykernel.iostream", "ipykernel.heartbeat", "ipykernel.parentpoller",
    "jupyter_client.connect", "jupyter_core.paths", "comm", "debugpy", "jedi",
    "sqlite3", "asyncio", "tornado.ioloop", "zmq.eventloop.zmqstream",
    "IPython.core.completerlib", "IPython.core.debugger", "IPython.core.logger",
    "IPython.core.oinspect", "IPython.extensions.storemagic", "IPython.utils.wildcard",
    "pdb", "faulthandler", "resource", "tornado.platform.asyncio", "zmq.utils.garbage",
)  # fmt: skip
REQUEST_SECONDS = 10.0  # a fork takes milliseconds; a template that does not answer is broken
# How long a kernel's keeper has, once the kernel has exited, to say how it ended (it does
# within a millisecond: it only has to reap it).
KEEPER_REPORT_SECONDS = 0.5
# Room for the report: the exit and up to 2,000 bytes of last words (zygote.MAX_WORDS),
# JSON-escaped.
KEEPER_REPORT_BYTES = 16384


class TemplateError(Exception):
    """The template could not give this kernel: it starts cold (the reason says why)."""


def cold_reason(limits: Limits, contained: bool) -> str:
    """Why a kernel with these limits starts cold, or "" when it forks from the template."""
    if not limits.warm:
        return "--cold"
    if limits.device != "cpu":
        return "CUDA kernels start cold (the template never initialises CUDA)"
    if not contained:
        return "bubblewrap does not work here (a forked kernel needs its PID namespace)"
    return ""


class Template:
    """The warm template of one grading process (see `for_this_process`)."""

    def __init__(self, address: str | None = None) -> None:
        self.borrowed = address is not None  # shared by our parent: not ours to stop
        self.owner = -1 if self.borrowed else os.getpid()
        self.folder = (
            Path(address).parent if address else Path(tempfile.mkdtemp(prefix="grader-template-"))
        )
        if address is None:
            os.chmod(self.folder, 0o700)
        self.address = address or str(self.folder / "t")
        self.broken = ""  # why it cannot fork kernels (it is then never asked again)
        self.started_at = 0.0
        self.ready_after: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._ready = False
        self._lock = threading.Lock()

    @classmethod
    def borrowing(cls, address: str, pid: int) -> Template:
        """The template listening at `address` (pid `pid`), shared by our parent."""
        template = cls(address)
        template._pid = pid
        template._ready = True
        return template

    @property
    def pid(self) -> int | None:
        """The template's pid, once started."""
        return self._pid

    def start(self, env: dict[str, str]) -> None:
        """Start the template's interpreter with `env` (does not wait for it)."""
        if self._process is not None:
            return
        argv = [
            sys.executable, "-E", "-s", "-S", "-B", "-c", ZYGOTE_SOURCE,
            json.dumps(kernel_path()), self.address, json.dumps(PRELOAD),
        ]  # fmt: skip
        debug = bool(os.environ.get("GRADER_DEBUG"))
        self.started_at = time.monotonic()
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,  # the template exits when we close it (or die)
            stdout=subprocess.DEVNULL,
            stderr=None if debug else subprocess.DEVNULL,
            env=env,
            cwd=self.folder,
        )
        self._pid = self._process.pid
        procs.register_kernel(TEMPLATE_KEY, self._pid)

    def wait_ready(self, timeout: float) -> None:
        """Wait until the template listens (it binds its socket before anything can fork
        from it; a batch's workers share it, so readiness is a connection, not a line
        they would race to read).

        Raises:
            TemplateError: it did not come up in `timeout` seconds, or exited.
        """
        if self._ready:
            return
        if self.broken:
            raise TemplateError(self.broken)
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
                try:
                    probe.connect(self.address)
                    break
                except OSError:
                    pass
            if self.pid is None or not procs.alive(self.pid):
                self._fail("the template did not start")
            if time.monotonic() > deadline:
                self._fail(f"the template was not ready in {timeout:g} s")
            time.sleep(0.01)
        self._ready = True
        if self.ready_after is None and os.getpid() == self.owner:
            self.ready_after = time.monotonic() - self.started_at
            log.info("warm template ready in %.2f s (pid %s)", self.ready_after, self.pid)

    def _fail(self, reason: str) -> NoReturn:
        self.broken = reason
        self.close()
        raise TemplateError(reason)

    def fork(
        self, request: dict[str, Any], fds: list[int], timeout: float
    ) -> tuple[int, int, socket.socket]:
        """Fork a kernel for `request` (see zygote.py) with `fds` attached: its pid, a pidfd
        for it, and the connection on which its keeper says how it ended.

        Raises:
            TemplateError: the template, or the kernel's setup, failed (the kernel, if any,
                is killed).
        """
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._lock:
                self.wait_ready(timeout)
                try:
                    conn.settimeout(REQUEST_SECONDS)
                    conn.connect(self.address)
                    socket.send_fds(conn, [json.dumps(request).encode()], fds)
                    data, got, _, _ = socket.recv_fds(conn, 1 << 16, 1)
                except OSError as e:
                    self._fail(f"the template did not answer ({e})")
            try:
                answer = json.loads(data) if data else {"error": "the template closed the request"}
            except ValueError:
                answer = {"error": "the template's answer was malformed"}
            if "pid" not in answer:
                for fd in got:
                    os.close(fd)
                raise TemplateError(f"the forked kernel failed to start: {answer.get('error')}")
            if len(got) != 1:
                raise TemplateError("the template sent no pidfd")
        except BaseException:
            conn.close()
            raise
        return int(answer["pid"]), got[0], conn

    def close(self) -> None:
        """Stop the template (kernels forked from it live on until their gradings end);
        in a process it serves but did not start it (a batch worker), only forget it."""
        process, self._process = self._process, None
        self._ready = False
        if os.getpid() != self.owner:
            return
        if process is not None:
            for stream in (process.stdin,):
                if stream is not None:
                    stream.close()
            process.kill()
            process.wait()
            procs.forget_kernel(TEMPLATE_KEY)
        shutil.rmtree(self.folder, ignore_errors=True)


_templates: dict[int, Template] = {}  # by the pid of the process it serves


def for_this_process(env: dict[str, str], key: str, *, for_children: bool = False) -> Template:
    """This process's template. A template serves the process that started it and that
    process's direct children: a batch's workers use their parent's (one template for the
    whole batch), and a `grade` uses the one its parent shares under `key` (see
    `launch.share_template`), unless its own children are to use it (`for_children`).
    Otherwise one is started now with `env`."""
    template = _templates.get(os.getpid()) or _templates.get(os.getppid())
    if template is not None and (template.broken or (for_children and template.borrowed)):
        template = None
    if template is None:
        template = None if for_children else _borrow(key)
        if template is None:
            template = Template()
            template.start(env)
        if not _templates:
            atexit.register(close_all)
        _templates[os.getpid()] = template
    return template


def fingerprint(env: dict[str, str]) -> str:
    """A template's identity for sharing: this interpreter, the template's program and
    preloads, the kernel's path and the variables kernels are passed (`env`)."""
    blob = json.dumps([sys.executable, ZYGOTE_SOURCE, PRELOAD, kernel_path(), sorted(env.items())])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _listener(address: str, deadline: float) -> bytes:
    """The credentials of the process listening at `address`, waiting until `deadline` for
    a template that is still booting (its folder is there, its socket not yet).

    Raises:
        OSError: nothing listens there by then.
    """
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
            try:
                probe.connect(address)
                return probe.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
                )
            except FileNotFoundError:
                if time.monotonic() > deadline or not os.path.isdir(os.path.dirname(address)):
                    raise
        time.sleep(0.02)


def _borrow(key: str) -> Template | None:
    """The template our parent shares under `key` (`SHARE_VARIABLE`), if it is there,
    answers, and is ours: a folder only our user can enter, a listener of our user."""
    shared_key, _, address = os.environ.get(SHARE_VARIABLE, "").partition(" ")
    if shared_key != key or not address:
        return None
    try:
        folder = os.lstat(Path(address).parent)
        if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.geteuid():
            return None
        if folder.st_mode & 0o077:
            return None
        creds = _listener(address, time.monotonic() + REQUEST_SECONDS)
    except OSError:
        return None
    pid, uid, _ = struct.unpack("3i", creds)
    if uid != os.geteuid():
        return None
    return Template.borrowing(address, pid)


def close_all() -> None:
    """Stop this process's template (at exit; a forked process leaves its parent's)."""
    template = _templates.pop(os.getpid(), None)
    if template is not None:
        template.close()


@dataclass
class WarmPlan:
    """What a forked kernel needs besides what jupyter_client passes at launch."""

    placeholder: list[str]  # bubblewrap's command around PLACEHOLDER
    kernel_argv: list[str]  # ipykernel's arguments (after the connection file)
    address_space: int | None
    hangup_fd: int
    group: Path | None  # the kernel's memory cgroup
    startup_timeout: float
    template_env: dict[str, str]  # the template's, if this kernel must start it
    template_key: str  # which shared template it may use (`fingerprint`)
    ids: tuple[int, int] | None = None  # the kernel's uid and gid, when not ours (as root)
    seccomp: str = ""  # the system-call filter the kernel installs, in hex (syscalls.py)
    reason: list[str] = field(default_factory=list)  # set when the kernel started cold


class ForkedKernel:
    """A kernel forked from the template, as jupyter_client's provisioner sees a process
    (`poll`, `wait`, `send_signal`, `kill`): watched through a pidfd, since the kernel is
    not our child; killing it also ends its placeholder, and so its PID namespace."""

    stdin = stdout = stderr = None

    shared = ""  # " shared by process N" where the template is our parent's

    def __init__(
        self,
        pid: int,
        pidfd: int,
        placeholder: subprocess.Popen[bytes],
        keeper: socket.socket | None = None,
    ) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.placeholder = placeholder
        self.keeper = keeper  # where the kernel's keeper says how it ended
        self.returncode: int | None = None
        self.reported = False  # whether `returncode` is the keeper's word (else a guess)
        # what ended ipykernel's start, if an exception did (the keeper's word; it may be
        # the kernel's own text once the notebook runs, so told only for a start)
        self.words = ""

    @property
    def pids(self) -> tuple[int, int]:
        """The kernel's line in this process's view: the kernel and its sandbox."""
        return self.pid, self.placeholder.pid

    def poll(self) -> int | None:
        if self.returncode is None and self.pidfd >= 0:
            ready, _, _ = select.select([self.pidfd], [], [], 0)
            if ready:
                self.returncode = self._status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self.pidfd >= 0:
            ready, _, _ = select.select([self.pidfd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired("kernel", timeout or 0)
            self.returncode = self._status()
        return self.returncode if self.returncode is not None else 0

    def send_signal(self, sig: int) -> None:
        if self.pidfd >= 0 and self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        self.release()

    def release(self) -> None:
        """End the placeholder (and so the PID namespace) and let go of the pidfd."""
        if self.placeholder.poll() is None:
            self.placeholder.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
            self.placeholder.wait(2)
        for stream in (self.placeholder.stdin, self.placeholder.stdout):
            if stream is not None:
                stream.close()
        if self.pidfd >= 0:
            self.poll()
            os.close(self.pidfd)
            self.pidfd = -1
        self._forget_keeper()

    def _status(self) -> int:
        """The exit status of the kernel, which has exited: its keeper's word (the code, or
        minus the signal that killed it), which follows within moments; where none comes
        (the keeper is gone too), -SIGKILL, and `reported` stays False."""
        keeper = self.keeper
        if keeper is not None:
            try:
                keeper.settimeout(KEEPER_REPORT_SECONDS)
                said = json.loads(keeper.recv(KEEPER_REPORT_BYTES) or b"{}")
                self.reported = isinstance(said.get("exit"), int)
                words = " ".join(str(said.get("words") or "").split())
                self.words = "".join(c for c in words if c.isprintable())[:300]
            except (OSError, ValueError, AttributeError):
                said = {}
            self._forget_keeper()
            if self.reported:
                return int(said["exit"])
        return -signal.SIGKILL

    def _forget_keeper(self) -> None:
        if self.keeper is not None:
            self.keeper.close()
            self.keeper = None


def fork_kernel(plan: WarmPlan, options: dict[str, Any]) -> ForkedKernel:
    """Start the placeholder sandbox, then have the template fork the kernel into it.

    Raises:
        TemplateError: either failed (what was started is stopped).
    """
    template = for_this_process(plan.template_env, plan.template_key)
    if template.broken:
        raise TemplateError(template.broken)
    env = options["env"]
    placeholder = subprocess.Popen(
        plan.placeholder,
        stdin=subprocess.PIPE,  # its end of the grader (see PLACEHOLDER)
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,  # the session's token: found and killed with the session's processes
        cwd=options.get("cwd"),
    )
    try:
        leaf = _placeholder_leaf(placeholder, plan.startup_timeout)
        fds = list(options.get("pass_fds", ()))
        targets = list(fds)
        if options.get("stdout") not in (None, subprocess.DEVNULL):  # GRADER_DEBUG
            fds += [sys.stderr.fileno(), sys.stderr.fileno()]
            targets += [1, 2]
        request = {
            "join": leaf,
            "cwd": options["cwd"],
            "env": env,
            "fd_targets": targets,
            "argv": plan.kernel_argv,
            "address_space": plan.address_space or 0,
            "hangup_fd": plan.hangup_fd,
            "cgroup_procs": str(plan.group / "cgroup.procs") if plan.group else "",
            "ids": list(plan.ids) if plan.ids else None,
            "seccomp": plan.seccomp,
        }
        pid, pidfd, keeper = template.fork(request, fds, plan.startup_timeout)
    except BaseException:
        placeholder.kill()
        placeholder.wait()
        if placeholder.stdout is not None:
            placeholder.stdout.close()
        if placeholder.stdin is not None:
            placeholder.stdin.close()
        raise
    forked = ForkedKernel(pid, pidfd, placeholder, keeper)
    if template.borrowed:
        forked.shared = f" shared by process {os.getppid()}"
    return forked


def _placeholder_leaf(placeholder: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait until the placeholder's sandbox is built (it says "ready" from inside); the pid,
    in our view, of the process inside it (the one whose namespaces and root the kernel
    takes).

    Raises:
        TemplateError: the sandbox did not come up.
    """
    assert placeholder.stdout is not None
    ready, _, _ = select.select([placeholder.stdout], [], [], timeout)
    line = os.read(placeholder.stdout.fileno(), 64) if ready else b""
    if line != b"ready\n":
        raise TemplateError("the placeholder sandbox did not start")
    inside = procs.descendants(placeholder.pid)
    parents = {pid: (procs.cpu_ticks(pid) or (0, 0, 0))[0] for pid in inside}
    leaves = [pid for pid in inside if pid not in parents.values()]
    if len(leaves) != 1:
        raise TemplateError(f"the placeholder sandbox has {len(leaves)} innermost processes")
    return leaves[0]

"""One kernel process: started in a fresh home and working folder, driven by nbclient.

`KernelProcess` starts the kernel (`launch`, then `connect` with the code that installs the
guard and the shim), runs code in it (`execute` for cells), carries the suite's calls over
its call channel (`call`: the first call starts the shim's serving loop with one execute
request; every call after that is two pipe writes), interrupts it and checks that it came
back (`settled`), and kills it with everything it started (`kill_all`). Each method
reports what happened; none of them restarts, replays or decides anything on its own:
that is the session's job (`grader.kernel.session`).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import DeadKernelError

from grader.core.errors import KernelDiedAtStart, KernelStartError
from grader.core.limits import Limits
from grader.core.outcomes import Status
from grader.core.signals import held
from grader.kernel import memory, wire
from grader.kernel import processes as procs
from grader.kernel.cells import (
    TIMEOUT_NAME,
    CellClient,
    Execution,
    cell_line,
    error_message,
    one_line,
)
from grader.kernel.channel import Channel, Transfer
from grader.kernel.launch import (
    cold_reason,
    hand_over,
    kernel_ids,
    sandboxed,
    start_options,
    unreachable_for_others,
)
from grader.kernel.manager import SEND_MS, kernel_manager

MiB = 1024**2
# Any one Jupyter message bigger than this is dropped by ZeroMQ before it is read.
MAX_MESSAGE_BYTES = 32 * MiB
# How soon a client socket retries a connection the kernel has not bound yet (ZeroMQ's
# default, 100 ms, is most of a forked kernel's start).
RECONNECT_MS = 10
# How long an interrupted kernel has to answer a probe before it is given up.
SETTLE_SECONDS = 5.0


class KernelExited(RuntimeError):
    """The kernel process exited before it answered `kernel_info` (`how`: in words)."""

    def __init__(self, how: str) -> None:
        super().__init__(f"the kernel {how} before replying to kernel_info")
        self.how = how


def how_it_ended(process: Any) -> str:
    """How a kernel process that exited before it answered ended, in words: "exited with
    code 1", "was killed by SIGKILL"; for a forked kernel, the exception that ended its
    start (if one did) and whether its sandbox had ended first."""
    code = process.poll() if process is not None else None
    if code is None:
        return "exited"
    if not getattr(process, "reported", True):  # a forked kernel whose keeper said nothing
        how = "exited"
    elif code >= 0:
        how = f"exited with code {code}"
    else:
        how = f"was killed by {_signal_name(-code)}"
    words = getattr(process, "words", "")
    if words:  # the exception that ended ipykernel's start (no notebook code has run)
        how += f" ({words})"
    placeholder = getattr(process, "placeholder", None)
    if placeholder is not None and placeholder.poll() is not None:
        how += " (its sandbox had ended)"
    return how


class BoundedKernelClient(AsyncKernelClient):
    """A Jupyter client whose sockets refuse messages over MAX_MESSAGE_BYTES: ZeroMQ drops
    them (and the connection, which it then restores) before a byte is decoded.

    It runs no heartbeat channel: whether the kernel lives is the process's to say (the
    manager's `is_alive`), and jupyter_client's heartbeat thread, once a beat was missed,
    reopens its socket and waits on a ping that no kernel will ever take: stopping the
    channels then waited forever for that thread (a notebook that wrote to its kernel's
    descriptors hung the grader past --timeout)."""

    def start_channels(
        self,
        shell: bool = True,
        iopub: bool = True,
        stdin: bool = True,
        hb: bool = True,
        control: bool = True,
    ) -> None:
        super().start_channels(shell=shell, iopub=iopub, stdin=stdin, hb=False, control=control)

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)  # a default for its sockets
        context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        context.setsockopt(zmq.SNDTIMEO, SEND_MS)
        return context

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Wait until the kernel answers `kernel_info` on the shell channel and its
        broadcast of going idle after it arrives on IOPub (so IOPub is connected too).

        jupyter_client's own wait then listens for 0.2 s of IOPub silence: a fifth of a
        second of every grading, once a kernel starts in a tenth (forked from the template).
        """
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while True:
            request = self.kernel_info()
            if await self._idle_after(request, deadline):
                return
            if not await self._async_is_alive():
                manager = self.parent
                provisioner = getattr(manager, "provisioner", None)
                raise KernelExited(how_it_ended(getattr(provisioner, "process", None)))
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} s")

    async def _idle_after(self, request: str, deadline: float) -> bool:
        """Whether the reply to `request` and the idle status that follows it arrive
        within a second (and before `deadline`)."""
        until = min(deadline, time.monotonic() + 1.0)
        replied = idle = False
        while not (replied and idle):
            left = until - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(Empty):
                if not replied:
                    msg = await self.shell_channel.get_msg(timeout=min(left, 0.05))
                    if msg["parent_header"].get("msg_id") == request:
                        replied = True
                        self._handle_kernel_info_reply(msg)
                    continue
                msg = await self.iopub_channel.get_msg(timeout=left)
                parent = msg["parent_header"].get("msg_id")
                state = msg["content"].get("execution_state")
                idle = parent == request and state == "idle"
        return True


@dataclass
class OutputBudget:
    """What the notebook may still print: per execution, and in all (across kernels)."""

    cell: int
    left: int


class KernelProcess:
    """A kernel for part of one grading (the session starts another when this one dies)."""

    def __init__(
        self, root: Path, token: str, records_fd: int, limits: Limits, budget: OutputBudget
    ) -> None:
        self.channel = Channel()
        self.serving = ""  # the id of the execute request the shim's loop runs in, if any
        self.root = root
        self.workdir = root / "work"
        self.token = token
        self.records_fd = records_fd
        self.limits = limits
        self.budget = budget
        self.tag = secrets.token_hex(4)
        self.shim = f"__import__('sys').modules['_grader_shim_{self.tag}']"
        self.namespace = "globals()"
        self.client: CellClient | None = None
        self.timeout = limits.cell_timeout
        self.reply: dict[str, Any] | None = None
        self.group: Path | None = None  # the kernel's memory cgroup, if one could be made
        self.line: dict[int, int] = {}  # the kernel's line as launched: pid -> start time

    @property
    def running(self) -> bool:
        """Whether a kernel was started and not stopped."""
        return self.client is not None

    @property
    def pid(self) -> int | None:
        """The kernel's process id, as launched (None before a start)."""
        manager = self.client.km if self.client is not None else None
        process = getattr(getattr(manager, "provisioner", None), "process", None)
        return getattr(process, "pid", None)

    @property
    def pids(self) -> tuple[int, ...]:
        """The kernel's line as launched: the kernel (or, cold, the process that runs it),
        and a forked kernel's sandbox, which is not its parent (empty before a start)."""
        manager = self.client.km if self.client is not None else None
        process = getattr(getattr(manager, "provisioner", None), "process", None)
        pids = getattr(process, "pids", None)
        return tuple(pids) if pids is not None else (() if self.pid is None else (self.pid,))

    def launch(self) -> None:
        """Start the kernel process in a fresh home and working folder: nothing an earlier
        kernel of this session planted there (startup files, configuration, modules named
        like the ones the kernel imports) reaches it. Does not wait for it.

        Raises:
            KernelStartError: the process did not start (it is killed).
        """
        for old in self.root.glob("home-*"):
            shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir()
        home = self.root / f"home-{self.tag}"
        home.mkdir()
        (home / "tmp").mkdir()
        ids = kernel_ids(self.limits)
        closed = unreachable_for_others() if ids and not sandboxed(self.limits) else ""
        if closed and cold_reason(self.limits):  # a forked kernel is past that point
            who = self.limits.kernel_user or f"uid {ids[0] if ids else '?'}"
            raise KernelStartError(
                f"could not start the kernel as {who}: {closed} is closed to other users, so "
                f"{who} cannot run {sys.executable}; grade in the sandbox (bubblewrap builds "
                f"the way in as root), or use a Python that {who} can read"
            )
        for folder in (self.root, self.workdir, home, home / "tmp"):
            hand_over(folder, ids)
        self.group = memory.make_group(f"grader-{self.token}-{self.tag}", self.limits.memory_bytes)
        manager = kernel_manager(
            self.root, self.tag, self.limits.address_space_cap, sandboxed(self.limits),
            gpu=self.limits.device == "cuda", ids=ids, group=self.group,
            hangup_fd=self.channel.kernel_fds[0], cold=cold_reason(self.limits),
            startup_timeout=self.limits.startup_timeout,
        )  # fmt: skip
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])
        client = CellClient(
            notebook,
            km=manager,
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": TIMEOUT_NAME, "evalue": "", "traceback": []},
            startup_timeout=int(self.limits.startup_timeout),
            iopub_timeout=2,
            shutdown_kernel="immediate",
            record_timing=False,
        )
        client.on_cell_executed = self._on_reply
        client.timeout_func = self._time_limit
        self.client = client
        fds = (self.records_fd, *self.channel.kernel_fds)
        try:
            client.start_new_kernel(**start_options(home, self.workdir, self.token, fds))
        except Exception as e:
            self.stop()
            raise KernelStartError(f"could not start the kernel: {one_line(e)}") from None
        self.line = procs.identities(self.pids)
        self.channel.launched(self.pid, self._alive)
        procs.register_kernel(self.token, *self.pids)

    def connect(self, install: str) -> None:
        """Wait for the kernel, then run `install` (the guard and the shim) in it.

        Raises:
            KernelStartError: the kernel did not come up, or the install failed (the
                kernel is killed).
        """
        client = self.client
        assert client is not None
        try:
            client.start_new_kernel_client()
        except KernelExited as e:
            self.stop()
            raise KernelDiedAtStart(
                f"could not start the kernel: it {e.how} before it answered"
            ) from None
        except Exception as e:
            self.stop()
            raise KernelStartError(f"could not start the kernel: {one_line(e)}") from None
        run = self.execute(install, self.limits.startup_timeout, keep_output=True)
        if run.status != Status.PASSED:
            self.stop()
            raise KernelStartError(f"could not set up the kernel: {run.message or run.status}")

    def execute(self, source: str, timeout: float, keep_output: bool) -> Execution:
        """Run `source` as a cell, its printed output bounded by the budget. Past `timeout`
        nbclient interrupts the kernel and the execution is a timeout (whether the kernel
        came back is for `settled` to say); a dead kernel makes it crashed."""
        client = self.client
        run = Execution()
        if client is not None and self.serving:
            self._leave()
        if client is None or self.client is None:  # stopped (past the deadline), or died
            run.status = Status.CRASHED
            return run
        client.execution = run if keep_output else None
        client.cell_budget = self.budget.cell
        client.total_left = self.budget.left
        self.timeout = max(0.1, timeout)
        self.reply = None
        cell = nbformat.v4.new_code_cell(source)
        try:
            client.execute_cell(cell, 0, store_history=False)
        except (DeadKernelError, zmq.Again):  # dead, or no longer reachable
            run.status = Status.CRASHED
            return run
        finally:
            client.execution = None
            self.budget.left = client.total_left
        reply: dict[str, Any] = self.reply or {}
        content = reply.get("content", {})
        if content.get("status") == "error":
            if content.get("ename") == TIMEOUT_NAME:
                run.status = Status.TIMEOUT
            else:
                run.status = Status.ERROR
                run.message = error_message(
                    content.get("ename", "Error"), content.get("evalue", "")
                )
                run.line = cell_line(content.get("traceback"))
        return run

    @property
    def last_message_id(self) -> str:
        """The id of the last execute request `execute` sent (to match the shim's counts)."""
        reply: dict[str, Any] = self.reply or {}
        return str(reply.get("parent_header", {}).get("msg_id", ""))

    def call(self, payload: bytes, timeout: float) -> Execution:
        """Carry one request (a `grader.kernel.wire` payload) to the shim and return its
        answer's payload in `run.answer`. Past `timeout` it is a timeout and the kernel is
        still busy (the caller interrupts it); an answer out of step with its request is an
        error with `run.restart_loop` (the caller interrupts too, so that the loop starts
        afresh); a loop that could not start, or a channel the kernel closed, an error
        without it."""
        deadline = time.monotonic() + timeout
        run = Execution()
        if self.client is None:
            run.status = Status.CRASHED
            return run
        if self.channel.broken:  # the kernel closed it: no loop can serve
            run.status, run.message = Status.ERROR, self.channel.broken
            return run
        try:
            transfer = self._serve(deadline) if not self.serving else Transfer(Status.PASSED)
        except zmq.Again:  # the request to serve could not reach the kernel
            run.status = Status.CRASHED
            return run
        if transfer.status == Status.PASSED:
            transfer = self.channel.send(payload, deadline)
        if transfer.status == Status.PASSED:
            transfer = self.channel.receive(deadline)
        run.status, run.message, run.answer = transfer.status, transfer.message, transfer.payload
        run.restart_loop = transfer.restart_loop
        if run.status == Status.ERROR and not run.restart_loop:
            self.serving = ""  # no loop runs (the next call starts one, if it can)
        return run

    def interrupt(self) -> None:
        """Ask the kernel to stop what it is running."""
        run_sync(self._interrupt)()

    def settled(self) -> bool:
        """After an interrupt: whether the kernel comes back (the serving loop's execute
        request ends, or, between cells, the kernel answers a probe)."""
        if self.client is None:
            return False
        if self.serving:
            return run_sync(self._end_of_serving)(SETTLE_SECONDS)
        probe = nbformat.v4.new_code_cell("pass")
        self.timeout = SETTLE_SECONDS
        self.reply = None
        try:
            self.client.execute_cell(probe, 0, store_history=False)
        except (DeadKernelError, zmq.Again):
            return False
        reply: dict[str, Any] = self.reply or {}
        return bool(reply.get("content", {}).get("status") == "ok")

    def stop(self) -> None:
        """Kill the kernel and every process with the session's token (whether or not this
        kernel is running now: a start cut short leaves processes with our token)."""
        with held():
            client = self.client
            line = self.line or procs.identities(self.pids)  # a start cut short: as it is now
            self.client = None
            self.serving = ""
            self.line = {}
            kill_all(self.token, line)
            procs.forget_kernel(self.token)
            memory.remove_group(self.group)
            self.group = None
            self.channel.close()
            if client is not None:
                with contextlib.suppress(Exception):  # the kernel is gone; tidy up nbclient
                    client._cleanup_kernel()

    async def _interrupt(self) -> None:
        if self.client is not None and self.client.km is not None:
            with contextlib.suppress(zmq.Again):  # unreachable: it will not settle either
                await ensure_async(self.client.km.interrupt_kernel())

    def _serve(self, deadline: float) -> Transfer:
        """Start the shim's serving loop: one silent execute request, then wait for the
        fresh token the loop writes first. Whenever the loop ends, a second token follows
        (so a loop that cannot start, the shim gone, is known at once)."""
        token, ended = (f"\0grader-{secrets.token_hex(16)}".encode() for _ in range(2))
        _, answers = self.channel.kernel_fds
        code = (
            f"try:\n    {self.shim}.serve({self.namespace}, {token!r})\n"
            f"finally:\n    __import__('os').write({answers}, {ended!r})"
        )
        self.serving = run_sync(self._send_execute)(code)
        return self.channel.resync(token, deadline, ended)

    def _leave(self) -> None:
        """End the serving loop (so that code can run as a cell again)."""
        self.channel.send(wire.pack({"op": "end"}), time.monotonic() + SETTLE_SECONDS)
        if not run_sync(self._end_of_serving)(SETTLE_SECONDS):
            self.stop()  # a loop that will not end: the caller finds the kernel gone

    def _alive(self) -> bool:
        manager = self.client.km if self.client is not None else None
        process = getattr(getattr(manager, "provisioner", None), "process", None)
        return process is not None and process.poll() is None

    async def _send_execute(self, code: str) -> str:
        client = self.client
        assert client is not None
        kc = client.kc
        assert isinstance(kc, AsyncKernelClient)
        return str(
            kc.execute(
                code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False
            )
        )

    async def _end_of_serving(self, timeout: float) -> bool:
        """Wait up to `timeout` for the reply to the serving loop's execute request."""
        client = self.client
        if client is None:
            return False
        kc = client.kc
        assert isinstance(kc, AsyncKernelClient)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                msg = await kc.shell_channel.get_msg(timeout=min(left, 1.0))
            except Empty:
                if not await kc.is_alive():
                    return False
                continue
            if msg["parent_header"].get("msg_id") == self.serving:
                break
        self.serving = ""
        await _drain(kc.iopub_channel)
        return True

    def _time_limit(self, cell: object) -> int | None:
        """nbclient's per-cell time limit (typed as whole seconds, used as any number)."""
        return self.timeout  # type: ignore[return-value]  # nbclient accepts float seconds

    def _on_reply(self, cell: Any, cell_index: int, execute_reply: dict[str, Any]) -> None:
        self.reply = execute_reply


def kill_all(token: str, kernel_line: dict[int, int] | None = None) -> None:
    """Kill, until none is left, the kernel's line (`KernelProcess.line`: pids with their
    start times, so that a number the system has since given to another process, say
    another grading's new kernel, is left alone) and every process with the session's
    token, below the kernel, or orphaned below us."""
    kernel_line = kernel_line or {}

    def find() -> set[int]:
        parents = procs.parent_map()  # one look at /proc for all three questions
        line = {
            pid
            for pid, start in kernel_line.items()
            if pid in parents and procs.started(pid) == start
        }
        found = procs.tagged(token) | procs.adopted(token, parents) | line
        return found | procs.descendants(*line, parents=parents)

    procs.kill_until_none(find)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


async def _drain(channel: Any) -> None:
    """Throw away what a silent call published (status messages, capped output)."""
    while True:
        try:
            await channel.get_msg(timeout=0)
        except Empty:
            return

"""One kernel process: started in a fresh home and working folder, driven by nbclient.

`KernelProcess` starts the kernel (`launch`, then `connect` with the code that installs the
guard and the shim), runs code in it (`execute` for cells, `quick` for the shim's calls),
interrupts it and checks that it came back (`settled`), and kills it with everything it
started (`kill_all`). Each method reports what happened; none of them restarts, replays or
decides anything on its own: that is the session's job (`grader.kernel.session`).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
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

from grader.errors import KernelStartError
from grader.kernel import processes as procs
from grader.kernel.cells import TIMEOUT_NAME, CellClient, Execution, one_line
from grader.kernel.launch import kernel_manager, start_options
from grader.limits import Limits
from grader.outcomes import Status
from grader.signals import held

MiB = 1024**2
# Any one Jupyter message bigger than this is dropped by ZeroMQ before it is read.
MAX_MESSAGE_BYTES = 32 * MiB
# How long an interrupted kernel has to answer a probe before it is given up.
SETTLE_SECONDS = 5.0


class BoundedKernelClient(AsyncKernelClient):
    """A Jupyter client whose sockets refuse messages over MAX_MESSAGE_BYTES: ZeroMQ drops
    them (and the connection, which it then restores) before a byte is decoded."""

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)  # a default for its sockets
        return context


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
        manager = kernel_manager(self.root, self.tag, self.limits.memory_bytes, self.limits.sandbox)
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
        try:
            client.start_new_kernel(
                **start_options(home, self.workdir, self.token, self.records_fd)
            )
        except Exception as e:
            self.stop()
            raise KernelStartError(f"could not start the kernel: {one_line(e)}") from None

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
        if client is None:  # stopped (past the deadline)
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
        except DeadKernelError:
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
                run.message = one_line(
                    f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
                )
        return run

    @property
    def last_message_id(self) -> str:
        """The id of the last execute request `execute` sent (to match the shim's counts)."""
        reply: dict[str, Any] = self.reply or {}
        return str(reply.get("parent_header", {}).get("msg_id", ""))

    def quick(self, code: str, timeout: float) -> Execution:
        """Run one call of the shim: a silent execute, waiting only for its reply (its output
        is not wanted). Past `timeout` it is a timeout and the kernel is still busy: the
        caller interrupts it."""
        return run_sync(self._async_quick)(code, timeout)

    def interrupt(self) -> None:
        """Ask the kernel to stop what it is running."""
        run_sync(self._interrupt)()

    def settled(self) -> bool:
        """After an interrupt: whether the kernel comes back and answers a probe."""
        if self.client is None:
            return False
        probe = nbformat.v4.new_code_cell("pass")
        self.timeout = SETTLE_SECONDS
        self.reply = None
        try:
            self.client.execute_cell(probe, 0, store_history=False)
        except DeadKernelError:
            return False
        reply: dict[str, Any] = self.reply or {}
        return bool(reply.get("content", {}).get("status") == "ok")

    def stop(self) -> None:
        """Kill the kernel and every process with the session's token (whether or not this
        kernel is running now: a start cut short leaves processes with our token)."""
        with held():
            client, pid = self.client, self.pid
            self.client = None
            kill_all(self.token, pid)
            if client is not None:
                with contextlib.suppress(Exception):  # the kernel is gone; tidy up nbclient
                    client._cleanup_kernel()

    async def _interrupt(self) -> None:
        if self.client is not None and self.client.km is not None:
            await ensure_async(self.client.km.interrupt_kernel())

    async def _async_quick(self, code: str, timeout: float) -> Execution:
        client = self.client
        run = Execution()
        if client is None:
            run.status = Status.CRASHED
            return run
        kc = client.kc
        assert isinstance(kc, AsyncKernelClient)
        msg_id = kc.execute(
            code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False
        )
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                run.status = Status.TIMEOUT
                return run
            try:
                msg = await kc.shell_channel.get_msg(timeout=min(left, 1.0))
            except Empty:
                if not await kc.is_alive():
                    run.status = Status.CRASHED
                    return run
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                break
        await _drain(kc.iopub_channel)
        content = msg.get("content", {})
        if content.get("status") == "error":
            run.status = Status.ERROR
            run.message = one_line(f"{content.get('ename', 'Error')}: {content.get('evalue', '')}")
        return run

    def _time_limit(self, cell: object) -> int | None:
        """nbclient's per-cell time limit (typed as whole seconds, used as any number)."""
        return self.timeout  # type: ignore[return-value]  # nbclient accepts float seconds

    def _on_reply(self, cell: Any, cell_index: int, execute_reply: dict[str, Any]) -> None:
        self.reply = execute_reply


def kill_all(token: str, kernel_pid: int | None) -> None:
    """Kill, until none is left, the kernel and every process with the session's token,
    below the kernel, or orphaned below us."""

    def find() -> set[int]:
        found = procs.tagged(token) | procs.adopted()
        if kernel_pid and procs.alive(kernel_pid):
            found |= {kernel_pid} | procs.descendants(kernel_pid)
        return found

    procs.kill_until_none(find)


async def _drain(channel: Any) -> None:
    """Throw away what a silent call published (status messages, capped output)."""
    while True:
        try:
            await channel.get_msg(timeout=0)
        except Empty:
            return

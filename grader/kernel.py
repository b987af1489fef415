"""The execution layer: one candidate kernel, driven by nbclient, answering the suite's calls.

Only this module talks to Jupyter. A `Session` starts a fresh kernel of the grader's own
Python (whatever kernelspec the notebook names) in a scratch directory, installs the shim,
runs the candidate's cells with a time limit each, then carries the hidden suite's calls
into the kernel and their answers back. Answers come back as files of plain data and
tensors, loaded with ``torch.load(weights_only=True)``; nothing the kernel prints is read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
import threading
import time
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_core.utils import ensure_async, run_sync
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from grader import procs
from grader.errors import KernelStartError
from grader.launch import (
    environment_changes,
    environment_snapshot,
    guard_config,
    install_code,
    kernel_manager,
    scratch_root,
    start_options,
)
from grader.limits import Limits
from grader.outcomes import CallTimeout, KernelCrashed, NoAnswer, Status
from grader.records import Finding, RecordReader
from grader.signals import held

MiB = 1024**2
_TIMEOUT_NAME = "GraderCellTimeout"
# Bounds on what the kernel can make the grader hold: an answer file, the pickled structure
# inside it, the tensors it describes (a stride-0 view of a few bytes can claim gigabytes),
# and any one Jupyter message (a bigger one is dropped by ZeroMQ before it is read).
_MAX_ANSWER_BYTES = 64 * MiB
_MAX_STRUCTURE_BYTES = 4 * MiB
_MAX_TENSOR_BYTES = 64 * MiB
MAX_MESSAGE_BYTES = 32 * MiB
# How long past the grading's deadline the watchdog lets the grader wind down on its own
# before it kills the kernel.
_WATCHDOG_GRACE = 5.0
_F_SETPIPE_SZ = 1031  # linux/fcntl.h
_OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_ANSWER = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class CellRun:
    """What happened when one of the candidate's cells ran (index counts all cells from 0)."""

    index: int
    status: Status
    message: str = ""
    output: str = ""
    output_cut: int = 0


@dataclass
class _Run:
    status: Status = Status.PASSED
    message: str = ""
    output: list[str] = field(default_factory=list)
    kept: int = 0
    cut: int = 0


class BoundedKernelClient(AsyncKernelClient):
    """A Jupyter client whose sockets refuse messages over MAX_MESSAGE_BYTES: ZeroMQ drops
    them (and the connection, which it then restores) before a byte is decoded."""

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)  # a default for its sockets
        return context


class _BoundedClient(NotebookClient):
    """An nbclient client that keeps only a bounded amount of what a cell prints."""

    run: _Run | None = None
    cell_budget: int = 0
    total_left: int = 0

    def output(
        self,
        outs: list[nbformat.NotebookNode],
        msg: dict[str, Any],
        display_id: str | None,
        cell_index: int,
    ) -> nbformat.NotebookNode | None:
        run = self.run
        if run is None:
            return None
        content = msg.get("content", {})
        text = content.get("text") or content.get("evalue") or ""
        if not text and "data" in content:
            text = str(content["data"].get("text/plain", ""))
        room = max(0, min(self.cell_budget - run.kept, self.total_left))
        if len(text) > room:
            run.cut += len(text) - room
            text = text[:room]
        run.kept += len(text)
        self.total_left -= len(text)
        if text:
            run.output.append(text)
        return None


class Session:
    """A candidate kernel for the length of one grading.

    Use as a context manager: entering launches the kernel process (without waiting for
    it, so the grader can load its suites meanwhile); `prepare` then installs the shim and
    runs the cells (see `cells`); leaving kills the kernel and every process it started
    and removes the scratch space.
    """

    def __init__(
        self,
        sources: list[tuple[int, str]],
        limits: Limits,
        deadline: float | None = None,
    ) -> None:
        self.sources = sources
        self.limits = limits
        self.deadline = (
            deadline if deadline is not None else time.monotonic() + limits.total_timeout
        )
        self.cells: list[CellRun] = []
        self.restarts = 0
        self._watch: dict[str, object] = {}
        self._packages: tuple[str, ...] = ()
        self._reader = RecordReader(sources)
        self._host_pids: dict[tuple[int, int], int | None] = {}
        self._token = secrets.token_hex(8)
        self._calls = 0
        self._client: _BoundedClient | None = None
        self._replaying = False
        self._cell_ids: dict[int, str] = {}
        self._output_left = limits.output_budget[1]
        self._records = self._records_w = -1
        self._root: Path | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        # set by _open (the scratch space and the record channel)
        self._environment: dict[str, int] = {}
        self.workdir = Path()
        self._io = Path()
        self._records_inode = 0
        # set by _launch (one kernel) and _execute (one cell)
        self._tag = ""
        self._shim_ref = self._ns_ref = ""
        self._timeout = limits.cell_timeout
        self._reply: dict[str, Any] | None = None

    def __enter__(self) -> Session:
        try:
            with held():  # everything `close` undoes exists before a signal can stop us
                self._open()
            self._launch()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        """The scratch space, the record channel and the watchdog."""
        self._environment = environment_snapshot()
        self._root = scratch_root()
        self.workdir = self._root / "work"
        self._io = self._root / "io"
        self._io.mkdir()
        # The guard's record channel: the kernel holds the writing end, we read.
        self._records, self._records_w = os.pipe()
        with contextlib.suppress(OSError):  # room for bursts between drains (Linux)
            fcntl.fcntl(self._records_w, _F_SETPIPE_SZ, 1 << 20)
        os.set_blocking(self._records, False)
        self._records_inode = os.fstat(self._records).st_ino
        watchdog = threading.Thread(target=self._watchdog, name="grader-watchdog", daemon=True)
        watchdog.start()

    @property
    def expired(self) -> bool:
        """Whether the grading's deadline has passed."""
        return time.monotonic() >= self.deadline

    def _watchdog(self) -> None:
        """The watchdog, a thread of its own: it drains the record channel (so the guard
        never waits on a full pipe) and, once the deadline is well past, kills the kernel
        and everything it started, so that no wait on the kernel (a replay, a start, an
        interrupt it ignores) outlasts --timeout: the main thread then finds the kernel
        dead and winds down."""
        while not self._done.wait(0.1):
            self._drain()
            if time.monotonic() >= self.deadline + _WATCHDOG_GRACE:
                self._kill_processes()

    def prepare(
        self,
        watch: dict[str, object] | None = None,
        packages: tuple[str, ...] = ("numpy", "einops"),
    ) -> None:
        """Wait for the kernel, install the guard and the shim (watching what `watch`, an
        exercise's `Watch.kernel_config()`, names; the notebook may import the standard
        library, torch and `packages`), and run the notebook's cells.

        Raises:
            KernelStartError: the kernel did not come up.
        """
        self._watch = dict(watch or {})
        self._packages = packages
        self._connect()
        self._run_cells()

    @property
    def seen(self) -> set[str]:
        """Watched built-ins the guard saw called during hidden tests."""
        self._read_records()
        return self._reader.seen

    @property
    def findings(self) -> list[Finding]:
        """Everything the guard reported, in order (see grader.records)."""
        self._read_records()
        return list(self._reader.findings)

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls from the hidden suite -------------------------------------------------

    def call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one request to the shim and return its answer.

        Raises:
            CallTimeout: the call ran past its limit.
            KernelCrashed: the kernel died (a fresh one is already running).
            NoAnswer: the kernel wrote no answer.
        """
        import torch  # here, not at the top: the CLI launches the kernel before loading torch

        if self._client is None:  # the deadline passed and the kernel is gone
            raise CallTimeout(f"grading passed its {self.limits.total_timeout:g} s limit")
        self._calls += 1
        # Fresh unguessable names, created exclusively and never through a link: the kernel
        # cannot have prepared them. The answer is read only if it is a regular file.
        name = secrets.token_hex(8)
        request_path = self._io / f"request-{name}.pt"
        answer_path = self._io / f"answer-{name}.pt"
        try:
            self._io.mkdir(mode=0o700, exist_ok=True)
            with os.fdopen(os.open(request_path, _OPEN_NEW, 0o600), "wb") as f:
                torch.save(request, f)
        except OSError as e:
            raise NoAnswer(f"the grader's folder was tampered with ({e.strerror})") from None
        code = (
            f"{self._shim_ref}.serve({self._ns_ref}, {str(request_path)!r}, {str(answer_path)!r})"
        )
        limit = min(timeout or self.limits.call_timeout, max(1.0, self.deadline - time.monotonic()))
        run = self._quick(code, limit)
        with contextlib.suppress(OSError):
            request_path.unlink()
        self._read_records()
        if run.status == Status.CRASHED and self.expired:
            self._stop()
            raise CallTimeout(f"grading passed its {self.limits.total_timeout:g} s limit")
        if run.status == Status.CRASHED:
            self.restart()
            raise KernelCrashed()
        if run.status == Status.TIMEOUT:
            raise CallTimeout(f"a call into the candidate's code ran past the {limit:g} s limit")
        try:
            answer = _read_answer(answer_path)
        finally:
            with contextlib.suppress(OSError):
                answer_path.unlink()
        if answer is None:
            raise NoAnswer(run.message or "no answer file")
        return answer

    def restart(self) -> None:
        """Replace the kernel with a fresh one and replay the cells that ran to completion
        (none once the deadline has passed: calls then time out at once)."""
        self.restarts += 1
        self._fresh_kernel()

    # -- lifecycle --------------------------------------------------------------------

    def _start(self) -> None:
        self._launch()
        self._connect()

    def _launch(self) -> None:
        """Start a kernel process in a fresh home and working folder: nothing an earlier
        kernel of this session planted there (startup files, configuration, modules named
        like the ones the kernel imports) reaches it."""
        assert self._root is not None
        tag = self._tag = secrets.token_hex(4)
        self._shim_ref = f"__import__('sys').modules['_grader_shim_{tag}']"
        self._ns_ref = "globals()"
        for old in self._root.glob("home-*"):
            shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir()
        home = self._root / f"home-{tag}"
        home.mkdir()
        manager = kernel_manager(self._root, tag, self.limits.memory_bytes, self.limits.sandbox)
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])
        client = _BoundedClient(
            notebook,
            km=manager,
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": _TIMEOUT_NAME, "evalue": "", "traceback": []},
            startup_timeout=int(self.limits.startup_timeout),
            iopub_timeout=2,
            shutdown_kernel="immediate",
            record_timing=False,
        )
        client.on_cell_executed = self._on_reply
        client.timeout_func = self._cell_limit
        self._timeout = self.limits.cell_timeout
        self._client = client
        try:
            client.start_new_kernel(
                **start_options(home, self.workdir, self._token, self._records_w)
            )
        except Exception as e:
            self._stop()
            raise KernelStartError(f"could not start the kernel: {_one_line(e)}") from None

    def _connect(self) -> None:
        client = self._client
        assert client is not None
        try:
            client.start_new_kernel_client()
        except Exception as e:
            self._stop()
            raise KernelStartError(f"could not start the kernel: {_one_line(e)}") from None
        install = install_code(
            f"_grader_shim_{self._tag}",
            self._records_w,
            {
                **guard_config(self.workdir, [self._io], self._packages),
                "watch": self._watch,
                "max_tensor_bytes": _MAX_TENSOR_BYTES,
            },
            self.limits.output_budget[0] + 64,
            self.limits.output_budget[1] + 64,
        )
        run = self._execute(install, self.limits.startup_timeout, keep_output=True)
        if run.status != Status.PASSED:
            self._stop()
            raise KernelStartError(f"could not set up the kernel: {run.message or run.status}")

    def _stop(self) -> None:
        """Kill the kernel and every process it started (whether or not a kernel is
        running now: a start cut short leaves processes with our token)."""
        with held():
            client, self._client = self._client, None
            self._kill_processes(client)
            if client is not None:
                with contextlib.suppress(Exception):  # the kernel is gone; tidy up nbclient
                    client._cleanup_kernel()

    def _kill_processes(self, client: NotebookClient | None = None) -> None:
        """Kill, until none is left, the kernel and every process with this session's
        token, below the kernel, or orphaned below us."""
        client = client or self._client
        kernel_pid = _kernel_pid(client) if client is not None else None

        def find() -> set[int]:
            found = procs.tagged(self._token) | procs.adopted()
            if kernel_pid and procs.alive(kernel_pid):
                found |= {kernel_pid} | procs.descendants(kernel_pid)
            return found

        procs.kill_until_none(find)

    def close(self) -> None:
        """Kill the kernel and everything it started; remove the scratch space; say if the
        grading environment changed meanwhile. Runs to the end whatever signal arrives."""
        with held():
            self._done.set()
            self._stop()
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
            with self._lock:
                if self._records >= 0:
                    changed = environment_changes(self._environment, environment_snapshot())
                    if changed:
                        self._reader.add(
                            Finding("environment", f"the grading environment changed: {changed}")
                        )
                for fd in (self._records, self._records_w):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                self._records = self._records_w = -1

    def _read_records(self) -> None:
        """Take what the guard wrote; check that the kernel still holds the channel."""
        self._drain()
        self._check_channel()

    def _drain(self) -> None:
        with self._lock:
            while self._records >= 0:
                try:
                    data = os.read(self._records, 1 << 16)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                self._reader.feed(data)

    def _check_channel(self) -> None:
        """The kernel's end of the record channel must still be the pipe we gave it: a
        kernel that redirects it (os.dup2, os.close) is tampering with the grader. Read
        from /proc, outside the kernel's reach."""
        client = self._client
        if client is None or not self._reader.pids:
            return
        pid = self._kernel_host_pid(client)
        if pid is None:
            return
        try:
            link = os.readlink(f"/proc/{pid}/fd/{self._records_w}")
        except OSError:
            link = ""
        if link != f"pipe:[{self._records_inode}]" and procs.alive(pid):
            self._reader.add(Finding("tamper", "the kernel redirected the grader's record channel"))

    def _kernel_host_pid(self, client: NotebookClient) -> int | None:
        """The kernel's process id as this process sees it (a sandbox has its own PID
        namespace: the guard reports the id inside it)."""
        launched = _kernel_pid(client)
        if launched is None:
            return None
        key = (launched, self._reader.pids[-1])
        if key not in self._host_pids:
            inside = {launched} | procs.descendants(launched)
            self._host_pids[key] = procs.host_pid(key[1], inside)
        return self._host_pids[key]

    # -- running code -----------------------------------------------------------------

    def _run_cells(self) -> None:
        self.cells = []
        for index, source in self.sources:
            left = self.deadline - time.monotonic()
            if left <= 0:
                message = f"not run: grading passed its {self.limits.total_timeout:g} s limit"
                self.cells.append(CellRun(index, Status.SKIPPED, message))
                continue
            run = self._execute(source, min(self.limits.cell_timeout, left), keep_output=True)
            self._cell_ids[index] = str(
                (self._reply or {}).get("parent_header", {}).get("msg_id", "")
            )
            if run.status == Status.CRASHED:
                self.restart()
            self.cells.append(_cell_run(index, run, self.limits.cell_timeout))
        self._count_cut_output()

    def _count_cut_output(self) -> None:
        """Add what the shim dropped at the source to each cell's count of cut output."""
        try:
            cut = self.call({"op": "output_cut"}).get("value")
        except (CallTimeout, KernelCrashed, NoAnswer):
            return
        if not isinstance(cut, dict):
            return
        self.cells = [
            replace(c, output_cut=c.output_cut + _count(cut.get(self._cell_ids.get(c.index, ""))))
            for c in self.cells
        ]

    def _fresh_kernel(self) -> None:
        """Stop the kernel, start another, and replay the cells that ran to completion,
        all within the grading's deadline. Once it has passed, no kernel is started."""
        self._stop()
        if self.expired:
            return
        try:
            self._start()
        except KernelStartError:
            if self.expired:  # the watchdog ended the start
                self._stop()
                return
            raise
        sources = dict(self.sources)
        self._replaying = True
        try:
            for cell in self.cells:
                left = self.deadline - time.monotonic()
                if cell.status not in (Status.PASSED, Status.ERROR):
                    continue
                if left <= 0:
                    break
                run = self._execute(
                    sources[cell.index], min(self.limits.cell_timeout, left), keep_output=False
                )
                if run.status == Status.CRASHED:
                    break
        finally:
            self._replaying = False

    def _execute(self, source: str, timeout: float, keep_output: bool) -> _Run:
        client = self._client
        run = _Run()
        if client is None:  # past the deadline, no kernel
            run.status = Status.CRASHED
            return run
        client.run = run if keep_output else None
        client.cell_budget = self.limits.output_budget[0]
        client.total_left = self._output_left
        self._timeout = max(0.1, timeout)
        self._reply = None
        cell = nbformat.v4.new_code_cell(source)
        try:
            client.execute_cell(cell, 0, store_history=False)
        except DeadKernelError:
            run.status = Status.CRASHED
            return run
        finally:
            client.run = None
            self._output_left = client.total_left
        reply: dict[str, Any] = self._reply or {}
        content = reply.get("content", {})
        if content.get("status") == "error":
            if content.get("ename") == _TIMEOUT_NAME:
                self._after_timeout(run)
            else:
                run.status = Status.ERROR
                run.message = _one_line(
                    f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
                )
        return run

    def _quick(self, code: str, timeout: float) -> _Run:
        """Run one shim call: a silent execute, waiting only for its reply (its output is
        not wanted). Timeouts and dead kernels are handled as for cells."""
        run = run_sync(self._async_quick)(code, timeout)
        if run.status == Status.TIMEOUT:
            # Recovery runs nbclient's own (sync) calls: never from inside the coroutine
            # above, where they would move the client's sockets to another event loop.
            run_sync(self._interrupt)()
            self._after_timeout(run)
        return run

    async def _interrupt(self) -> None:
        if self._client is not None and self._client.km is not None:
            await ensure_async(self._client.km.interrupt_kernel())

    async def _async_quick(self, code: str, timeout: float) -> _Run:
        client = self._client
        assert client is not None and isinstance(client.kc, AsyncKernelClient)
        kc = client.kc
        msg_id = kc.execute(
            code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False
        )
        deadline = time.monotonic() + timeout
        run = _Run()
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
            run.message = _one_line(f"{content.get('ename', 'Error')}: {content.get('evalue', '')}")
        return run

    def _after_timeout(self, run: _Run) -> None:
        """The kernel was interrupted: wait for it to come back, or replace it."""
        run.status = Status.TIMEOUT
        if self._settled():
            return
        if self._replaying:
            run.status = Status.CRASHED
        else:
            self.restart()  # the interrupt did not take

    def _settled(self) -> bool:
        """After an interrupt: wait for the kernel to come back; replace it if it does not."""
        probe = nbformat.v4.new_code_cell("pass")
        self._timeout = 5.0
        self._reply = None
        try:
            assert self._client is not None
            self._client.execute_cell(probe, 0, store_history=False)
            reply: dict[str, Any] = self._reply or {}
            ok = reply.get("content", {}).get("status") == "ok"
        except DeadKernelError:
            ok = False
        return ok

    def _cell_limit(self, cell: object) -> int | None:
        """nbclient's per-cell time limit (it takes whole seconds only as a type hint)."""
        return self._timeout  # type: ignore[return-value]  # nbclient accepts float seconds

    def _on_reply(self, cell: Any, cell_index: int, execute_reply: dict[str, Any]) -> None:
        self._reply = execute_reply


async def _drain(channel: Any) -> None:
    """Throw away what a silent call published (status messages, capped output)."""
    while True:
        try:
            await channel.get_msg(timeout=0)
        except Empty:
            return


def _cell_run(index: int, run: _Run, limit: float) -> CellRun:
    output = "".join(run.output)
    if run.status == Status.TIMEOUT:
        return CellRun(
            index,
            Status.TIMEOUT,
            f"ran past the {limit:g} s cell limit and was interrupted",
            output,
            run.cut,
        )
    if run.status == Status.CRASHED:
        return CellRun(
            index, Status.CRASHED, "the kernel died while running this cell", output, run.cut
        )
    message = run.message
    if message.startswith("MemoryError") or "can't allocate memory" in message:
        message = f"memory limit exceeded ({message})"
    return CellRun(index, run.status, message, output, run.cut)


def _count(value: object) -> int:
    """A count the kernel sent (the candidate may have forged it): a non-negative int or 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _read_answer(path: Path) -> dict[str, Any] | None:
    """The shim's answer file, or None. Never follows a link, never blocks on a FIFO, never
    unpickles, and holds no more than the bounds above: the file's size and its pickled
    structure are checked before it is loaded, the tensors it describes before any of
    them is used.

    Raises:
        NoAnswer: the file is there but is not a readable answer of a sane size.
    """
    import torch

    try:
        fd = os.open(path, _OPEN_ANSWER)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NoAnswer(f"unreadable answer ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_ANSWER_BYTES:
            raise NoAnswer("the answer is not a regular file of a sane size")
        os.set_blocking(fd, True)
        try:
            _check_structure(f)
            answer = torch.load(f, weights_only=True)
        except NoAnswer:
            raise
        except Exception as e:  # a damaged or forged file is the candidate's doing
            raise NoAnswer(f"unreadable answer ({type(e).__name__})") from None
    if not isinstance(answer, dict):
        raise NoAnswer("malformed answer")
    size = _tensor_bytes(answer)
    if size > _MAX_TENSOR_BYTES:
        raise NoAnswer(
            f"the answer holds tensors of {size:,} bytes, more than the grader accepts "
            f"({_MAX_TENSOR_BYTES:,})"
        )
    return answer


def _check_structure(f: Any) -> None:
    """The pickled part of a torch.save archive (everything but tensor data) must be
    small: a few megabytes of pickle can build lists of millions of objects."""
    with zipfile.ZipFile(f) as archive:
        pickles = [i for i in archive.infolist() if i.filename.endswith(".pkl")]
        if sum(i.file_size for i in pickles) > _MAX_STRUCTURE_BYTES:
            raise NoAnswer("the answer's structure is too large")
    f.seek(0)


def _tensor_bytes(value: Any, depth: int = 0) -> int:
    """The bytes the tensors in an answer would take once materialised (a stride-0 view
    counts at its full size: that is what computing with it costs)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if depth > 32:
        raise NoAnswer("the answer is nested too deeply")
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item, depth + 1) for item in value)
    return 0


def _kernel_pid(client: NotebookClient) -> int | None:
    manager = client.km
    process = getattr(getattr(manager, "provisioner", None), "process", None)
    return getattr(process, "pid", None)


def _one_line(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

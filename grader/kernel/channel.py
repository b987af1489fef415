"""The call channel: how the hidden suite's requests reach the shim in the kernel, and how
its answers come back.

Each kernel gets two pipes of its own, made by the grader before the kernel starts and
inherited by it alone: requests flow one way, answers the other. The shim serves them in a
loop on the kernel's main thread (`grader.kernel.shim`), so a call costs two pipe writes,
not a Jupyter execute request. Frames and payloads are `grader.kernel.wire`'s: plain data
and raw tensor bytes, never a pickle; an answer is bounded (its length, its structure, its
tensors) before anything is built from it.

The grader waits in `poll`, on the answer pipe and on the kernel process itself (a
pidfd), never in a sleep loop. When the loop starts it writes a fresh random token first:
after an interrupt, whatever the old loop left on the pipe (a late or half-written answer)
is skipped up to the new token. Nothing can be prepared on the channel ahead of time: the
pipes exist from the kernel's start, nothing else has their other ends, and the session
checks from outside (/proc) that the kernel still holds them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import time
from typing import Any, TypedDict

from grader.core.outcomes import Status
from grader.kernel.wire import WIRE_HEADER

MiB = 1024**2
# Bounds on what the kernel can make the grader hold: an answer's structure (everything but
# tensor data), the tensors it holds, and its nesting.
MAX_STRUCTURE_BYTES = 4 * MiB
MAX_TENSOR_BYTES = 64 * MiB
MAX_NESTING = 32
F_SETPIPE_SZ = 1031  # linux/fcntl.h
PIPE_BYTES = 1 * MiB  # room for a request of a few hundred thousand floats in one write
_SLICE_MS = 250  # how often to look at the kernel where Linux offers no pidfd
EXIT_SECONDS = 2.0  # how long a kernel whose pipes closed has to be gone, to count as dead


def max_answer_bytes() -> int:
    """The longest answer frame the grader reads: the structure, its length, the tensors."""
    return MAX_STRUCTURE_BYTES + MAX_TENSOR_BYTES + 4


class Request(TypedDict, total=False):
    """One call into the kernel (what `grader.suite.handle.Kernel` sends, what the shim reads).

    `op` is "call" (``target.method(*args, **kwargs)``, or ``target(...)`` without a
    method), "grad" (backpropagate ``sum(output * cotangent)``), "modules" (the submodules
    of `target`), "attribute" (the value of ``target.name``: a field, or a property run
    like a call), "set" (``target.name = value``), "hold" (keep `value` in the kernel
    and answer a reference to it), "output_cut" (what the shim dropped of each cell's output), "batch"
    (`requests`, answered in order, up to the first that raises), "profile" (time
    ``target(*args, **kwargs)`` and measure its peak memory: `repeat`, `warmup`, `budget`
    seconds; the answer is numbers, never the output) or "end" (the shim's loop returns).
    A target is ``{"__global__": name}`` or ``{"__ref__": n}``; torch is seeded with `seed`
    first. `construct`: the call builds an object (`Kernel.new`): its tensor arguments stay
    on the CPU and a module it returns is moved to the grading's device."""

    op: str
    target: dict[str, Any]
    method: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    seed: int | None
    wrt: list[int]
    cotangent: Any
    output_path: list[int]
    params_of: dict[str, Any] | None
    requests: list[Any]
    construct: bool
    repeat: int
    warmup: int
    budget: float
    name: str
    value: Any


class Answer(TypedDict, total=False):
    """The shim's answer: `value` (tensors and plain data; an object of the candidate's as
    ``{"__ref__": n, "type": name}``, a value that cannot cross as ``{"__foreign__": name}``),
    `raised` (what candidate code raised: type, message, where, line and flags), or, for a
    batch, `answers` (one Answer per request answered)."""

    value: Any
    raised: dict[str, Any]
    answers: list[Any]


class Transfer:
    """What one send or receive came to: passed (with the payload received), timeout (the
    deadline came first), crashed (the kernel is gone) or error (`message` says what;
    `restart_loop`: the serving loop may still be running, out of step, and must be
    interrupted and started afresh; otherwise there is no loop to stop: its shim is gone,
    or the kernel closed the channel)."""

    __slots__ = ("message", "payload", "restart_loop", "status")

    def __init__(
        self, status: Status, payload: bytes = b"", message: str = "", restart_loop: bool = False
    ) -> None:
        self.status = status
        self.payload = payload
        self.message = message
        self.restart_loop = restart_loop


class Channel:
    """The two pipes of one kernel, seen from the grader (see the module docstring)."""

    def __init__(self) -> None:
        self._requests_r, self._requests_w = os.pipe()
        self._answers_r, self._answers_w = os.pipe()
        for fd in (self._requests_w, self._answers_w):
            with contextlib.suppress(OSError):  # Linux; elsewhere the default size
                fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(self._requests_w, False)
        os.set_blocking(self._answers_r, False)
        self.inodes = {
            self._requests_r: os.fstat(self._requests_r).st_ino,
            self._answers_w: os.fstat(self._answers_w).st_ino,
        }
        self._kernel_open = True
        self._broken = ""  # why every transfer fails at once (the kernel closed its ends)
        self._buffer = bytearray()
        self._sequence = 0
        self._pidfd = -1
        self._alive: Any = None

    @property
    def broken(self) -> str:
        """Why every transfer fails at once ('' while the channel works)."""
        return self._broken

    @property
    def kernel_fds(self) -> tuple[int, int]:
        """The kernel's ends: (where it reads requests, where it writes answers)."""
        return self._requests_r, self._answers_w

    def launched(self, pid: int | None, alive: Any) -> None:
        """The kernel process has started: close our copies of its ends (so its death
        reads as the end of the answers) and watch the process (`alive()` says whether it
        runs, where Linux offers no pidfd)."""
        self._close_kernel_ends()
        self._alive = alive
        if pid is not None and hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(pid)

    def close(self) -> None:
        """Close every end still open here (each once: a closed number may be reused)."""
        self._close_kernel_ends()
        for fd in (self._requests_w, self._answers_r, self._pidfd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._requests_w = self._answers_r = self._pidfd = -1

    def _close_kernel_ends(self) -> None:
        if self._kernel_open:
            for fd in self.kernel_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._kernel_open = False

    def resync(self, token: bytes, deadline: float, ended: bytes = b"") -> Transfer:
        """Skip what is on the answer pipe up to and including `token`, the first thing a
        fresh serving loop writes; `ended` first means the loop ended before it began."""
        if self._broken:
            return Transfer(Status.ERROR, message=self._broken)
        self._buffer.clear()
        keep = max(len(token), len(ended))
        while True:
            found = self._buffer.find(token)
            gone = self._buffer.find(ended) if ended else -1
            if gone >= 0 and not 0 <= found < gone:  # the loop ended before it began
                return Transfer(Status.ERROR, message="the grader's shim is gone")
            if found >= 0:
                del self._buffer[: found + len(token)]
                return Transfer(Status.PASSED)
            del self._buffer[: max(0, len(self._buffer) - keep)]
            filled = self._fill(deadline)
            if filled.status != Status.PASSED:
                return filled

    def send(self, payload: bytes, deadline: float) -> Transfer:
        """Write one request frame; returns its transfer (passed, timeout or crashed)."""
        if self._broken:
            return Transfer(Status.ERROR, message=self._broken)
        self._sequence += 1
        data = memoryview(WIRE_HEADER.pack(self._sequence, len(payload)) + payload)
        while data:
            try:
                written = os.write(self._requests_w, data)
            except BlockingIOError:
                status = self._wait(self._requests_w, select.POLLOUT, deadline)
                if status != Status.PASSED:
                    return Transfer(status)
                continue
            except OSError:  # EPIPE: nobody reads requests any more
                return self._closed()
            data = data[written:]
        return Transfer(Status.PASSED)

    def receive(self, deadline: float) -> Transfer:
        """Read the answer frame to the request just sent."""
        header = self._need(WIRE_HEADER.size, deadline)
        if header.status != Status.PASSED:
            return header
        sequence, length = WIRE_HEADER.unpack_from(self._buffer)
        if sequence != self._sequence:
            message = "an answer out of step with its request"
            return Transfer(Status.ERROR, message=message, restart_loop=True)
        if length > max_answer_bytes():
            message = f"an answer of {length:,} bytes, more than the grader reads"
            return Transfer(Status.ERROR, message=message, restart_loop=True)
        body = self._need(WIRE_HEADER.size + length, deadline)
        if body.status != Status.PASSED:
            return body
        payload = bytes(self._buffer[WIRE_HEADER.size : WIRE_HEADER.size + length])
        del self._buffer[: WIRE_HEADER.size + length]
        return Transfer(Status.PASSED, payload)

    def _need(self, size: int, deadline: float) -> Transfer:
        while len(self._buffer) < size:
            filled = self._fill(deadline, size - len(self._buffer))
            if filled.status != Status.PASSED:
                return filled
        return Transfer(Status.PASSED)

    def _closed(self) -> Transfer:
        """The kernel's end of a pipe is closed: it died (a dying process closes its files
        a moment before it is gone: give it that moment), or closed it itself."""
        if self._exits_within(EXIT_SECONDS):
            return Transfer(Status.CRASHED)
        self._broken = "the kernel closed the call channel"  # for good: fail fast from now
        return Transfer(Status.ERROR, message=self._broken)

    def _exits_within(self, seconds: float) -> bool:
        if self._pidfd >= 0:
            return bool(select.select([self._pidfd], [], [], seconds)[0])
        deadline = time.monotonic() + seconds
        while self._alive and self._alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(_SLICE_MS / 1000 / 5)
        return True

    def _fill(self, deadline: float, want: int = 1 << 16) -> Transfer:
        """Read what the answer pipe holds (waiting for it until `deadline`)."""
        while True:
            try:
                chunk = os.read(self._answers_r, max(want, 1 << 16))
            except BlockingIOError:
                status = self._wait(self._answers_r, select.POLLIN, deadline)
                if status != Status.PASSED:
                    return Transfer(status)
                continue
            except OSError:
                return self._closed()
            if not chunk:  # every writer is gone
                return self._closed()
            self._buffer += chunk
            return Transfer(Status.PASSED)

    def _wait(self, fd: int, event: int, deadline: float) -> Status:
        """Wait until `fd` is ready, the kernel dies or the deadline passes."""
        poller = select.poll()
        poller.register(fd, event)
        if self._pidfd >= 0:
            poller.register(self._pidfd, select.POLLIN)
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0:
                return Status.TIMEOUT
            timeout = left_ms if self._pidfd >= 0 else min(left_ms, _SLICE_MS)
            ready = dict(poller.poll(timeout))
            if ready.get(fd):
                return Status.PASSED
            if self._pidfd in ready or (self._pidfd < 0 and self._alive and not self._alive()):
                return Status.CRASHED

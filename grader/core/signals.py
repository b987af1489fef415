"""Signals that stop a grading, and the cleanup they must not cut short.

The `grade` command turns SIGTERM and SIGHUP into `Stopped` and SIGINT into
KeyboardInterrupt, both raised in the main thread so that the session's cleanup runs on
the way out. A signal that arrives while cleanup (or the setup of what cleanup undoes)
is under way waits: `held()` marks such a section, and the signal is raised when the
outermost section ends. Once one has been raised, later ones are ignored: the grader is
already on its way out, cleaning up. An exception raised where a library swallows every
exception (torch's C code importing numpy, a finalizer) is lost; `check()`, called where
the grader goes on with its work, raises it again. Python runs signal handlers in the main
thread only, whichever thread the signal reached, so plain module state is enough.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

STOPPING = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_held = 0
_pending: int | None = None
_raised = 0  # the signal raised, once one was


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived. Like KeyboardInterrupt, it unwinds past `except
    Exception`, so the kernel, its processes and the scratch space are cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stop_on_signals() -> None:
    """Install the handlers (main thread only: the `grade` command). A signal raised
    inside one of asyncio's callbacks (jupyter_client's sockets) is swallowed there and
    logged with a traceback by asyncio's default handler: the log record is dropped (the
    exception is lost, and `check()` raises it again), so a stopped grading prints no
    traceback."""
    for signum in STOPPING:
        signal.signal(signum, _handle)
    logging.getLogger("asyncio").addFilter(_drop_lost_signal)


def _drop_lost_signal(record: logging.LogRecord) -> bool:
    """False for asyncio's log of a stopping signal it swallowed."""
    kind = record.exc_info[0] if record.exc_info else None
    return not (kind is not None and issubclass(kind, (Stopped, KeyboardInterrupt)))


def ignore_signals() -> None:
    """On the way out of the command, once cleanup is done: ignore stopping signals, so
    that one arriving while the interpreter shuts down (which puts back the default
    handlers of Python's own) cannot kill the process and change its exit code."""
    global _pending
    for signum in STOPPING:
        signal.signal(signum, signal.SIG_IGN)
    _pending = None  # arrived during the last cleanup: nothing is left to stop


def forked() -> None:
    """First thing in a process forked while the parent held a section (a batch worker):
    that section is the parent's, so none is held here; a signal that arrived meanwhile is
    raised now."""
    global _held, _pending
    _held = 0
    if _pending is not None:
        signum, _pending = _pending, None
        _raise(signum)


def check() -> None:
    """Raise a stopping signal whose exception was lost, or that still waits (its held
    section ended while another exception was on its way out): call it only where the
    grader goes on with its work (between cells, calls, notebooks), never while it
    unwinds. Inside a held section the signal waits for the section's end, as ever."""
    global _pending
    signum = _raised or _pending
    if signum and not _held:
        _pending = None
        _raise(signum)


@contextmanager
def held() -> Iterator[None]:
    """A section that a stopping signal must not interrupt: the signal is raised when the
    outermost section ends (unless an exception is already on its way out)."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending is not None and sys.exc_info()[0] is None:
            signum, _pending = _pending, None
            _raise(signum)


def _handle(signum: int, frame: object) -> None:
    global _pending
    if _raised:
        return
    if _held:
        _pending = _pending or signum
        return
    _raise(signum)


def _raise(signum: int) -> None:
    global _raised
    _raised = signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signum)

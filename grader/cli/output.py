"""Writing what a command produces: stdout that may close under us (`grade NB | head`),
and output files and folders refused before grading when they could not be written after."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from grader.core.errors import UsageError

if TYPE_CHECKING:
    from grader.core.results import Outcome


@contextlib.contextmanager
def stdout_may_close() -> Iterator[None]:
    """Write to stdout; a reader that leaves (`grade NB | head -1`) ends the writing and
    changes nothing else (see `drop_stdout`)."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        drop_stdout()


def drop_stdout() -> None:
    """The reader of stdout left: what is still to be written goes to /dev/null, as
    Python's documentation advises, and the exit code stays the run's."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class Stdout(Console):
    """A console on stdout that goes quiet when its reader leaves (rich's own exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        drop_stdout()


def writable(path: str | None, what: str) -> None:
    """Refuse, before grading, an output file that could not be written afterwards."""
    if not path:
        return
    folder = Path(path).parent
    if Path(path).is_dir():
        raise UsageError(f"{path}: is a directory, cannot write {what} there")
    if not folder.is_dir():
        raise UsageError(f"{path}: cannot write {what}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{path}: cannot write {what}: folder {folder} is not writable")


def writable_folder(path: str | None, what: str) -> None:
    """Refuse, before grading, an output folder that could not be made or written."""
    if not path:
        return
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{path}: cannot write {what} there: not a folder")
    parent = folder if folder.is_dir() else folder.parent
    if not parent.is_dir():
        raise UsageError(f"{path}: cannot write {what}: no folder {parent}")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{path}: cannot write {what}: folder {parent} is not writable")


def write(path: str | None, what: str, text: str) -> None:
    """Write one of the report's files, if its flag was given."""
    if not path:
        return
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise UsageError(f"{path}: cannot write {what}: {e.strerror or e}") from None


def write_folder(
    path: str, what: str, write: Callable[[list[Outcome], Path], None], outcomes: list[Outcome]
) -> None:
    """Write a folder of outputs; an OS error is one line naming the folder."""
    try:
        write(outcomes, Path(path))
    except OSError as e:
        raise UsageError(f"{path}: cannot write {what}: {e.strerror or e}") from None

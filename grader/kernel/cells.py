"""Running code in the kernel: what one execution gave, and the bounds on what it printed.

An `Execution` is the outcome of running one piece of code (a cell, or a call of the
shim): passed, error (with the message), timeout or crashed (the kernel died), with the
output kept and how much was cut. A `CellRun` is what the report says of a notebook cell.
Nothing here decides what to do about a timeout or a dead kernel: the session does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import nbformat
from nbclient import NotebookClient

from grader.core.outcomes import Status

# The error nbclient reports for a cell past its time limit (it has interrupted the kernel).
TIMEOUT_NAME = "GraderCellTimeout"


@dataclass
class Execution:
    """One piece of code run in the kernel: its status, error message and kept output."""

    status: Status = Status.PASSED
    message: str = ""
    output: list[str] = field(default_factory=list)
    kept: int = 0
    cut: int = 0
    answer: bytes = b""  # a call's answer (a `grader.kernel.wire` payload)
    restart_loop: bool = False  # a call's error: the shim's loop is out of step (see channel)
    line: int = 0  # an error's line in the code run (0: not known)


@dataclass(frozen=True)
class CellRun:
    """What happened when one of the candidate's cells ran (index counts all cells from 0)."""

    index: int
    status: Status
    message: str = ""
    output: str = ""
    output_cut: int = 0
    line: int = 0  # the line that raised (0: not known)


class CellClient(NotebookClient):
    """An nbclient client that keeps only a bounded amount of what a cell prints: at most
    `cell_budget` characters of each execution, and `total_left` in all."""

    execution: Execution | None = None
    cell_budget: int = 0
    total_left: int = 0

    def output(
        self,
        outs: list[nbformat.NotebookNode],
        msg: dict[str, Any],
        display_id: str | None,
        cell_index: int,
    ) -> nbformat.NotebookNode | None:
        run = self.execution
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


def cell_run(index: int, run: Execution, limit: float) -> CellRun:
    """The report's account of a notebook cell from its execution."""
    output = "".join(run.output)
    if run.status == Status.TIMEOUT:
        message = f"ran past the {limit:g} s cell limit and was interrupted"
        return CellRun(index, Status.TIMEOUT, message, output, run.cut)
    if run.status == Status.CRASHED:
        message = "the kernel died while running this cell"
        return CellRun(index, Status.CRASHED, message, output, run.cut)
    message = run.message
    if message.startswith("MemoryError") or "can't allocate memory" in message:
        message = f"memory limit exceeded ({message})"
    return CellRun(index, run.status, message, output, run.cut, run.line)


# IPython's traceback names the code it ran "Cell In[N], line L" (or, in older versions,
# "File /tmp/ipykernel_1/123.py:L"); the first such frame is the cell's own line.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FRAME = re.compile(r"^(?:Cell In\[\d*\], line |File \S*ipykernel\S*\.py:)(\d+)")


def cell_line(traceback: object) -> int:
    """The line of the cell that raised, from an error reply's traceback (0: not found)."""
    if not isinstance(traceback, list):
        return 0
    for entry in traceback:
        text = _ANSI.sub("", str(entry)).lstrip()
        match = _FRAME.match(text)
        if match:
            return int(match[1])
    return 0


# IPython compiles a cell under a file name of its own ("123456789.py", in older versions
# "<ipython-input-3-...>"), which a SyntaxError's message repeats: the card says the cell.
_CELL_FILE = re.compile(r"\s*\((?:\d+\.py|<ipython-input-[^>]*>), line \d+\)$")


def error_message(name: object, value: object) -> str:
    """A cell's error in one line, "NameError: name 'x' is not defined", without the file
    name IPython gave the cell."""
    return one_line(f"{name}: {_CELL_FILE.sub('', str(value))}")


def one_line(value: object, limit: int = 300) -> str:
    """`value` as one line of at most `limit` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

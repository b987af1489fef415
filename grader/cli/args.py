"""The arguments of `grade NOTEBOOK` and the parsers every subcommand shares: a bad
argument is a `UsageError` (one line, exit 2), never argparse's own exit."""

from __future__ import annotations

import argparse
import os
import re
from typing import NoReturn

from grader.core.errors import UsageError
from grader.core.limits import MIN_MEMORY_BYTES, Limits

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int | None:
    """'8G', '512M', '1.5GiB' -> bytes; '0', 'none' or 'off' -> None (no limit)."""
    if text.strip().lower() in ("none", "off"):
        return None
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 8G or 512M)")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return size or None


def memory_limit(text: str) -> int | None:
    """`--memory-limit`: a size no smaller than a kernel needs (`MIN_MEMORY_BYTES`: the cap
    is the kernel's address space, and importing torch maps about 1.5 GiB of it)."""
    size = parse_size(text)
    if size is not None and size < MIN_MEMORY_BYTES:
        raise argparse.ArgumentTypeError(
            f"{text}: a kernel with torch needs at least {format_size(MIN_MEMORY_BYTES)} of "
            f"address space (the cap covers what torch's libraries map, not only what the "
            f"notebook allocates); use {format_size(MIN_MEMORY_BYTES)} or more, or none"
        )
    return size


def format_size(size: int | None) -> str:
    """The inverse of `parse_size`, for help texts: 8589934592 -> '8G', None -> 'none'."""
    if not size:
        return "none"
    for unit in "TGMK":
        if size % _UNITS[unit.lower()] == 0:
            return f"{size // _UNITS[unit.lower()]}{unit}"
    return str(size)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above zero: {text!r}")
    return value


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def grading_parser() -> argparse.ArgumentParser:
    """Arguments of `grade NOTEBOOK`; the defaults are `Limits()`'s."""
    d = Limits()
    p = Parser(
        prog="grade",
        description="Grade candidates' notebooks against a hidden, progressive test suite: "
        "one notebook gets a report card; several, or folders, a batch with a summary table. "
        "Other commands: `grade list`, `grade new EXERCISE`, `grade build [--check]`, "
        "`grade hints`, "
        "`grade merge PARTS...`, "
        "`grade gradescope EXERCISE`.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="notebooks (.ipynb) and folders of them (searched below; dot-folders such as "
        ".ipynb_checkpoints are skipped)",
    )
    p.add_argument(
        "--exercise", metavar="NAME", help="grade against this exercise, whatever the notebook says"
    )
    exercises_flag(p)
    p.add_argument(
        "-j",
        "--jobs",
        type=count,
        default=0,
        metavar="N",
        help="notebooks graded at once in a batch (default: the number of CPUs)",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="grade only the I-th of N shares of the notebooks (for a CI matrix; "
        "combine the parts with `grade merge`)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON on stdout instead of the report card (a list for a batch)",
    )
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML to PATH")
    p.add_argument(
        "--gradescope",
        metavar="PATH",
        help="also write Gradescope's results.json to PATH (a batch: a folder of them)",
    )
    p.add_argument("--csv", metavar="PATH", help="also write a gradebook (CSV) to PATH")
    p.add_argument(
        "--output",
        metavar="DIR",
        help="also write, per notebook, the executed notebook with its report and an HTML "
        "report, and an index page, into DIR",
    )
    p.add_argument(
        "--format",
        choices=("md", "html"),
        help="also write the report for the candidate, as Markdown or HTML, to "
        "NOTEBOOK-report.md|html in the current folder (a batch: one per notebook in "
        "candidate-reports/), or to --report-file",
    )
    p.add_argument(
        "--report-file",
        metavar="PATH",
        help="where --format writes (- for stdout; a batch: a folder)",
    )
    p.add_argument(
        "--reveal",
        type=count,
        metavar="N",
        help="the candidate's report (--format) shows levels 1..N in full and, above N, "
        "only how many tests passed (hidden tests' details withheld); default: all",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="after the tests, time the candidate's code and measure its peak memory "
        "against the torch baseline the exercise names, over growing sizes (never scored)",
    )
    p.add_argument(
        "--profile-plot",
        metavar="FILE.svg",
        help="also plot the profile (time and memory against T, log-log) as SVG; implies --profile",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the candidate's code runs during the tests and the profile "
        "(cuda: an error if torch sees no GPU; default cpu)",
    )
    p.add_argument(
        "--cell-timeout",
        type=seconds,
        default=d.cell_timeout,
        metavar="S",
        help=f"time limit per notebook cell (default {d.cell_timeout:g})",
    )
    p.add_argument(
        "--call-timeout",
        type=seconds,
        default=d.call_timeout,
        metavar="S",
        help=f"time limit per call into candidate code (default {d.call_timeout:g})",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=d.total_timeout,
        metavar="S",
        help=f"bound on the whole grading (default {d.total_timeout:g})",
    )
    p.add_argument(
        "--max-timeouts",
        type=count,
        default=d.max_timeouts,
        metavar="N",
        help=f"skip the remaining tests after N timeouts in a row (default {d.max_timeouts})",
    )
    p.add_argument(
        "--memory-limit",
        type=memory_limit,
        default=d.memory_bytes,
        metavar="SIZE",
        help="cap on the kernel's memory, e.g. 8G or 4G: all its processes together where a "
        "memory cgroup can be made, and each process's address space (at least "
        f"{format_size(MIN_MEMORY_BYTES)}: torch maps about 1.5G of it); none or 0: no cap "
        f"(default {format_size(d.memory_bytes)})",
    )
    p.add_argument(
        "--max-output",
        type=parse_size,
        default=d.cell_output_bytes,
        metavar="SIZE",
        help="output kept per cell, 16 times that in total; none or 0: keep it all "
        f"(default {format_size(d.cell_output_bytes)})",
    )
    p.add_argument(
        "--sandbox",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the kernel under bubblewrap: it sees only the interpreter and its libraries "
        "(read-only) and its own scratch folder, with no network and no privileges; "
        "default: on wherever bubblewrap works (--no-sandbox: off; --sandbox: required)",
    )
    p.add_argument(
        "--kernel-user",
        metavar="USER",
        help="when grade runs as root, run each kernel as USER (no supplementary groups), "
        "so the candidate's code cannot read or write what only root may; the Gradescope "
        "autograder uses grader-kernel, which its setup.sh creates",
    )
    p.add_argument(
        "--cold",
        action="store_true",
        help="boot every kernel as a fresh interpreter instead of forking it from the warm "
        "template (slower; the template is used wherever it is as safe as a cold start)",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="grade one notebook, then grade it again each time it is saved, redrawing the "
        "card in place (Ctrl-C to stop)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="say on stderr how each kernel started (forked from the template, or cold and why)",
    )
    p.add_argument("--version", action="version", version=_version())
    return p


def check_kernel_user(user: str) -> None:
    """`--kernel-user USER` is checked before any grading: it needs root and a real user.

    Raises:
        UsageError: not root, or no such user.
    """
    import pwd

    if os.geteuid() != 0:
        raise UsageError(
            f"--kernel-user {user}: grade must run as root to run kernels as another user"
        )
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise UsageError(f"--kernel-user {user}: no such user") from None


def exercises_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--exercises",
        metavar="DIR",
        help="also load the exercises in DIR (each a folder with a suite.py), in front of the "
        "built-in ones (default: $GRADER_EXERCISES)",
    )


def _version() -> str:
    import grader

    return f"grade {grader.__version__}"

"""`grade`: parse arguments, call one library function, render, map errors to exit codes
(`grader.core.errors.ExitCode`: 0 full marks, 1 points lost, 2 could not grade, 3 internal
error, 130 interrupted, 128 + N stopped by signal N after cleaning up).

Every default is `Limits()`'s; every size flag reads `none` and `0` as no limit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import NoReturn

from grader.core.errors import ExitCode, GraderBug, GraderError
from grader.core.signals import Stopped

COMMANDS: dict[str, str] = {
    "list": "list_command",
    "build": "build_command",
    "hints": "hints_command",
    "new": "new_command",
    "merge": "merge_command",
    "gradescope": "gradescope_command",
}
"""The subcommands, by their function in `grader.cli.commands` (imported when one runs);
anything else on the command line is `grade PATH...`."""
# Flags under which no kernel forks from the warm template, or no grading runs (see
# `grader.kernel.template.cold_reason`): the template is then not started early.
_NO_EARLY_TEMPLATE = ("--cold", "--kernel-user", "--device", "-h", "--help", "--version")


def command(name: str) -> Callable[[list[str]], int] | None:
    """The subcommand called `name`, or None."""
    attribute = COMMANDS.get(name)
    if attribute is None:
        return None
    from grader.cli import commands

    found: Callable[[list[str]], int] = getattr(commands, attribute)
    return found


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `grade` console script."""
    if argv is None:  # the command itself, one grading per process
        from grader.core.signals import ignore_signals, stop_on_signals
        from grader.kernel.processes import adopt_orphans, keep_private

        adopt_orphans()  # keep every orphan below us
        keep_private()  # other processes of this user cannot read our environment or memory
        stop_on_signals()
        try:
            code = _run(sys.argv[1:], early=True)
        finally:
            ignore_signals()
            template = sys.modules.get("grader.kernel.template")
            if template is not None:  # the warm template, if one started
                template.close_all()
        _exit(code)
    return _run(argv)


def _run(argv: list[str], early: bool = False) -> int:
    """Run the command line `argv` (`early`: the `grade` process itself, which may start
    the warm template first); every error, and a stopping signal arriving at any moment
    (an import included), becomes a line on stderr and an exit code."""
    warnings.filterwarnings("ignore")
    err = _Stderr()
    try:
        if early:
            _warm_up_early(argv)
        from grader.cli.grading import grade_command

        chosen = command(argv[0]) if argv else None
        return chosen(argv[1:]) if chosen else grade_command(argv)
    except GraderBug as e:  # the suite's fault: one line naming it, or the traceback
        debug = bool(os.environ.get("GRADER_DEBUG"))
        if debug:
            traceback.print_exception(e.error)
        hint = "" if debug else " (set GRADER_DEBUG=1 for a traceback)"
        err.print(f"grade: internal error: {e}{hint}", markup=False)
        return e.exit_code
    except GraderError as e:
        err.print(f"grade: error: {e}", markup=False)
        return e.exit_code
    except BrokenPipeError:  # `grade nb | head`: the reader left; nothing more to say
        sys.stderr.close()
        return ExitCode.NOT_FULL_MARKS
    except KeyboardInterrupt:
        err.print("grade: interrupted", markup=False)
        return ExitCode.INTERRUPTED
    except Stopped as e:
        err.print(f"grade: stopped by {signal.Signals(e.signum).name}", markup=False)
        return ExitCode.stopped_by(e.signum)
    except Exception as e:  # a bug in the grader: one line, unless asked for the traceback
        if os.environ.get("GRADER_DEBUG"):
            raise
        err.print(
            f"grade: internal error: {type(e).__name__}: {e} (set GRADER_DEBUG=1 for a traceback)",
            markup=False,
        )
        return ExitCode.INTERNAL_ERROR


class _Stderr:
    """rich's console on stderr, imported when there is something to say."""

    def print(self, text: str, markup: bool = False) -> None:
        from rich.console import Console

        Console(stderr=True, highlight=False, soft_wrap=True).print(text, markup=markup)


def _warm_up_early(argv: list[str]) -> None:
    """`grade PATH...`: start the warm template before anything heavy is imported, so that
    it boots (ipykernel, torch) while the grader imports its own torch and suites. The
    parsed flags decide again in `grade_command` (a template already running is kept)."""
    if not argv or argv[0] in COMMANDS:
        return
    if any(arg.split("=", 1)[0] in _NO_EARLY_TEMPLATE for arg in argv):
        return
    from grader.core.limits import Limits
    from grader.kernel.launch import warm_up

    warm_up(Limits())


def _exit(code: int) -> NoReturn:
    """End the process now that everything is done (the kernel and the scratch space are
    gone, every file is written and closed): flush what was printed and skip the
    interpreter's teardown of torch and Jupyter, which takes longer than grading a small
    notebook's suite (0.3-0.4 s)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a reader that left: nothing more to say
            stream.flush()
    os._exit(int(code))

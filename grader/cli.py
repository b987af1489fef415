"""`grade`: parse arguments, call one library function, render, map errors to exit codes
(`grader.errors.ExitCode`: 0 full marks, 1 points lost, 2 could not grade, 3 internal
error, 130 interrupted, 128 + N stopped by signal N after cleaning up).

Every default is `Limits()`'s; every size flag reads `none` and `0` as no limit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console

from grader.errors import ExitCode, GraderBug, GraderError, UsageError
from grader.limits import MIN_MEMORY_BYTES, Limits
from grader.signals import Stopped, check

if TYPE_CHECKING:
    from grader.notebook import Notebook
    from grader.results import GradeReport, Outcome

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


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above zero: {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def grading_parser() -> argparse.ArgumentParser:
    """Arguments of `grade NOTEBOOK`; the defaults are `Limits()`'s."""
    d = Limits()
    p = _Parser(
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
    _exercises_flag(p)
    p.add_argument(
        "-j",
        "--jobs",
        type=_count,
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
        type=_count,
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
        type=_seconds,
        default=d.cell_timeout,
        metavar="S",
        help=f"time limit per notebook cell (default {d.cell_timeout:g})",
    )
    p.add_argument(
        "--call-timeout",
        type=_seconds,
        default=d.call_timeout,
        metavar="S",
        help=f"time limit per call into candidate code (default {d.call_timeout:g})",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=d.total_timeout,
        metavar="S",
        help=f"bound on the whole grading (default {d.total_timeout:g})",
    )
    p.add_argument(
        "--max-timeouts",
        type=_count,
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
    p.add_argument("--version", action="version", version=_version())
    return p


def _kernel_user(user: str) -> None:
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


def _version() -> str:
    import grader

    return f"grade {grader.__version__}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `grade` console script."""
    if argv is None:  # the command itself, one grading per process
        from grader.kernel.processes import adopt_orphans, keep_private
        from grader.signals import ignore_signals, stop_on_signals

        adopt_orphans()  # keep every orphan below us
        keep_private()  # other processes of this user cannot read our environment or memory
        stop_on_signals()
        try:
            code = main(sys.argv[1:])
        finally:
            ignore_signals()
        _exit(code)
    warnings.filterwarnings("ignore")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        if argv[:1] == ["list"]:
            return _list(argv[1:])
        if argv[:1] == ["build"]:
            return _build(argv[1:])
        if argv[:1] == ["hints"]:
            return _hints(argv[1:])
        if argv[:1] == ["new"]:
            return _new(argv[1:])
        if argv[:1] == ["merge"]:
            return _merge(argv[1:])
        if argv[:1] == ["gradescope"]:
            from grader.autograder import main as package

            return package(argv[1:])
        return _grade(argv)
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


def _exit(code: int) -> NoReturn:
    """End the process now that everything is done (the kernel and the scratch space are
    gone, every file is written and closed): flush what was printed and skip the
    interpreter's teardown of torch and Jupyter, which takes longer than grading a small
    notebook's suite (0.3-0.4 s)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a reader that left: nothing more to say
            stream.flush()
    os._exit(int(code))


def _grade(argv: list[str]) -> int:
    # --help, argument errors and unreadable files are answered before anything heavy
    # (Jupyter, torch) is imported.
    args = grading_parser().parse_args(argv)
    from grader.batch import collect, parse_shard, take_shard
    from grader.kernel.sandbox import INSTALL_HINT, available, bwrap_path

    shard = parse_shard(args.shard) if args.shard else None
    single = len(args.paths) == 1 and not Path(args.paths[0]).is_dir() and shard is None
    if single:
        from grader.notebook import read_notebook

        with _error_object(args):
            notebook = read_notebook(args.paths[0])
    else:
        notebooks = collect(args.paths)
        if shard is not None:
            notebooks = take_shard(notebooks, *shard)
        elif not notebooks:
            raise UsageError(f"no notebooks (.ipynb) in {' '.join(args.paths)}")
    if args.sandbox and bwrap_path() is None:
        raise UsageError(
            f"--sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}"
        )
    if args.kernel_user:
        _kernel_user(args.kernel_user)
    if args.sandbox and not available():
        raise UsageError(
            "--sandbox: bubblewrap cannot make a sandbox here (no user namespaces, or mounts "
            "are forbidden); grade with --no-sandbox, or on a machine where bwrap works"
        )
    if args.profile_plot and not single:
        raise UsageError("--profile-plot plots one notebook's profile: give one notebook")
    if args.profile_plot and not args.profile_plot.lower().endswith(".svg"):
        raise UsageError(f"--profile-plot {args.profile_plot}: the plot is SVG; name a .svg file")
    if args.json and args.format and args.report_file == "-":
        raise UsageError("--json and --report-file - would both write to stdout: pick one")
    if (args.report_file or args.reveal is not None) and not args.format:
        flag = "--report-file" if args.report_file else "--reveal"
        raise UsageError(f"{flag} shapes the candidate's report: add --format md or html")
    if args.device == "cuda":
        from grader.checks import cuda_available

        ok, why = cuda_available()
        if not ok:
            raise UsageError(f"--device cuda: no GPU to grade on ({why})")
    candidate = None
    if args.format and args.report_file != "-":
        candidate = args.report_file or (
            f"{Path(args.paths[0]).stem}-report.{args.format}" if single else "candidate-reports"
        )
        (_writable if single else _folder)(candidate, "candidate's report")
    args.candidate_report = candidate
    for path, what in (
        (args.junit, "JUnit file"),
        (args.csv, "gradebook"),
        (args.profile_plot, "profile plot"),
    ):
        _writable(path, what)
    if single:
        _writable(args.gradescope, "Gradescope results")
    for folder, what in (
        (args.output, "reports"),
        (None if single else args.gradescope, "Gradescope results"),
    ):
        _folder(folder, what)
    output = args.max_output
    limits = Limits(
        cell_timeout=args.cell_timeout,
        call_timeout=args.call_timeout,
        total_timeout=args.timeout,
        memory_bytes=args.memory_limit,
        cell_output_bytes=output,
        total_output_bytes=None if output is None else 16 * output,
        max_timeouts=max(1, args.max_timeouts),
        sandbox=args.sandbox,
        device=args.device,
        profile=args.profile or bool(args.profile_plot),
        reveal=args.reveal,
        kernel_user=args.kernel_user,
    )
    if single:
        return _grade_single(args, limits, notebook)
    return _grade_batch(args, limits, notebooks)


def _grade_single(args: argparse.Namespace, limits: Limits, notebook: Notebook) -> int:
    from grader.grade import grade_with_cells
    from grader.report import render, to_gradescope, to_json, to_junit
    from grader.results import Outcome, exit_code

    with _error_object(args):
        report, cells = grade_with_cells(
            args.paths[0],
            exercise=args.exercise,
            limits=limits,
            exercises=args.exercises,
            notebook=notebook,
        )
    check()  # a stopping signal whose exception a library swallowed: no report
    _write(args.junit, "JUnit file", to_junit(report))
    _write(args.gradescope, "Gradescope results", to_gradescope(report))
    outcome = Outcome(report.notebook, report, exit_code=exit_code(report), cells=tuple(cells))
    _write_cohort_files(args, [outcome])
    with _stdout_may_close():
        if args.format:
            _write_candidate_report(args, report, args.candidate_report)
        if report.profile and args.profile_plot:
            from grader.profile import profile_svg

            _write(args.profile_plot, "profile plot", profile_svg(report.profile))
        if args.json:
            print(to_json(report))
        elif args.report_file != "-" or not args.format:  # else stdout has the report
            console = _Stdout(highlight=False)
            render(report, console)
            if report.profile:
                from grader.profile import render_profile

                render_profile(report.profile, console)
    return outcome.exit_code


@contextlib.contextmanager
def _error_object(args: argparse.Namespace) -> Iterator[None]:
    """`--json`, one notebook that cannot be graded: its error object on stdout, as a batch
    lists it; the error then goes on to stderr and the exit code. A bad flag is not the
    notebook's: no object."""
    try:
        yield
    except GraderError as e:
        if args.json and not isinstance(e, UsageError):
            from grader.batch import cannot_grade
            from grader.report import encodable_data

            entry = cannot_grade(args.paths[0], e).to_dict()
            with _stdout_may_close():
                print(json.dumps(encodable_data(entry), indent=2))
        raise


@contextlib.contextmanager
def _stdout_may_close() -> Iterator[None]:
    """Write to stdout; a reader that leaves (`grade NB | head -1`) ends the writing and
    changes nothing else (see `_drop_stdout`)."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()


def _drop_stdout() -> None:
    """The reader of stdout left: what is still to be written goes to /dev/null, as
    Python's documentation advises, and the exit code stays the run's."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _Stdout(Console):
    """A console on stdout that goes quiet when its reader leaves (rich's own exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _drop_stdout()


def _write_candidate_report(
    args: argparse.Namespace, report: GradeReport, path: str | None
) -> None:
    """`--format`: the candidate's report (`--reveal`) to `path`, or stdout when None."""
    from grader.report import for_candidate, to_html, to_markdown

    shown = report if args.reveal is None else for_candidate(report, args.reveal)
    text = to_markdown(shown) if args.format == "md" else to_html(shown)
    if path is None:
        print(text)
    else:
        _write(path, "candidate's report", text)


def _grade_batch(args: argparse.Namespace, limits: Limits, notebooks: list[str]) -> int:
    import time

    from grader.batch import grade_all, worst
    from grader.exercise import load_catalog, use_exercises
    from grader.outputs import to_json_list, to_junit_batch, write_gradescope_folder
    from grader.progress import Progress, render_summary

    began = time.monotonic()
    use_exercises(args.exercises)
    catalog = load_catalog()  # before the workers fork: they inherit it, and torch
    if args.exercise and args.exercise not in catalog:
        known = ", ".join(sorted(catalog)) or "none"
        raise UsageError(f"--exercise {args.exercise}: unknown exercise (known: {known})")
    jobs = args.jobs or len(os.sched_getaffinity(0))
    with Progress(Console(stderr=True, highlight=False), len(notebooks)) as progress:
        outcomes = grade_all(notebooks, jobs, limits, catalog, args.exercise, progress)
    check()  # a stopping signal whose exception a library swallowed: no report
    _write(args.junit, "JUnit file", to_junit_batch(outcomes))
    if args.gradescope:
        _guarded(args.gradescope, "Gradescope results", write_gradescope_folder, outcomes)
    _write_cohort_files(args, outcomes)
    with _stdout_may_close():
        if args.format:
            from grader.outputs import slugs

            names = slugs(outcomes)
            if args.candidate_report:
                Path(args.candidate_report).mkdir(exist_ok=True)  # its parent was checked
            for outcome in outcomes:
                if outcome.report is None:
                    continue
                name = f"{names[outcome.notebook]}.{args.format}"
                folder = args.candidate_report
                _write_candidate_report(args, outcome.report, folder and str(Path(folder) / name))
        if args.json:
            print(to_json_list(outcomes))
        else:
            render_summary(outcomes, _Stdout(highlight=False), time.monotonic() - began)
    return worst(outcomes)


def _write_cohort_files(args: argparse.Namespace, outcomes: list[Outcome]) -> None:
    """The outputs a single notebook and a batch share: --csv and --output."""
    from grader.outputs import to_csv, write_output_dir

    _write(args.csv, "gradebook", to_csv(outcomes) if args.csv else "")
    if args.output:
        _guarded(args.output, "reports", write_output_dir, outcomes)


def _writable(path: str | None, what: str) -> None:
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


def _folder(path: str | None, what: str) -> None:
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


def _write(path: str | None, what: str, text: str) -> None:
    """Write one of the report's files, if its flag was given."""
    if not path:
        return
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise UsageError(f"{path}: cannot write {what}: {e.strerror or e}") from None


def _guarded(
    path: str, what: str, write: Callable[[list[Outcome], Path], None], outcomes: list[Outcome]
) -> None:
    """Write a folder of outputs; an OS error is one line naming the folder."""
    try:
        write(outcomes, Path(path))
    except OSError as e:
        raise UsageError(f"{path}: cannot write {what}: {e.strerror or e}") from None


def _exercises_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--exercises",
        metavar="DIR",
        help="also load the exercises in DIR (each a folder with a suite.py), in front of the "
        "built-in ones (default: $GRADER_EXERCISES)",
    )


def _list(argv: list[str]) -> int:
    from grader.catalog import render_catalog
    from grader.exercise import use_exercises

    p = _Parser(prog="grade list", description="Print the catalog of exercises.")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    _exercises_flag(p)
    args = p.parse_args(argv)
    use_exercises(args.exercises)
    with _stdout_may_close():
        render_catalog(_Stdout(highlight=False), as_json=args.json)
    return ExitCode.FULL_MARKS


def _merge(argv: list[str]) -> int:
    from grader.outputs import merge_texts

    p = _Parser(
        prog="grade merge",
        description="Combine the parts that `grade --shard I/N` wrote (all JSON, all CSV or "
        "all JUnit XML) into what one run over every notebook would have written.",
    )
    p.add_argument("parts", nargs="+", metavar="PART", help="the shards' files, of one kind")
    p.add_argument("-o", "--output", metavar="PATH", help="write there (default: stdout)")
    args = p.parse_args(argv)
    _writable(args.output, "the merged file")
    parts = []
    for part in args.parts:
        try:
            parts.append((part, Path(part).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as e:
            problem = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise UsageError(f"{part}: cannot read: {problem or e}") from None
    _, merged = merge_texts(parts)
    if args.output:
        _write(args.output, "the merged file", merged)
    else:
        with _stdout_may_close():
            sys.stdout.write(merged if merged.endswith("\n") else merged + "\n")
    return ExitCode.FULL_MARKS


def _build(argv: list[str]) -> int:
    from grader.build import build_project

    p = _Parser(
        prog="grade build",
        description="Write what the solutions and suites make: the scaffolds in notebooks/, "
        "the catalog index, and each exercise's hints.json where its corpus changed (this "
        "grades the corpus's mutants). With --check, write nothing and fail while any is "
        "out of date.",
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if out of date")
    p.add_argument(
        "--root",
        default=".",
        metavar="DIR",
        help="project folder holding solutions/, notebooks/ and exercises/ (default .)",
    )
    p.add_argument("-j", "--jobs", type=_count, default=0, metavar="N", help="hint workers")
    args = p.parse_args(argv)
    lines, stale = build_project(Path(args.root), args.check, args.jobs)
    console = Console(highlight=False, stderr=args.check and bool(stale))
    for line in lines:
        console.print(line, markup=False)
    return ExitCode.NOT_FULL_MARKS if stale else ExitCode.FULL_MARKS


def _new(argv: list[str]) -> int:
    from grader.build import build_project
    from grader.exercise import builtin_exercises
    from grader.new import write_skeleton

    p = _Parser(
        prog="grade new",
        description="Write a working exercise to start from (a row-wise softmax named "
        "EXERCISE: suite, corpus, solution notebook with its statement and self-check), "
        "then build it (scaffold, catalog, hints). Replace the example with yours and run "
        "`grade build` again.",
    )
    p.add_argument("exercise", metavar="EXERCISE", help="the new id: a lowercase Python name")
    p.add_argument(
        "--root",
        default=".",
        metavar="DIR",
        help="project folder to write exercises/, solutions/, notebooks/ in (default .)",
    )
    args = p.parse_args(argv)
    root = Path(args.root)
    for path in write_skeleton(root, args.exercise):
        print(f"wrote {path}")
    lines, _ = build_project(root, check=False)
    for line in lines:
        print(line)
    builtin = (root / "exercises").resolve() == builtin_exercises()
    flag = "" if builtin else f" --exercises {root / 'exercises'}"
    print(
        f"next: edit exercises/{args.exercise}/suite.py, corpus.py and "
        f"solutions/{args.exercise}.ipynb, then `grade build`; "
        f"grade a notebook with `grade NOTEBOOK{flag}`"
    )
    return ExitCode.FULL_MARKS


def _hints(argv: list[str]) -> int:
    p = _Parser(
        prog="grade hints",
        description="Grade every mutant of each exercise's corpus and write the exercise's "
        "hints.json (each known bug's failure pattern, for the report card's likely-bug line).",
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="EXERCISE",
        help="default: every exercise with a corpus (with --exercises: every one in DIR)",
    )
    p.add_argument(
        "--root",
        default=".",
        metavar="DIR",
        help="project folder holding solutions/ (default .)",
    )
    p.add_argument("-j", "--jobs", type=_count, default=0, metavar="N", help="workers")
    _exercises_flag(p)
    args = p.parse_args(argv)
    from grader.diagnosis import mutant_hints, same_failures, write_hints
    from grader.exercise import load_catalog, use_exercises

    folders = use_exercises(args.exercises)
    extra = folders[0] if args.exercises else None  # by default, only its exercises
    catalog = load_catalog()
    chosen = args.names or [
        e
        for e in sorted(catalog)
        if mutant_hints(catalog[e]) and (not extra or extra in Path(str(catalog[e].folder)).parents)
    ]
    for name in chosen:
        if name not in catalog:
            raise UsageError(f"unknown exercise {name!r} (known: {', '.join(sorted(catalog))})")
        solution = Path(args.root) / "solutions" / f"{name}.ipynb"
        if not solution.is_file():
            raise UsageError(f"{solution}: no such file (the exercise's solution)")
    jobs = args.jobs or len(os.sched_getaffinity(0))
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for name in chosen:
        solution = Path(args.root) / "solutions" / f"{name}.ipynb"
        path = write_hints(catalog[name], solution, jobs, Limits())
        with _stdout_may_close():
            print(f"{name}: wrote {path}")
        for twins in same_failures(catalog[name]):
            err.print(
                f"grade hints: warning: {name}: mutants {', '.join(twins)} fail identically "
                "(the same tests, the same messages): the card cannot tell their hints apart",
                markup=False,
            )
    return ExitCode.FULL_MARKS


if __name__ == "__main__":
    sys.exit(main())

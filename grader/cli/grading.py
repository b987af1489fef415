"""`grade PATH...`: one notebook gets a report card, several a batch with a summary table;
every output flag is written here."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from grader.cli.args import check_kernel_user, grading_parser
from grader.cli.output import (
    Stdout,
    stdout_may_close,
    writable,
    writable_folder,
    write,
    write_folder,
)
from grader.cli.watch import refuse_with_watch
from grader.core.errors import GraderError, UsageError
from grader.core.limits import Limits
from grader.core.notebook import Notebook
from grader.core.signals import check

if TYPE_CHECKING:
    from grader.core.results import GradeReport, Outcome
    from grader.report.cohort import Cohort


@dataclass(frozen=True)
class Plan:
    """A `grade` run as the flags decide it, checked before anything is graded: the
    notebook (one, already read) or the notebooks (a batch), the limits, and where the
    candidate's report goes (None: stdout, or no report)."""

    args: argparse.Namespace
    limits: Limits
    notebook: Notebook | None = None
    notebooks: list[str] = field(default_factory=list)
    candidate_report: str | None = None
    began: float = field(default_factory=time.monotonic)  # for the card's duration


def grade_command(argv: list[str]) -> int:
    """`grade PATH...`: plan, then grade one notebook or a batch."""
    # --help, argument errors and unreadable files are answered before anything heavy
    # (Jupyter, torch) is imported.
    plan = make_plan(grading_parser().parse_args(argv))
    if plan.args.verbose:  # how each kernel starts, on stderr
        logging.basicConfig(level=logging.INFO, format="grade: %(message)s", stream=sys.stderr)
    from grader.kernel.launch import warm_up

    if plan.limits.profile:  # before a kernel starts
        _refuse_a_missing_profile(plan)
    warm_up(plan.limits)  # the kernels' template boots while torch and the suites load here
    if plan.args.watch:
        from grader.cli.watch import watch

        return watch(plan.args, plan.limits)
    return _grade_single(plan) if plan.notebook is not None else _grade_batch(plan)


def _refuse_a_missing_profile(plan: Plan) -> None:
    """`--profile` where a notebook's exercise has none: said before anything is graded.

    Raises:
        UsageError: naming the exercise, and those that have a profile.
    """
    from grader.core.errors import GraderError
    from grader.core.notebook import read_notebook
    from grader.suite.exercise import find_exercise, load_catalog, use_exercises

    use_exercises(plan.args.exercises)
    catalog = load_catalog()
    if plan.args.exercise in catalog:
        chosen = [catalog[plan.args.exercise]]
    else:
        chosen = []
        for path in [plan.notebook.path] if plan.notebook else plan.notebooks:
            try:
                notebook = plan.notebook or read_notebook(path)
                chosen.append(find_exercise(notebook, catalog, plan.args.exercise))
            except GraderError:  # graded as usual, which says why
                continue
    missing = next((e for e in chosen if e.profile is None), None)
    if missing is not None:
        have = ", ".join(sorted(e.id for e in catalog.values() if e.profile is not None))
        raise UsageError(
            f"--profile: exercise {missing.id} has no profile (exercises with one: "
            f"{have or 'none'}; `grade list` says which)"
        )


def make_plan(args: argparse.Namespace) -> Plan:
    """Check the flags together, read the notebook or list the batch, and refuse outputs
    that could not be written afterwards.

    Raises:
        UsageError: flags that do not go together, an unwritable output, a sandbox or GPU
            that is not there; NotebookError: the one notebook cannot be read.
    """
    from grader.kernel.sandbox import INSTALL_HINT, available, bwrap_path
    from grader.run.batch import collect, parse_shard, take_shard

    if args.watch:
        refuse_with_watch(args)
    shard = parse_shard(args.shard) if args.shard else None
    single = len(args.paths) == 1 and not Path(args.paths[0]).is_dir() and shard is None
    if single:
        from grader.core.notebook import read_notebook

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
        check_kernel_user(args.kernel_user)
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
        from grader.suite.checks import cuda_available

        ok, why = cuda_available()
        if not ok:
            raise UsageError(f"--device cuda: no GPU to grade on ({why})")
    candidate = None
    if args.format and args.report_file != "-":
        candidate = args.report_file or (
            f"{Path(args.paths[0]).stem}-report.{args.format}" if single else "candidate-reports"
        )
        (writable if single else writable_folder)(candidate, "candidate's report")
    for path, what in (
        (args.junit, "JUnit file"),
        (args.csv, "gradebook"),
        (args.profile_plot, "profile plot"),
    ):
        writable(path, what)
    if single:
        writable(args.gradescope, "Gradescope results")
    for folder, what in (
        (args.output, "reports"),
        (None if single else args.gradescope, "Gradescope results"),
    ):
        writable_folder(folder, what)
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
        warm=not args.cold,
    )
    if single:
        return Plan(args, limits, notebook=notebook, candidate_report=candidate)
    return Plan(args, limits, notebooks=notebooks, candidate_report=candidate)


def _grade_single(plan: Plan) -> int:
    args, limits, notebook = plan.args, plan.limits, plan.notebook
    from grader.core.results import Outcome, exit_code
    from grader.report.card import render, to_gradescope, to_json, to_junit
    from grader.run.pipeline import grade_file

    with _error_object(args):
        graded = grade_file(
            args.paths[0],
            exercise=args.exercise,
            limits=limits,
            exercises=args.exercises,
            notebook=notebook,
            began=plan.began,
        )
    report, cells = graded.report, graded.cells
    check()  # a stopping signal whose exception a library swallowed: no report
    write(args.junit, "JUnit file", to_junit(report))
    write(args.gradescope, "Gradescope results", to_gradescope(report))
    outcome = Outcome(report.notebook, report, exit_code=exit_code(report), cells=tuple(cells))
    _write_cohort_files(args, [outcome])
    with stdout_may_close():
        if args.format:
            _write_candidate_report(args, report, plan.candidate_report)
        if report.profile and args.profile_plot:
            from grader.run.profile import profile_svg

            write(args.profile_plot, "profile plot", profile_svg(report.profile))
        if args.json:
            print(to_json(report))
        elif args.report_file != "-" or not args.format:  # else stdout has the report
            console = Stdout(highlight=False)
            render(report, console)
            if report.profile:
                from grader.run.profile import render_profile

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
            from grader.report.card import encodable_data
            from grader.run.pipeline import cannot_grade

            entry = cannot_grade(args.paths[0], e).to_dict()
            with stdout_may_close():
                print(json.dumps(encodable_data(entry), indent=2))
        raise


def _write_candidate_report(
    args: argparse.Namespace, report: GradeReport, path: str | None
) -> None:
    """`--format`: the candidate's report (`--reveal`) to `path`, or stdout when None."""
    from grader.report.card import for_candidate, to_html, to_markdown

    shown = report if args.reveal is None else for_candidate(report, args.reveal)
    text = to_markdown(shown) if args.format == "md" else to_html(shown)
    if path is None:
        print(text)
    else:
        write(path, "candidate's report", text)


def _grade_batch(plan: Plan) -> int:
    args, limits, notebooks = plan.args, plan.limits, plan.notebooks
    import time

    from grader.kernel.launch import warm_up
    from grader.report import to_junit_batch, write_gradescope_folder
    from grader.report.cohort import graded_root, make_cohort, to_json_batch
    from grader.report.progress import Progress, render_summary
    from grader.run.batch import grade_all, worst
    from grader.suite.exercise import load_catalog, use_exercises

    began = time.monotonic()
    warm_up(limits, for_children=True)  # the workers' template boots while the suites load
    use_exercises(args.exercises)
    catalog = load_catalog()  # before the workers fork: they inherit it, and torch
    if args.exercise and args.exercise not in catalog:
        known = ", ".join(sorted(catalog)) or "none"
        raise UsageError(f"--exercise {args.exercise}: unknown exercise (known: {known})")
    jobs = args.jobs or len(os.sched_getaffinity(0))
    with Progress(Console(stderr=True, highlight=False), len(notebooks)) as progress:
        outcomes = grade_all(notebooks, jobs, limits, catalog, args.exercise, progress)
    check()  # a stopping signal whose exception a library swallowed: no report
    write(args.junit, "JUnit file", to_junit_batch(outcomes))
    if args.gradescope:
        write_folder(
            args.gradescope,
            "Gradescope results",
            lambda o, f: write_gradescope_folder(o, f, graded_root(args.paths)),
            outcomes,
        )
    cohort = make_cohort(outcomes)
    _write_cohort_files(args, outcomes, cohort)
    with stdout_may_close():
        if args.format:
            from grader.report import slugs

            names = slugs(outcomes, graded_root(args.paths))
            if plan.candidate_report:
                Path(plan.candidate_report).mkdir(exist_ok=True)  # its parent was checked
            for outcome in outcomes:
                if outcome.report is None:
                    continue
                name = f"{names[outcome.notebook]}.{args.format}"
                folder = plan.candidate_report
                _write_candidate_report(args, outcome.report, folder and str(Path(folder) / name))
        if args.json:
            print(to_json_batch(outcomes, cohort))
        else:
            console = Stdout(highlight=False)
            render_summary(outcomes, console, time.monotonic() - began, cohort)
    return worst(outcomes)


def _write_cohort_files(
    args: argparse.Namespace, outcomes: list[Outcome], cohort: Cohort | None = None
) -> None:
    """The outputs a single notebook and a batch share: --csv and --output."""
    from grader.report import to_csv, write_output_dir
    from grader.report.cohort import graded_root

    write(args.csv, "gradebook", to_csv(outcomes) if args.csv else "")
    if args.output:
        write_folder(
            args.output,
            "reports",
            lambda o, f: write_output_dir(o, f, cohort, graded_root(args.paths)),
            outcomes,
        )

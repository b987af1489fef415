"""The maintainers' and cohort subcommands: `grade list`, `merge`, `build`, `new`, `hints`
and `gradescope`. Each takes its own arguments and returns an exit code."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rich.console import Console

from grader.cli.args import Parser, count, exercises_flag
from grader.cli.output import (
    Stdout,
    stdout_may_close,
    writable,
    writable_folder,
    write,
    write_folder,
)
from grader.core.errors import ExitCode, UsageError
from grader.core.limits import Limits
from grader.tools.gradescope import DEFAULT_OUTPUT


def list_command(argv: list[str]) -> int:
    from grader.run.catalog import render_catalog
    from grader.suite.exercise import use_exercises

    p = Parser(prog="grade list", description="Print the catalog of exercises.")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="TAG",
        help="only the exercises with this topic tag (repeat: with every one of them)",
    )
    p.add_argument(
        "--max-minutes",
        type=int,
        metavar="N",
        help="only the exercises whose independent solution took at most N minutes to write",
    )
    exercises_flag(p)
    args = p.parse_args(argv)
    use_exercises(args.exercises)
    with stdout_may_close():
        render_catalog(
            Stdout(highlight=False), as_json=args.json, tags=args.tag, max_minutes=args.max_minutes
        )
    return ExitCode.FULL_MARKS


def merge_command(argv: list[str]) -> int:
    from grader.report import merge_texts

    p = Parser(
        prog="grade merge",
        description="Combine the parts that `grade --shard I/N` wrote (all JSON, all CSV or "
        "all JUnit XML) into what one run over every notebook would have written.",
    )
    p.add_argument("parts", nargs="+", metavar="PART", help="the shards' files, of one kind")
    p.add_argument("-o", "--output", metavar="PATH", help="write there (default: stdout)")
    p.add_argument(
        "--pages",
        metavar="DIR",
        help="JSON parts: also write the cohort's pages into DIR (index.html, each notebook's "
        "card, cohort.json and the CSVs, as --output writes them, without executed notebooks)",
    )
    args = p.parse_args(argv)
    writable(args.output, "the merged file")
    writable_folder(args.pages, "the cohort's pages")
    parts = []
    for part in args.parts:
        try:
            parts.append((part, Path(part).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as e:
            problem = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise UsageError(f"{part}: cannot read: {problem or e}") from None
    kind, merged = merge_texts(parts)
    if args.pages:
        if kind != "json":
            raise UsageError("merge --pages: the pages are made from JSON parts (grade --json)")
        from grader.report.folders import write_output_dir
        from grader.report.merge import merged_cohort

        outcomes, cohort = merged_cohort(parts)
        write_folder(
            args.pages,
            "the cohort's pages",
            lambda o, f: write_output_dir(o, f, cohort, executed=False),
            outcomes,
        )
    if args.output:
        write(args.output, "the merged file", merged)
    else:
        with stdout_may_close():
            sys.stdout.write(merged if merged.endswith("\n") else merged + "\n")
    return ExitCode.FULL_MARKS


def build_command(argv: list[str]) -> int:
    from grader.tools.build import build_project

    p = Parser(
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
    p.add_argument("-j", "--jobs", type=count, default=0, metavar="N", help="hint workers")
    args = p.parse_args(argv)
    lines, stale = build_project(Path(args.root), args.check, args.jobs)
    said = [line for line in lines if not line.startswith(("warning: ", "error: "))]
    for line in lines:
        if line.startswith(("warning: ", "error: ")):
            print(f"grade build: {line}", file=sys.stderr)
    if args.check and stale:
        print("\n".join(said), file=sys.stderr)
    elif said:
        with stdout_may_close():
            print("\n".join(said))
    return ExitCode.NOT_FULL_MARKS if stale else ExitCode.FULL_MARKS


def new_command(argv: list[str]) -> int:
    from grader.suite.exercise import builtin_exercises
    from grader.tools.build import build_project
    from grader.tools.new import write_skeleton

    p = Parser(
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
    lines = [f"wrote {path}" for path in write_skeleton(root, args.exercise)]
    built, _ = build_project(root, check=False)  # all the work first: a reader may leave
    builtin = (root / "exercises").resolve() == builtin_exercises()
    flag = "" if builtin else f" --exercises {root / 'exercises'}"
    lines += [line for line in built if not line.startswith(("warning: ", "error: "))]
    lines.append(
        f"next: edit exercises/{args.exercise}/suite.py, corpus.py and "
        f"solutions/{args.exercise}.ipynb, then `grade build`; "
        f"grade a notebook with `grade NOTEBOOK{flag}`"
    )
    for line in built:
        if line.startswith(("warning: ", "error: ")):
            print(f"grade new: {line}", file=sys.stderr)
    with stdout_may_close():
        print("\n".join(lines))
    return ExitCode.FULL_MARKS


def hints_command(argv: list[str]) -> int:
    p = Parser(
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
    p.add_argument("-j", "--jobs", type=count, default=0, metavar="N", help="workers")
    p.add_argument(
        "--measure",
        action="store_true",
        help="grade nothing: say how far each corpus's feature mutants spread over the levels "
        "and how precise its hints are, from the hints.json already written",
    )
    exercises_flag(p)
    args = p.parse_args(argv)
    from grader.suite.exercise import load_catalog, use_exercises
    from grader.tools.hints import corpus_warnings, measure, mutant_hints, write_hints
    from grader.verdict.diagnosis import HINTS_FILE

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
        if not args.measure and not solution.is_file():
            raise UsageError(f"{solution}: no such file (the exercise's solution)")
    jobs = args.jobs or len(os.sched_getaffinity(0))
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for name in chosen:
        if not args.measure:
            solution = Path(args.root) / "solutions" / f"{name}.ipynb"
            path = write_hints(catalog[name], solution, jobs, Limits())
            with stdout_may_close():
                print(f"{name}: wrote {path}")
        folder = catalog[name].folder
        if args.measure and (folder is None or not (folder / HINTS_FILE).is_file()):
            raise UsageError(f"{name}: no {HINTS_FILE} to measure: run `grade hints {name}`")
        with stdout_may_close():
            print("\n".join(measure(catalog[name]).lines(name)))
        for line in corpus_warnings(catalog[name]):
            err.print(f"grade hints: warning: {line}", markup=False)
    return ExitCode.FULL_MARKS


def autograder_parser() -> Parser:
    """Arguments of `grade gradescope`."""
    p = Parser(
        prog="grade gradescope",
        description="Write a Gradescope autograder zip that grades uploads of one exercise.",
    )
    p.add_argument("exercise", metavar="EXERCISE", help="the exercise to grade (see `grade list`)")
    p.add_argument(
        "-o",
        "--output",
        default=DEFAULT_OUTPUT,
        metavar="PATH",
        help=f"where to write the zip (default {DEFAULT_OUTPUT})",
    )
    p.add_argument(
        "--exercises",
        metavar="DIR",
        help="also load (and bundle) the exercises in DIR, in front of the built-in ones "
        "(default: $GRADER_EXERCISES)",
    )
    return p


def gradescope_command(argv: list[str]) -> int:
    """`grade gradescope EXERCISE [-o PATH] [--exercises DIR]`: write the zip, say so.

    Raises:
        UsageError: bad arguments, unknown or broken exercise, unwritable output, or a
            grader not installed from a checkout.
    """
    from grader.tools.gradescope import build_autograder, check_writable

    args = autograder_parser().parse_args(argv)
    output = Path(args.output)
    check_writable(output)
    manifest = build_autograder(args.exercise, output, exercises=args.exercises)
    print(
        f"wrote {output}: {manifest.exercise} ({manifest.max_score:g} points), "
        f"grader {manifest.grader_version}, torch {manifest.torch} (CPU); "
        "upload it in Gradescope under Configure Autograder > Zip file upload"
    )
    return ExitCode.FULL_MARKS

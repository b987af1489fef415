"""What a batch shows while it runs (a live display on a terminal, one line per notebook
elsewhere) and the summary table it ends with."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.measure import Measurement
from rich.padding import Padding
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from grader.core.outcomes import Status
from grader.core.results import Outcome
from grader.core.text import printable
from grader.report.card import labelled_bug, own_failure
from grader.run.batch import Events

if TYPE_CHECKING:
    from grader.report.cohort import Cohort

_FLIGHT_ROWS = 8  # notebooks in flight listed by name; the rest are counted


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


class Progress(Events):
    """The batch's progress on `console` (stderr): on a terminal, a live display (done,
    running, left, elapsed, the notebooks in flight) redrawn a few times a second by the
    pool's own loop (no thread of its own: the pool forks workers); elsewhere, a line per
    notebook as it finishes."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self.done = 0
        self.began = time.monotonic()
        self.flight: dict[int, tuple[str, float]] = {}
        self.live: Live | None = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(self._view(), console=self.console, auto_refresh=False, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def started(self, index: int, notebook: str) -> None:
        self.flight[index] = (notebook, time.monotonic())
        self.tick()

    def finished(self, index: int, outcome: Outcome) -> None:
        self.flight.pop(index, None)
        self.done += 1
        if self.live is None:
            line = f"[{self.done}/{self.total}] {outcome.notebook}: {_score(outcome)}"
            if outcome.report is not None:
                line += f" ({outcome.report.duration_s:.1f} s)"
            self.console.print(printable(line), markup=False, highlight=False)
        self.tick()

    def tick(self) -> None:
        if self.live is not None:
            self.live.update(self._view(), refresh=True)

    def _view(self) -> RenderableType:
        now = time.monotonic()
        left = self.total - self.done - len(self.flight)
        head = Text.assemble(
            ("grading ", "bold"),
            f"{self.done}/{self.total} done · {len(self.flight)} running · {left} left · "
            f"{_clock(now - self.began)}",
        )
        bar = ProgressBar(total=max(1, self.total), completed=self.done, width=40)
        rows = [
            Text(f"  {_clock(now - since)}  ") + Text(printable(notebook), style="dim")
            for notebook, since in sorted(self.flight.values(), key=lambda f: f[1])
        ]
        if len(rows) > _FLIGHT_ROWS:
            rows = [*rows[:_FLIGHT_ROWS], Text(f"  … and {len(rows) - _FLIGHT_ROWS} more")]
        return Group(head, bar, *rows)


def _score(outcome: Outcome) -> str:
    report = outcome.report
    if report is None:
        return "could not grade"
    return f"{report.score:g}/{report.max_score:g}"


def row_trouble(outcome: Outcome) -> str:
    """What went wrong with one notebook, in a line ("" for full marks): why it could not
    be graded, no credit, the likely bug, what to read first, the root cause, how many
    tests did not pass and the first one's verdict (its message is on the notebook's card),
    or a cell of its own that failed."""
    report = outcome.report
    if report is None:  # the row names the notebook already
        return outcome.error.removeprefix(f"{outcome.notebook}: ")
    if any(f.voids for f in report.integrity):
        return "no credit: the notebook reached for the grader itself"
    missed = [t for t in report.tests if t.status != Status.PASSED]
    if report.hints:
        return f"{len(missed)} not passed; {labelled_bug(report)}"
    if report.headlines:
        return report.headlines[0]
    cause = report.root_cause
    if cause:
        return f"cell {cause.cell}: {cause.message or cause.kind} ({cause.blocked} tests blocked)"
    if missed:
        return f"{len(missed)} not passed; first: {missed[0].id} ({missed[0].verdict})"
    if report.own_failures:
        return own_failure(report.own_failures[0])
    return ""


class Clipped:
    """`text` wrapped to the width it is given and cut to `lines` lines, the last one
    ending in "…" when something was cut."""

    def __init__(self, text: Text, lines: int = 2) -> None:
        self.text = text
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        wrapped = list(self.text.wrap(console, width, overflow="fold"))
        if len(wrapped) > self.lines:
            wrapped = wrapped[: self.lines]
            last = wrapped[-1]
            space = last.plain.rfind(" ", 0, width - 1)  # cut between words where it can
            last.truncate(space if space > 0 else width - 1)
            last.rstrip()
            last.append("…")
        yield from wrapped

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text)


def render_summary(
    outcomes: list[Outcome], console: Console, seconds: float, cohort: Cohort | None = None
) -> None:
    """One row per notebook (score, level reached, duration; under the notebook, what went
    wrong, in at most two lines), the totals, then each exercise's figures (scores as
    percentages of its own maximum: exercises with other maxima are never averaged
    together) and the pairs of similar code."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("notebook: what went wrong", overflow="fold")
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("level", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    for outcome in outcomes:
        report = outcome.report
        style = "green" if outcome.exit_code == 0 else "red" if outcome.exit_code >= 2 else ""
        notebook: list[RenderableType] = [Text(printable(outcome.notebook))]
        why = printable(row_trouble(outcome))
        if why:
            notebook.append(Padding(Clipped(Text(why, style="dim")), (0, 0, 0, 2)))
        table.add_row(
            Group(*notebook),
            Text(_score(outcome) if report else "error", style=style),
            Text(str(report.level_reached) if report else "–"),
            Text(f"{report.duration_s:.1f} s" if report else "–"),
        )
    full = sum(o.exit_code == 0 for o in outcomes)
    lost = sum(o.exit_code == 1 for o in outcomes)
    failed = len(outcomes) - full - lost
    totals = Text.assemble(
        (f"{len(outcomes)} notebooks", "bold"),
        f": {full} full marks, {lost} lost points, {failed} could not be graded",
        f" · {seconds:.1f} s",
    )
    console.rule("Cohort")
    console.print(Group(table, totals))
    for line in _cohort_lines(cohort) if cohort is not None else []:
        console.print(line)
    console.rule()


def _cohort_lines(cohort: Cohort) -> list[RenderableType]:
    """A line per exercise (its notebooks, mean and median as percentages of its maximum,
    full marks, the hardest test), then the similar pairs."""
    lines: list[RenderableType] = []
    for e in cohort.exercises:
        line = Text.assemble(
            (e.id, "bold"),
            f": {e.notebooks} notebook{'s' * (e.notebooks != 1)}, mean {e.mean_percent:.0f}% "
            f"({e.mean_score:.1f} of {e.max_score:g}), median {e.median_percent:.0f}%, "
            f"{e.full_marks} full marks",
        )
        hardest = next((t for t in e.tests if t.passed < t.taken), None)
        if hardest is not None:
            line.append(f"; hardest test {hardest.id} ({hardest.passed} of {hardest.taken})")
        lines.append(line)
    percent = f"{100 * cohort.threshold:.0f}%"
    if cohort.pairs:
        lines.append(
            Text(
                f"similar code ({percent} or more; --output's index.html shows the lines):", "bold"
            )
        )
        for pair in cohort.pairs:
            lines.append(
                Text(
                    printable(
                        f"  {pair.similarity:>4.0%}  {pair.a}  ~  {pair.b}  ({pair.exercise})"
                    )
                )
            )
    else:
        compared = sum(e.compared for e in cohort.exercises)
        lines.append(
            Text(f"similar code: no pair at {percent} or more ({compared} notebooks compared)")
        )
    return lines

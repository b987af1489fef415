"""What a batch shows while it runs (a live display on a terminal, one line per notebook
elsewhere) and the summary table it ends with."""

from __future__ import annotations

import time

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from grader.batch import Events
from grader.results import Outcome
from grader.text import printable

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


def trouble(outcome: Outcome) -> str:
    """What went wrong with one notebook, in a line ("" for full marks)."""
    report = outcome.report
    if report is None:
        return outcome.error
    if any(f.voids for f in report.integrity):
        return "no credit: the notebook reached for the grader itself"
    if report.headlines:
        return report.headlines[0]
    if report.cell_errors:
        cell = report.cell_errors[0]
        return f"cell {cell.cell}: {cell.message or cell.kind}"
    missed = [t for t in report.tests if t.status != "passed"]
    if not missed:
        return ""
    return (
        f"{len(missed)} not passed; first: {missed[0].id}: {missed[0].message or missed[0].status}"
    )


def render_summary(outcomes: list[Outcome], console: Console, seconds: float) -> None:
    """One row per notebook (score, level reached, duration, what went wrong), then the
    totals."""
    table = Table(box=box.SIMPLE_HEAD, expand=True)
    longest = max((len(o.notebook) for o in outcomes), default=8)
    table.add_column("notebook", overflow="fold", width=min(longest, 32))
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("level", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("what went wrong", overflow="fold", ratio=1)
    for outcome in outcomes:
        report = outcome.report
        style = "green" if outcome.exit_code == 0 else "red" if outcome.exit_code >= 2 else ""
        table.add_row(
            Text(printable(outcome.notebook)),
            Text(_score(outcome) if report else "error", style=style),
            Text(str(report.level_reached) if report else "–"),
            Text(f"{report.duration_s:.1f} s" if report else "–"),
            Text(printable(trouble(outcome))),
        )
    full = sum(o.exit_code == 0 for o in outcomes)
    lost = sum(o.exit_code == 1 for o in outcomes)
    failed = len(outcomes) - full - lost
    graded = [o.report for o in outcomes if o.report is not None]
    totals = Text.assemble(
        (f"{len(outcomes)} notebooks", "bold"),
        f": {full} full marks, {lost} lost points, {failed} could not be graded",
    )
    if graded:
        mean = sum(r.score for r in graded) / len(graded)
        totals.append(f" · mean score {mean:.1f} of the {len(graded)} graded")
    totals.append(f" · {seconds:.1f} s")
    console.rule("Cohort")
    console.print(Group(table, totals))
    console.rule()

"""Rendering a GradeReport: the rich report card, JSON, JUnit XML, Gradescope's results.json
and Markdown."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from grader.core.outcomes import UNDEFINED_NAME, Status
from grader.core.records import Finding, Kind
from grader.core.results import CheckResult, GradeReport, Problem, RootCause
from grader.core.text import encodable, printable, xml_safe

_SEVERITY = (Kind.HIDDEN, Kind.TAMPER, Kind.BUILTIN, Kind.MACHINERY, Kind.ENVIRONMENT, Kind.NOTE)
NOTES_TITLE = "Integrity notes (what the notebook did; no points taken)"

_STYLE = {
    Status.PASSED: "green",
    Status.FAILED: "red",
    Status.ERROR: "red",
    Status.TIMEOUT: "yellow",
    Status.CRASHED: "magenta",
    Status.NOT_IMPLEMENTED: "dim",
    Status.SKIPPED: "dim",
}
_LABEL = {Status.NOT_IMPLEMENTED: "not implemented"}


def _points(value: float) -> str:
    return f"{value:g}"


def _literal(text: str, style: str = "") -> Text:
    """Candidate text for the card: never markup, never a terminal control."""
    return Text(printable(text), style=style)


def render(report: GradeReport, console: Console) -> None:
    """Print the report card: what to read first (the root cause, the likely bug), the
    levels, what did not pass (identical failures on one row), the notebook's own cells.
    Everything on it is a Text (not markup), and every string that may come from the
    candidate goes through `printable`."""
    versions = (
        f"{report.duration_s:.1f} s   (torch {report.torch_version}"
        f"{'' if report.device == 'cpu' else ', on ' + report.device}"
        f"{', sandboxed' if report.sandboxed else ', NOT sandboxed: integrity checks best effort'}"
        f"{', kernel as ' + report.kernel_user if report.kernel_user else ''})"
    )
    parts: list[RenderableType] = [
        _hanging(
            [("Exercise", f"{report.exercise} — {report.title}"),
             ("Notebook", report.notebook), ("Duration", versions)],
            "bold",
        )
    ]  # fmt: skip
    if report.root_cause:
        parts.append(_root_cause(report.root_cause, _count(report)))
    parts += [
        _hanging([("!", Text(printable(line), style="bold yellow"))], "bold yellow", gap=1)
        for line in _headlines(report)
    ]
    if report.hints:
        hints = [("or" if n else "Likely bug", hint) for n, hint in enumerate(report.hints)]
        why = Text(f"({_hints_from(report)})", style="dim")
        parts.append(_hanging([*hints, ("", why)], "bold cyan"))
    for own in report.own_failures:
        parts.append(_own_failure(own))
    findings = [f for f in report.integrity if f.kind != Kind.NOTE]
    notes = [f for f in report.integrity if f.kind == Kind.NOTE]
    if findings:
        parts.append(_integrity(findings, "Integrity (what the grader's watch found)"))
    if notes:
        parts.append(_integrity(notes, NOTES_TITLE))
    parts.append(_levels(report))
    rows = failure_rows(report)
    if rows:
        table = Table(
            title="What did not pass", title_justify="left", box=box.SIMPLE_HEAD, expand=True
        )
        table.add_column("lvl", justify="right", no_wrap=True)
        # A ratio column's width is also the least it gets: a test id is never cut.
        table.add_column("test", overflow="fold", ratio=2, width=_longest_word(rows, console))
        table.add_column("why", overflow="fold", ratio=3)
        for row in rows:
            test = _literal(row.title)
            if row.detail:
                test.append("\n" + printable(row.detail), style="dim")
            why = Text(row.verdict, style=_STYLE.get(row.status, ""))
            if row.message:
                why.append(f": {printable(row.message)}")
            table.add_row(row.levels, test, why)
        parts.append(table)
        if any(row.public for row in rows):
            parts.append(Text(f"(public): {PUBLIC}", style="dim"))
    if report.cell_errors:
        cells = Table(
            title="The notebook's own cells", title_justify="left", box=box.SIMPLE_HEAD, expand=True
        )
        cells.add_column("cell", justify="right", no_wrap=True)
        cells.add_column("line", justify="right", no_wrap=True)
        cells.add_column("what", no_wrap=True)
        cells.add_column("message", overflow="fold")
        for c in report.cell_errors:  # cut output has its own table below
            line = str(c.line) if c.line else ""
            cells.add_row(str(c.cell), line, _literal(c.kind), _literal(c.message))
        parts.append(cells)
    if report.cut_output:
        cut = Table(
            title="Output cut (what the cell printed first)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            expand=True,
        )
        rows_cut = [
            (str(c.cell), f"{c.cut:,} chars", printable(c.start.replace("\n", "⏎ ")))
            for c in report.cut_output
        ]
        width = max(len(row[1]) for row in rows_cut)  # keep the counts whole on narrow terminals
        cut.add_column("cell", justify="right", no_wrap=True, min_width=4)
        cut.add_column("cut", justify="right", no_wrap=True, min_width=width)
        cut.add_column("began with", overflow="ellipsis", no_wrap=True, ratio=1)
        for row_cut in rows_cut:
            cut.add_row(*(Text(cell) for cell in row_cut))
        parts.append(cut)
    for note in report.notes:
        parts.append(_hanging([("note:", Text(printable(note), style="dim"))], "dim", gap=1))
    style = "bold green" if report.full_marks else "bold"
    parts.append(
        Text.assemble(
            ("Score ", "bold"),
            (f"{_points(report.score)}/{_points(report.max_score)}", style),
            ("   Level reached ", "bold"),
            printable(_reached(report)),
        )  # fmt: skip
    )
    console.rule("Grade report")
    console.print(Group(*parts))
    console.rule()


def _hints_from(report: GradeReport) -> str:
    if len(report.hints) == 1:
        return "the hidden tests fail the way they do for this known bug of the exercise"
    return "the hidden tests fail the way they do for each of these known bugs of the exercise"


PUBLIC = "also in the candidate's self-check (the notebook's last cell runs it)"


def _root_cause(cause: RootCause, tests: int) -> Group:
    """'Root cause  cell 2, line 1: ModuleNotFoundError: ...' with the line's text and how
    many tests could not run because of it."""
    lines: list[tuple[str, str | Text]] = [("Root cause", _cause_line(cause))]
    if cause.source:
        lines.append(("", Text(f"> {printable(cause.source)}", style="dim")))
    lines.append(("", _blocked(cause, tests)))
    return _hanging(lines, "bold red")


def own_failure(own: RootCause) -> str:
    """'your self-check failed: cell 8, line 31: AssertionError: ...' (or, for another
    cell, 'cell 9 failed, line 2: ...'), for a cell that blocked no hidden test."""
    if own.self_check:
        return f"your self-check failed: {_cause_line(own)}"
    return f"{_cause_line(own)} (no hidden test needed this cell)"


def _own_failure(own: RootCause) -> Group:
    """A cell that failed without blocking a hidden test, after the diagnosis: the
    candidate's own check, not a root cause."""
    label = "Self-check" if own.self_check else "Also failed"
    lines: list[tuple[str, str | Text]] = [(label, own_failure(own))]
    if own.source:
        lines.append(("", Text(f"> {printable(own.source)}", style="dim")))
    return _hanging(lines, "bold yellow")


def _hanging(lines: list[tuple[str, str | Text]], style: str, gap: int = 2) -> Group:
    """Labelled lines ('Notebook  x.ipynb'): labels right-aligned in `style`, each value
    wrapped under itself, never under its label. Values are candidate text (made
    printable) unless already a Text. One grid per line, so that no line is padded to
    the longest."""
    width = max(len(label) for label, _ in lines)
    grids = []
    for label, value in lines:
        grid = Table.grid(padding=(0, gap))
        grid.add_column(justify="right", no_wrap=True, style=style, width=width)
        grid.add_column(overflow="fold")
        grid.add_row(label, value if isinstance(value, Text) else _literal(value))
        grids.append(grid)
    return Group(*grids)


def _longest_word(rows: list[Row], console: Console) -> int:
    """The width the test column needs to show every test id whole (at most half the
    console: a longer name folds)."""
    words = [w for row in rows for w in printable(f"{row.title} {row.detail}").split()]
    return min(max(map(len, words), default=1), console.width // 2)


def _count(report: GradeReport) -> int:
    """How many tests the suite has (a candidate's report lists fewer)."""
    return sum(level.total for level in report.levels)


def _cause_line(cause: RootCause) -> str:
    where = f"cell {cause.cell}" + (f", line {cause.line}" if cause.line else "")
    return f"{where}: {cause.message or cause.kind}"


def _blocked(cause: RootCause, tests: int) -> str:
    if not cause.blocked:
        return "no test depended on it: every test still ran"
    return f"{cause.blocked} of {tests} tests could not run because of it"


def _headlines(report: GradeReport) -> list[str]:
    """The report's headlines less the one the root cause already says."""
    cause = report.root_cause
    if cause is None:
        return list(report.headlines)
    return [h for h in report.headlines if not h.startswith(f"cell {cause.cell}:")]


def _levels(report: GradeReport) -> Table:
    levels = Table(title="Levels", title_justify="left", box=box.SIMPLE_HEAD)
    levels.add_column("#", justify="right")
    levels.add_column("level")
    levels.add_column("tests", justify="right")
    levels.add_column("points", justify="right")
    for level in report.levels:
        ok = level.passed == level.total
        style = "green" if ok else ("red" if level.passed < level.total else "")
        levels.add_row(
            str(level.number), _literal(level.name), Text(f"{level.passed}/{level.total}", style=style),
            f"{_points(level.score)}/{_points(level.max_score)}",
        )  # fmt: skip
    return levels


@dataclass(frozen=True)
class Row:
    """One row of "What did not pass": one test, or every test that failed the same way."""

    levels: str  # "3", or "1-8" for a group
    title: str  # "attention_shapes (public)", or "15 tests" / "15 tests need X" (a group)
    detail: str  # the test's description, or the group's first names ("a, b, c +12 more")
    status: Status
    verdict: str  # CheckResult.verdict
    message: str  # without the verdict repeated
    public: int  # how many of its tests are public
    tests: tuple[str, ...]


_NAMES_SHOWN = 3


def failure_rows(report: GradeReport) -> list[Row]:
    """What did not pass, in test order, identical failures on one row: the same verdict
    and message (tests blocked by one cell count as the same, whatever name they miss)."""
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for t in report.tests:
        if t.status == Status.PASSED:
            continue
        key = (t.verdict, "" if t.problem == Problem.BLOCKED else _why(t)[1])
        groups.setdefault(key, []).append(t)
    rows = []
    for (verdict, message), tests in groups.items():
        first = tests[0]
        if len(tests) == 1:
            title = first.id + ("" if first.hidden else " (public)")
            rows.append(
                Row(str(first.level), title, first.description, first.status, verdict,
                    _why(first)[1], int(not first.hidden), (first.id,))
            )  # fmt: skip
            continue
        low, high = min(t.level for t in tests), max(t.level for t in tests)
        names = [t.id for t in tests]
        more = f" +{len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
        detail = ", ".join(names[:_NAMES_SHOWN]) + more
        public = sum(not t.hidden for t in tests)
        if public:
            detail += f" ({public} public)"
        title = f"{len(tests)} tests"
        if first.problem == Problem.BLOCKED:
            missing = sorted({_missing(t) for t in tests} - {""})
            message = f"they need {', '.join(missing)}, defined by a cell that failed"
        elif first.status == Status.NOT_IMPLEMENTED:
            title, message = f"{len(tests)} tests need {message}", ""
        rows.append(
            Row(str(low) if low == high else f"{low}-{high}", title, detail, first.status,
                verdict, message, public, tuple(names))
        )  # fmt: skip
    return rows


def _missing(t: CheckResult) -> str:
    match = UNDEFINED_NAME.match(t.message)
    return match[1] if match else ""


def _integrity(findings: list[Finding], title: str) -> Table:
    """What the grader's guard found, worst first (candidate text stays literal)."""
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        expand=True,
    )
    table.add_column("kind", no_wrap=True)
    table.add_column("where", no_wrap=True)
    table.add_column("what", overflow="fold", ratio=1)
    for f in sorted(findings, key=lambda f: _SEVERITY.index(f.kind)):
        where = f"cell {f.cell}" + (f", line {f.line}" if f.line else "") if f.cell else ""
        style = "bold red" if f.voids else "dim" if f.kind == Kind.NOTE else "yellow"
        table.add_row(_literal(f.kind, style=style), Text(where), _literal(f.message))
    return table


def _why(t: CheckResult) -> tuple[str, str]:
    """(the status as a person reads it, the message without that label repeated)."""
    label = _LABEL.get(t.status, t.status)
    return label, t.message.removeprefix(f"{label}: ")


def _reached(report: GradeReport) -> str:
    if not report.level_reached:
        return "none"
    return f"level {report.level_reached} ({report.level_reached_name})"


def encodable_data(value: object) -> object:
    """`value` (plain data: dicts, lists, strings, numbers) with every string made
    encodable as UTF-8."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {encodable_data(key): encodable_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encodable_data(item) for item in value]
    return value


def to_json(report: GradeReport) -> str:
    """The `--json` document: one object."""
    return json.dumps(encodable_data(report.to_dict()), indent=2)


def to_junit(report: GradeReport) -> str:
    """JUnit XML: one testsuite, one testcase per hidden test, for CI dashboards. Well-formed
    for any candidate text: what XML 1.0 forbids is written as an escape."""
    return ET.tostring(junit_suite(report), encoding="unicode", xml_declaration=True)


def junit_suite(report: GradeReport) -> ET.Element:
    """The `<testsuite>` of `to_junit`, named after the exercise: `<properties>` saying what
    was graded and with what, then one testcase per hidden test. A stub still raising
    NotImplementedError is a `<failure type="not_implemented">` (the test is required); a
    test not run (`skipped`: after timeouts or crashes in a row, or past the time bound)
    has no verdict and is `<skipped>`, its cause being an `<error>` of its own: a test's,
    or, when no test ran into it (the time ran out in the notebook's cells), one more
    testcase, `tests_not_run`."""
    counts = {s: sum(t.status == s for t in report.tests) for s in _STYLE}
    errors = counts[Status.ERROR] + counts[Status.TIMEOUT] + counts[Status.CRASHED]
    # Tests not run with no cause among them (the time ran out in the notebook's cells):
    # the cause is an error of its own, so that no dashboard reads the run as green.
    uncaused = next((t for t in report.tests if t.status == Status.SKIPPED), None)
    uncaused = uncaused if uncaused and not errors else None
    suite = ET.Element(
        "testsuite",
        name=xml_safe(report.exercise),
        tests=str(len(report.tests) + bool(uncaused)),
        failures=str(counts[Status.FAILED] + counts[Status.NOT_IMPLEMENTED]),
        errors=str(errors + bool(uncaused)),
        skipped=str(counts[Status.SKIPPED]),
        time=f"{report.duration_s:.3f}",
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in _properties(report).items():
        ET.SubElement(properties, "property", name=name, value=xml_safe(value))
    for t in report.tests:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=xml_safe(f"{report.exercise}.{t.level_name}"),
            name=xml_safe(t.id),
            time=f"{t.duration_s:.3f}",
        )
        if t.status == Status.FAILED:
            ET.SubElement(case, "failure", message=xml_safe(t.message), type="failed")
        elif t.status == Status.NOT_IMPLEMENTED:
            message = ": ".join(filter(None, _why(t)))  # "not implemented: <the stub>"
            ET.SubElement(case, "failure", message=xml_safe(message), type="not_implemented")
        elif t.status in (Status.ERROR, Status.TIMEOUT, Status.CRASHED):
            ET.SubElement(case, "error", message=xml_safe(f"{t.status}: {t.message}"))
        elif t.status == Status.SKIPPED:
            ET.SubElement(case, "skipped", message=xml_safe(t.message or t.status))
    if uncaused is not None:
        case = ET.SubElement(
            suite, "testcase", classname=xml_safe(f"{report.exercise}.notebook"),
            name="tests_not_run", time="0.000",
        )  # fmt: skip
        ET.SubElement(case, "error", message=xml_safe(uncaused.message or "tests not run"))
    summary = {
        "score": report.score,
        "max_score": report.max_score,
        "notebook": report.notebook,
        "headlines": report.headlines,
        "root_cause": report.to_dict()["root_cause"],
        "hints": report.hints,
        "own_failures": report.to_dict()["own_failures"],
        "integrity": [f.to_dict() for f in report.integrity],
    }
    # json.dumps writes ASCII (every control character escaped): safe in XML.
    ET.SubElement(suite, "system-out").text = json.dumps(encodable_data(summary))
    return suite


def _properties(report: GradeReport) -> dict[str, str]:
    """The notebook, its result, and what graded it (`GradeReport.graded_with`)."""
    graded_with = {k: v for k, v in report.graded_with.items() if k != "exercise"}
    return {
        "notebook": report.notebook,
        "exercise": report.exercise,
        "score": _points(report.score),
        "max_score": _points(report.max_score),
        "level_reached": str(report.level_reached),
        **graded_with,
    }


def to_gradescope(report: GradeReport) -> str:
    """Gradescope's autograder `results.json`: one entry per hidden test. The public tests
    are visible at once; the hidden ones once grades are published (`after_published`).
    The likely bug is in the `output` the student sees at once when the public tests alone
    show it (as in `for_candidate`); else in each failing hidden test's output."""
    public_hint = bool(for_candidate(report, 0).hints)
    tests = []
    for n, t in _numbered(report):
        why = "" if t.status == Status.PASSED else ": ".join(filter(None, _why(t)))
        if why and report.hints and t.hidden and not public_hint:
            why += f"\n{labelled_bug(report)}"
        tests.append(
            {
                "name": f"{t.level_name}: {t.id}",
                "number": f"{t.level}.{n}",
                "score": t.score,
                "max_score": t.max_score,
                "status": "passed" if t.status == Status.PASSED else "failed",
                "output": printable(why),
                "tags": [t.level_name],
                "visibility": "after_published" if t.hidden else "visible",
            }
        )
    cause = report.root_cause
    lines = (
        [f"Root cause: {_cause_line(cause)}; {_blocked(cause, _count(report))}."] if cause else []
    )
    lines += [f"{line}." for line in _headlines(report)]
    if public_hint:
        lines.append(f"Likely bug: {likely_bug(report)} ({_hints_from(report)}).")
    lines += [f"{_capital(own_failure(own))}." for own in report.own_failures]
    lines += [f"Integrity ({f.kind}): {f.where()}{f.message}" for f in report.integrity]
    lines.append(
        f"Score {_points(report.score)}/{_points(report.max_score)}, level reached: {_reached(report)}."
    )
    lines += [f"Cell {c.cell} ({c.kind}): {c.message}" for c in report.cell_errors]
    document = {
        "score": report.score,
        "execution_time": round(report.duration_s),
        "output": printable("\n".join(lines)),
        "tests": tests,
        "extra_data": {
            "exercise": report.exercise,
            "level_reached": report.level_reached,
            "torch_version": report.torch_version,
            "grader_version": report.grader_version,
            "python_version": report.python_version,
            "suite_hash": report.suite_hash,
            "sandboxed": report.sandboxed,
            "kernel_user": report.kernel_user,
            "integrity_checks": report.integrity_checks,
        },
    }
    return json.dumps(encodable_data(document), indent=2)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def labelled_bug(report: GradeReport) -> str:
    """'likely bug: a?' for a line of its own; 'perhaps: a?' when every hint is asked, not
    said (never 'likely bug: perhaps: ...')."""
    if all(h.startswith("perhaps: ") for h in report.hints):
        return "perhaps: " + " or ".join(h.removeprefix("perhaps: ") for h in report.hints)
    return f"likely bug: {likely_bug(report)}"


def likely_bug(report: GradeReport) -> str:
    """The report's likely bugs on one line: 'a? or b?' ("" when there is no hint)."""
    return " or ".join(report.hints)


def _numbered(report: GradeReport) -> list[tuple[int, CheckResult]]:
    """Each test with its place within its level, counting from 1."""
    seen: dict[int, int] = {}
    numbered = []
    for t in report.tests:
        seen[t.level] = seen.get(t.level, 0) + 1
        numbered.append((seen[t.level], t))
    return numbered


# -- Markdown: the report as the last cell of the executed notebook ----------------------

# What Markdown may read as syntax anywhere on a line, and at the start of a list item:
# backslash-escaped. HTML's own characters are written as entities (Jupyter renders HTML in
# Markdown). So candidate text is shown as the characters it is, never as markup.
_INLINE = re.compile(r"([\\`*_\[\]|~])")
_BLOCK_START = re.compile(r"^([#+-]|\d+(?=[.)]))")
_MAX_CELL = 500  # characters of one message in a Markdown table
_ENTITY = re.compile(r"&(?=#?\w+;)")


def markdown_literal(text: str, limit: int = _MAX_CELL) -> str:
    """`text` as literal Markdown on one line (or in a table cell): whitespace runs made one
    space, control characters written as escapes, Markdown's syntax backslash-escaped, and
    `<`, `>` (and `&` where an entity would start) written as HTML entities."""
    line = " ".join(printable(text).split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    line = _INLINE.sub(r"\\\1", line)
    line = _BLOCK_START.sub(lambda m: m[0] + "\\" if m[0][0].isdigit() else "\\" + m[0], line)
    # `&` only where it would start an entity: "shapes & reduction" reads as written
    line = _ENTITY.sub("&amp;", line)
    return line.replace("<", "&lt;").replace(">", "&gt;")


def to_markdown(report: GradeReport) -> str:
    """The report card as Markdown: the score, the levels, what did not pass and why, the
    notebook's own cell errors, integrity findings, notes and what graded it. Candidate
    text goes through `markdown_literal`."""
    md = markdown_literal
    lines = [
        f"## Grade report: {md(report.exercise)} — {md(report.title)}",
        "",
        f"**Notebook** {md(report.notebook)}  ",
        f"**Score** {_points(report.score)}/{_points(report.max_score)} · "
        f"**Level reached** {md(_reached(report))} · "
        f"**Duration** {report.duration_s:.1f} s",
        "",
    ]
    cause = report.root_cause
    if cause:
        lines += [f"**Root cause** {md(_cause_line(cause))}", ""]
        if cause.source:
            lines += [f"> {md(cause.source)}", ""]
        lines += [md(_blocked(cause, _count(report))), ""]
    headlines = _headlines(report)
    if headlines:
        lines += [*(f"- **!** {md(line)}" for line in headlines), ""]
    if report.hints:
        lines += [f"**Likely bug** {' *or* '.join(md(hint) for hint in report.hints)}", ""]
        lines += [f"*({md(_hints_from(report))})*", ""]
    for own in report.own_failures:
        label = "Self-check" if own.self_check else "Also failed"
        lines += [f"**{label}** {md(own_failure(own))}", ""]
        if own.source:
            lines += [f"> {md(own.source)}", ""]
    lines += _table(
        "Levels", ["#", "level", "tests", "points"], "rlrr",
        [
            [str(lv.number), md(lv.name), f"{lv.passed}/{lv.total}",
             f"{_points(lv.score)}/{_points(lv.max_score)}"]
            for lv in report.levels
        ],
    )  # fmt: skip
    rows = failure_rows(report)
    lines += _table(
        "What did not pass", ["level", "test", "why"], "rll",
        [
            [row.levels,
             md(row.title)
             + (f"<br>*{md(row.detail)}*" if row.detail else ""),
             ": ".join(md(part) for part in (row.verdict, row.message) if part)]
            for row in rows
        ],
    )  # fmt: skip
    if any(row.public for row in rows):
        lines += [f"*(public): {md(PUBLIC)}*", ""]
    lines += _table(
        "The notebook's own cells", ["cell", "line", "what", "message"], "rrll",
        [
            [str(c.cell), str(c.line or ""), md(c.kind), md(c.message)]
            for c in report.cell_errors
        ],
    )  # fmt: skip
    for title, chosen in (
        (
            "Integrity (what the grader's watch found)",
            [f for f in report.integrity if f.kind != Kind.NOTE],
        ),
        (NOTES_TITLE, [f for f in report.integrity if f.kind == Kind.NOTE]),
    ):
        lines += _table(
            title, ["kind", "where", "what"], "lll",
            [
                [md(f.kind), md(f.where().rstrip(": ")), md(f.message)]
                for f in sorted(chosen, key=lambda f: _SEVERITY.index(f.kind))
            ],
        )  # fmt: skip
    if report.notes:
        lines += ["### Notes", "", *(f"- {md(note)}" for note in report.notes), ""]
    lines.append(f"*Graded with {md(_graded_with(report))}*")
    return "\n".join(lines)


def to_html(report: GradeReport, links: str = "") -> str:
    """The report card as a standalone HTML page: rich's export (every character of
    candidate text escaped) in colours that keep WCAG AA contrast in light and dark mode
    (`grader.report.theme`); `links`: HTML put above the card."""
    from grader.report.theme import card_page

    console = Console(record=True, width=100, file=io.StringIO())
    render(report, console)
    return card_page(console, f"{printable(report.notebook)}: report card", links)


def for_candidate(report: GradeReport, reveal: int) -> GradeReport:
    """The report to send the candidate (`--reveal N`): the levels up to `reveal` in full;
    above it, each level's passed/total only, its hidden tests' names and messages
    withheld (the public ones, which the candidate's self-check runs anyway, stay). The
    likely bug is withheld unless every test it explains is shown."""
    shown = [t for t in report.tests if t.level <= reveal or not t.hidden]
    withheld = len(report.tests) - len(shown)
    explained = all(t.status == Status.PASSED or t in shown for t in report.tests)
    notes = list(report.notes)
    if withheld:
        notes.append(
            f"levels above {reveal}: how many tests passed, without the hidden tests' details"
        )
    return replace(report, tests=shown, hints=report.hints if explained else [], notes=notes)


def _graded_with(report: GradeReport) -> str:
    """'grader 0.1.0, exercise mha_causal, suite 3f2a9c1d0b7e, torch 2.4.1, python 3.11.7'."""
    names = {"suite_hash": "suite"}
    values = {**report.graded_with, "suite_hash": report.suite_hash[:12]}
    return ", ".join(f"{names.get(k, k)} {v}" for k, v in values.items() if v) or "(unknown)"


def _table(title: str, header: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """A titled Markdown table (cells already escaped; `align`: l or r per column);
    nothing when there are no rows."""
    if not rows:
        return []
    rule = "|" + "|".join("--:" if a == "r" else ":--" for a in align) + "|"
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]

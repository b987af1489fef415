"""Rendering a GradeReport: the rich report card, JSON, JUnit XML and Gradescope's results.json."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from grader.records import VOIDING
from grader.results import CheckResult, GradeReport
from grader.text import encodable, printable, xml_safe

_SEVERITY = ("hidden", "tamper", "builtin", "machinery", "environment")

_STYLE = {
    "passed": "green",
    "failed": "red",
    "error": "red",
    "timeout": "yellow",
    "crashed": "magenta",
    "not_implemented": "dim",
    "skipped": "dim",
}
_LABEL = {"not_implemented": "not implemented"}


def _points(value: float) -> str:
    return f"{value:g}"


def _literal(text: str, style: str = "") -> Text:
    """Candidate text for the card: never markup, never a terminal control."""
    return Text(printable(text), style=style)


def render(report: GradeReport, console: Console) -> None:
    """Print the report card. Everything on it is a Text (not markup), and every string
    that may come from the candidate goes through `printable`."""
    head = Text.assemble(
        ("Exercise  ", "bold"), printable(f"{report.exercise} — {report.title}\n"),
        ("Notebook  ", "bold"), printable(f"{report.notebook}\n"),
        ("Duration  ", "bold"),
        printable(f"{report.duration_s:.1f} s   (torch {report.torch_version})"),
    )  # fmt: skip
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
    parts: list[RenderableType] = [head]
    parts += [_literal(f"! {line}", style="bold yellow") for line in report.headlines]
    if report.integrity:
        parts.append(_integrity(report))
    parts.append(levels)
    problems = [t for t in report.tests if t.status != "passed"]
    if problems:
        table = Table(
            title="What did not pass", title_justify="left", box=box.SIMPLE_HEAD, expand=True
        )
        table.add_column("lvl", justify="right", no_wrap=True)
        table.add_column("test", overflow="fold", ratio=2)
        table.add_column("why", overflow="fold", ratio=3)
        for t in problems:
            label, message = _why(t)
            why = Text(label, style=_STYLE[t.status])
            if message:
                why.append(f": {printable(message)}")
            table.add_row(str(t.level), _literal(t.id + ("" if t.hidden else " (public)")), why)
        parts.append(table)
    if report.cell_errors:
        cells = Table(
            title="The notebook's own cells", title_justify="left", box=box.SIMPLE_HEAD, expand=True
        )
        cells.add_column("cell", justify="right")
        cells.add_column("what")
        cells.add_column("message", overflow="fold")
        for c in report.cell_errors:  # cut output has its own table below
            cells.add_row(str(c.cell), _literal(c.kind), _literal(c.message))
        parts.append(cells)
    if report.cut_output:
        cut = Table(
            title="Output cut (what the cell printed first)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            expand=True,
        )
        rows = [
            (str(c.cell), f"{c.cut:,} chars", printable(c.start.replace("\n", "⏎ ")))
            for c in report.cut_output
        ]
        width = max(len(row[1]) for row in rows)  # keep the counts whole on narrow terminals
        cut.add_column("cell", justify="right", no_wrap=True, min_width=4)
        cut.add_column("cut", justify="right", no_wrap=True, min_width=width)
        cut.add_column("began with", overflow="ellipsis", no_wrap=True, ratio=1)
        for row in rows:
            cut.add_row(*(Text(cell) for cell in row))
        parts.append(cut)
    for note in report.notes:
        parts.append(_literal(f"note: {note}", style="dim"))
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


def _integrity(report: GradeReport) -> Table:
    """What the grader's guard found, worst first (candidate text stays literal)."""
    table = Table(
        title="Integrity (what the grader's watch found)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        expand=True,
    )
    table.add_column("kind", no_wrap=True)
    table.add_column("where", no_wrap=True)
    table.add_column("what", overflow="fold", ratio=1)
    for f in sorted(report.integrity, key=lambda f: _SEVERITY.index(f.kind)):
        where = f"cell {f.cell}" + (f", line {f.line}" if f.line else "") if f.cell else ""
        style = "bold red" if f.kind in VOIDING else "yellow"
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


def _encodable(value: object) -> object:
    """`value` (plain data) with every string made encodable as UTF-8."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {_encodable(key): _encodable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encodable(item) for item in value]
    return value


def to_json(report: GradeReport) -> str:
    """The `--json` document: one object."""
    return json.dumps(_encodable(report.to_dict()), indent=2)


def to_junit(report: GradeReport) -> str:
    """JUnit XML: one testsuite, one testcase per hidden test, for CI dashboards. Well-formed
    for any candidate text: what XML 1.0 forbids is written as an escape."""
    counts = {s: sum(t.status == s for t in report.tests) for s in _STYLE}
    suite = ET.Element(
        "testsuite",
        name=xml_safe(report.exercise),
        tests=str(len(report.tests)),
        failures=str(counts["failed"]),
        errors=str(counts["error"] + counts["timeout"] + counts["crashed"]),
        skipped=str(counts["skipped"] + counts["not_implemented"]),
        time=f"{report.duration_s:.3f}",
    )
    for t in report.tests:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=xml_safe(f"{report.exercise}.{t.level_name}"),
            name=xml_safe(t.id),
        )
        if t.status == "failed":
            ET.SubElement(case, "failure", message=xml_safe(t.message))
        elif t.status in ("error", "timeout", "crashed"):
            ET.SubElement(case, "error", message=xml_safe(f"{t.status}: {t.message}"))
        elif t.status in ("skipped", "not_implemented"):
            ET.SubElement(case, "skipped", message=xml_safe(t.message or t.status))
    summary = {
        "score": report.score,
        "max_score": report.max_score,
        "notebook": report.notebook,
        "headlines": report.headlines,
        "integrity": [f.to_dict() for f in report.integrity],
    }
    # json.dumps writes ASCII (every control character escaped): safe in XML.
    ET.SubElement(suite, "system-out").text = json.dumps(_encodable(summary))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def to_gradescope(report: GradeReport) -> str:
    """Gradescope's autograder `results.json`: one entry per hidden test. The public tests
    are visible at once; the hidden ones once grades are published (`after_published`)."""
    tests = [
        {
            "name": f"{t.level_name}: {t.id}",
            "number": f"{t.level}.{n}",
            "score": t.score,
            "max_score": t.max_score,
            "status": "passed" if t.status == "passed" else "failed",
            "output": "" if t.status == "passed" else ": ".join(filter(None, _why(t))),
            "tags": [t.level_name],
            "visibility": "after_published" if t.hidden else "visible",
        }
        for n, t in _numbered(report)
    ]
    lines = [f"{line}." for line in report.headlines]
    lines += [f"Integrity ({f.kind}): {f.where()}{f.message}" for f in report.integrity]
    lines.append(
        f"Score {_points(report.score)}/{_points(report.max_score)}, level reached: {_reached(report)}."
    )
    lines += [f"Cell {c.cell} ({c.kind}): {c.message}" for c in report.cell_errors]
    document = {
        "score": report.score,
        "execution_time": round(report.duration_s),
        "output": "\n".join(lines),
        "tests": tests,
        "extra_data": {
            "exercise": report.exercise,
            "level_reached": report.level_reached,
            "torch_version": report.torch_version,
            "grader_version": report.grader_version,
        },
    }
    return json.dumps(_encodable(document), indent=2)


def _numbered(report: GradeReport) -> list[tuple[int, CheckResult]]:
    """Each test with its place within its level, counting from 1."""
    seen: dict[int, int] = {}
    numbered = []
    for t in report.tests:
        seen[t.level] = seen.get(t.level, 0) + 1
        numbered.append((seen[t.level], t))
    return numbered

"""`grade merge`: the parts that shards wrote, joined into what one run would have written.

Parts are all JSON, all gradebook CSV or all JUnit XML (`grader.report.documents`). Each
entry is read back with the notebook it is for; the entries are put in canonical order
and written again by the writer a single run uses, so the result is the same, byte for
byte. A notebook in two parts means the shards overlap: an error naming it.
"""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, TypeVar

from grader.core.errors import UsageError
from grader.core.results import Outcome
from grader.core.text import printable
from grader.report.documents import (
    COLUMNS,
    GradebookRow,
    from_spreadsheet,
    gradebook,
    junit_document,
    notebook_key,
    notebook_of,
)

if TYPE_CHECKING:
    from grader.report.cohort import Cohort

T = TypeVar("T")


_KINDS = {"json": "JSON", "csv": "a CSV gradebook", "junit": "JUnit XML"}


def merge_texts(parts: list[tuple[str, str]]) -> tuple[str, str]:
    """Join the documents shards wrote into the one a single run would have written.

    Args:
        parts: (file name, text) of each part: all JSON (a batch's `--json` object, one
            notebook's, or a list of entries),
            all gradebook CSV, or all JUnit XML (`<testsuites>`, or one `<testsuite>`).

    Returns:
        ("json" | "csv" | "junit", the merged document).

    Raises:
        UsageError: no parts, parts of different kinds, a part that cannot be read as its
            kind, or a notebook in more than one part (the shards overlap).
    """
    if not parts:
        raise UsageError("merge: no parts to merge")
    parts = [(printable(name), text.removeprefix("\ufeff")) for name, text in parts]
    kinds = [(name, _kind(name, text)) for name, text in parts]
    first, kind = kinds[0]
    for name, other in kinds[1:]:
        if other != kind:
            raise UsageError(
                f"{first} is {_KINDS[kind]} but {name} is {_KINDS[other]}: merge parts of one kind"
            )
    if kind == "json":
        return kind, _merge_json(parts)
    if kind == "csv":
        return kind, _merge_csv(parts)
    return kind, _merge_junit(parts)


def _kind(name: str, text: str) -> str:
    start = text.lstrip()
    if start.startswith(("{", "[")):
        return "json"
    if start.startswith("<"):
        return "junit"
    if start.startswith(COLUMNS[0] + ","):
        return "csv"
    if not start:
        raise UsageError(f"{name}: is empty")
    raise UsageError(
        f"{name}: not JSON, a gradebook CSV or JUnit XML (it begins {printable(start[:30])!r})"
    )


def _in_order(entries: list[tuple[str, str, T]]) -> list[T]:
    """The items of (part, notebook, item) entries, in canonical order; a notebook in two
    entries is an error naming it and the parts."""
    seen: dict[str, str] = {}
    for part, notebook, _ in entries:
        if notebook in seen:
            where = (
                f"twice in {part}" if seen[notebook] == part else f"in {seen[notebook]} and {part}"
            )
            raise UsageError(f"{printable(notebook)} appears {where}: the shards overlap")
        seen[notebook] = part
    return [item for *_, item in sorted(entries, key=lambda e: (notebook_key(e[1]), e[1]))]


def _merge_json(parts: list[tuple[str, str]]) -> str:
    from grader.report.cohort import to_json_batch

    return to_json_batch(*merged_cohort(parts))


def merged_cohort(parts: list[tuple[str, str]]) -> tuple[list[Outcome], Cohort]:
    """The notebooks of JSON parts, in canonical order, and the cohort's figures computed
    again over all of them (the pairs with a reference solution, which need its code, as
    the parts found them).

    Raises:
        UsageError: a part that is not JSON grade wrote, or a notebook in two parts.
    """
    from grader.report.cohort import cohort
    from grader.report.similarity import REFERENCE, Pair

    entries: list[tuple[str, str, Outcome]] = []
    with_reference: list[Pair] = []
    for name, text in parts:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"{name}: invalid JSON at line {e.lineno}, column {e.colno}") from None
        if isinstance(data, dict) and isinstance(data.get("notebooks"), list):
            items, similar = data["notebooks"], data.get("similar", [])
        else:  # one notebook's --json, or a list of entries
            items, similar = (data if isinstance(data, list) else [data]), []
        for n, item in enumerate(items, start=1):
            try:
                outcome = Outcome.from_dict(item)
            except ValueError as e:
                raise UsageError(f"{name}: entry {n}: {e}") from None
            entries.append((name, notebook_of(outcome), outcome))
        for n, item in enumerate(similar if isinstance(similar, list) else [], start=1):
            try:
                pair = Pair.from_dict(item)
            except (ValueError, AttributeError) as e:
                raise UsageError(f"{name}: similar pair {n}: {e}") from None
            if pair.b == REFERENCE:
                with_reference.append(pair)
    outcomes = _in_order(entries)
    return outcomes, cohort(outcomes, reference_pairs=with_reference)


def _merge_csv(parts: list[tuple[str, str]]) -> str:
    entries: list[tuple[str, str, GradebookRow]] = []
    for name, text in parts:
        entries += [(name, notebook, row) for notebook, row in _gradebook_rows(name, text)]
    return gradebook(_in_order(entries))


def _gradebook_rows(name: str, text: str) -> list[tuple[str, GradebookRow]]:
    """(notebook, row) of each row of a gradebook; its tests are the row's non-empty test
    cells in the header's order (which is its suite's order, as far as the merge needs)."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, [])
        if tuple(header[: len(COLUMNS)]) != COLUMNS:
            raise UsageError(
                f"{name}: not a gradebook (its header does not begin {','.join(COLUMNS)})"
            )
        tests = header[len(COLUMNS) :]
        rows = []
        for cells in reader:
            if not cells:
                continue
            if len(cells) != len(header):
                raise UsageError(
                    f"{name}: line {reader.line_num} has {len(cells)} cells, the header {len(header)}"
                )
            fixed, scores = cells[: len(COLUMNS)], cells[len(COLUMNS) :]
            row = GradebookRow(
                tuple(fixed), tuple((t, s) for t, s in zip(tests, scores, strict=True) if s)
            )
            rows.append((from_spreadsheet(fixed[0]), row))
    except csv.Error as e:
        raise UsageError(f"{name}: line {reader.line_num}: unreadable CSV: {e}") from None
    return rows


def _merge_junit(parts: list[tuple[str, str]]) -> str:
    entries: list[tuple[str, str, ET.Element]] = []
    for name, text in parts:
        entries += [(name, suite.get("name", ""), suite) for suite in _junit_suites(name, text)]
    return junit_document(_in_order(entries))


def _junit_suites(name: str, text: str) -> list[ET.Element]:
    """The `<testsuite>`s of a part, each named by its notebook (a single notebook's
    `to_junit` names it by the exercise: its `notebook` property says which)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise UsageError(f"{name}: not well-formed XML: {e}") from None
    if root.tag == "testsuite":
        notebook = root.find("properties/property[@name='notebook']")
        if notebook is None:
            raise UsageError(f"{name}: a <testsuite> without a notebook property (not grade's)")
        root.set("name", notebook.get("value", ""))
        suites = [root]
    elif root.tag == "testsuites":
        suites = list(root)
    else:
        raise UsageError(f"{name}: JUnit XML begins <testsuites> or <testsuite>, not <{root.tag}>")
    for n, suite in enumerate(suites, start=1):
        suite.tail = None
        if suite.tag != "testsuite" or not suite.get("name"):
            raise UsageError(f"{name}: entry {n} is <{suite.tag}>, not a named <testsuite>")
        for total in ("tests", "failures", "errors", "skipped", "time"):
            value = suite.get(total, "0")
            if not _number(value, total != "time"):
                raise UsageError(f"{name}: testsuite {n}: {total}={value!r} is not a number")
    return suites


def _number(text: str, whole: bool) -> bool:
    try:
        int(text) if whole else float(text)
    except ValueError:
        return False
    return True

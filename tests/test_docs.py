"""The documentation's shape: a short README that points into docs/, every relative link
in them pointing at a file that exists, every page the README promises present, and
docs/authoring.md's reference naming every public name of `grader.suite` a suite uses,
with the code's signatures. Pure: reads files and imports `grader.suite`, starts nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

# [text](target) and [text](target "title"); images too. Not inside code.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"(`+).*?\1", re.DOTALL)
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)  # http:, mailto:, ...


def relative_links(page: Path) -> list[str]:
    """The relative link targets of a Markdown page, anchors dropped, code left out."""
    text = _CODE.sub("", _FENCE.sub("", page.read_text()))
    targets = []
    for target in _LINK.findall(text):
        if _EXTERNAL.match(target):
            continue
        path = target.split("#", 1)[0]
        if path:  # "#anchor" alone points into the page itself
            targets.append(path)
    return targets


def test_the_readme_is_a_front_door_of_at_most_200_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_the_pages_the_readme_promises_are_in_docs():
    pages = [
        "usage.md",
        "report-card.md",
        "outputs.md",
        "authoring.md",
        "security.md",
        "benchmarks.md",
        "architecture.md",  # written with the architecture work; present once that lands
        "contributing.md",
    ]
    missing = [name for name in pages if not (DOCS / name).is_file()]
    assert not missing, f"docs/ lacks {missing}"


def test_the_link_finder_sees_relative_links_and_skips_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[a](usage.md) [b](docs/x.md#flags) [c](https://example.com) [d](#here)\n"
        '`[e](inline.md)`\n```\n[f](fenced.md)\n```\n![g](img.png "title")\n'
    )
    assert relative_links(page) == ["usage.md", "docs/x.md", "img.png"]


# -- docs/authoring.md's reference keeps up with what a suite can use ----------------------

REFERENCE = "## Reference: what a suite can use"


def reference_section() -> str:
    """The text of docs/authoring.md's reference section (up to the next `## ` heading)."""
    text = (DOCS / "authoring.md").read_text()
    assert REFERENCE in text, f"docs/authoring.md lacks the section {REFERENCE!r}"
    section = text.split(REFERENCE, 1)[1]
    return re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]


def _documented(name: str, text: str) -> bool:
    """`name` opens a code span, alone or after a qualifier: `name`, `name(...)`,
    `kernel.name(...)`, `lib.name`, `Watch.name`."""
    return re.search(rf"`(?:\w+\.)*{re.escape(name)}\b", text) is not None


def _defined_here(module) -> list[str]:
    """The public functions and classes `module` defines itself (not those it imports)."""
    import inspect

    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__
    )


def _public_members(cls) -> list[str]:
    """The public methods and properties a class defines."""
    return sorted(
        name
        for name, value in vars(cls).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    )


def suite_names() -> dict[str, list[str]]:
    """Every public name a suite uses, by where it comes from."""
    import dataclasses

    from grader.suite import checks, corpus, exercise, handle, library

    names = {
        "grader.suite.checks": _defined_here(checks),
        "grader.suite.library": _defined_here(library),
        "Kernel": _public_members(handle.Kernel),
        "Remote": _public_members(handle.Remote),
    }
    for cls in (exercise.Exercise, exercise.Check, exercise.Watch, corpus.Mutant, corpus.Variant):
        names[cls.__name__] = [f.name for f in dataclasses.fields(cls)]
    return names


def test_the_authoring_reference_names_every_public_name_a_suite_uses():
    section = reference_section()
    missing = [
        f"{owner}: {name}"
        for owner, names in suite_names().items()
        for name in names
        if not _documented(name, section)
    ]
    assert not missing, (
        f"docs/authoring.md, {REFERENCE[3:]!r}, does not name (as `name` or `name(`): "
        + ", ".join(missing)
    )


def _signature(function) -> str:
    """`function`'s signature as its source writes it, annotations left out:
    'close(actual, expected, what, *, rtol=None, atol=None, where=None)'."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(function))
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    arguments = node.args

    def as_written(default: ast.expr | None) -> ast.expr | None:  # 1e-4, not 0.0001
        return None if default is None else ast.Name(str(ast.get_source_segment(source, default)))

    arguments.defaults = [as_written(d) for d in arguments.defaults]
    arguments.kw_defaults = [as_written(d) for d in arguments.kw_defaults]
    for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                     arguments.vararg, arguments.kwarg]:  # fmt: skip
        if argument is not None:
            argument.annotation = None
    if arguments.args and arguments.args[0].arg == "self":
        arguments.args = arguments.args[1:]
    return f"{node.name}({ast.unparse(arguments)})"


def documented_signatures() -> list:
    """The functions whose signatures the reference copies: the public functions of
    `checks`, `library` and `integrity`, the batch steps, and the Kernel's and Remote's
    methods (properties have none)."""
    import inspect

    from grader.suite import checks, handle, integrity, library
    from grader.suite.scan import scan_cells

    functions = [
        value
        for module in (checks, library)
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    ]
    functions += [integrity.require_clean_source, integrity.require_nothing_seen,
                  integrity.require_no_builtin_module, integrity.scan, scan_cells,
                  handle.call_step, handle.attribute_step, handle.set_step, handle.hold_step]  # fmt: skip
    for cls in (handle.Kernel, handle.Remote):
        functions += [v for n, v in vars(cls).items() if inspect.isfunction(v) and n[0] != "_"]
    return functions


def _constructor(cls) -> str:
    """A dataclass's constructor as its fields write it: 'Mutant(name, old, new, level,
    hint="", values=False)' (a `field(default_factory=list)` shown as `[]`)."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(cls))
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef)
    fields = []
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            default = "" if item.value is None else ast.get_source_segment(source, item.value)
            default = {"field(default_factory=list)": "[]"}.get(str(default), default)
            fields.append(f"{item.target.id}={default}" if default else item.target.id)
    return f"{cls.__name__}({', '.join(fields)})"


def test_the_authoring_reference_copies_the_real_signatures():
    def same_form(text: str) -> str:  # one space, one kind of quote
        return " ".join(text.replace("'", '"').split())

    section = same_form(reference_section())
    from grader.suite import corpus, exercise, handle

    signatures = [*map(_signature, documented_signatures())]
    signatures += [_constructor(c) for c in (exercise.Exercise, exercise.Check, exercise.Watch,
                                             corpus.Mutant, corpus.Variant)]  # fmt: skip
    signatures.append(_signature(handle.Remote.__init__).replace("__init__", "Remote", 1))
    wrong = [s for s in signatures if same_form(s) not in section]
    assert not wrong, (
        f"docs/authoring.md, {REFERENCE[3:]!r}, lacks these signatures as the code has "
        "them (annotations left out): " + "; ".join(wrong)
    )


def _table_rows(page: Path, header: str) -> dict[str, list[str]]:
    """The rows of the Markdown table whose header line starts with `header`, by their
    first cell (backquotes dropped)."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def _catalog() -> dict[str, dict]:
    import json

    index = json.loads((ROOT / "exercises" / "catalog.json").read_text())
    return {row["id"]: row for row in index["rows"]}


def test_the_readme_catalog_table_matches_the_catalog():
    rows = _table_rows(ROOT / "README.md", "| id | tests | points |")
    catalog = _catalog()
    assert sorted(rows) == sorted(catalog)
    for id, (tests, points, *_) in rows.items():
        assert (int(tests), float(points)) == (catalog[id]["tests"], catalog[id]["points"]), id


def test_the_usage_catalog_table_lists_every_exercise_with_its_topics_and_time():
    rows = _table_rows(DOCS / "usage.md", "| id | topics | minutes |")
    catalog = _catalog()
    assert sorted(rows) == sorted(catalog)
    for id, (topics, minutes, tests, points, *_) in rows.items():
        row = catalog[id]
        assert topics == ", ".join(row["tags"]) and int(minutes) == row["minutes"], id
        assert (int(tests), float(points)) == (row["tests"], row["points"]), id

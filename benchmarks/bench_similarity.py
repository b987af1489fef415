"""How well the copy check (grader/report/similarity.py) tells copies from independent work,
and what it costs.

Within each exercise:

- independent: every pair of solutions written apart: the reference solution, the
  corpus's `variants/independent.ipynb` (written from the scaffold alone) and the
  notebooks in benchmarks/similarity/notebooks/<exercise>/ (written the same way). None may
  be flagged: a flagged pair here is a false positive.
- edits: each correct variant of the corpus written by the reference's author (`Variant`
  with old/new, or a notebook variant other than `independent`), against the reference:
  the same code with changes, so a copy.
- disguised: each independent solution and the reference against itself copied with every
  name it binds renamed, comments and docstrings removed, the code reformatted and its
  functions in reverse order within each cell (`disguise`): copies that should be flagged.

Printed: the similarity of each group (min, median, max), the false-positive and
detection rates at the default threshold, the best separating threshold, and the time
the comparison adds per notebook (median of REPEAT runs over every notebook above).

    .venv/bin/python benchmarks/bench_similarity.py [--repeat 5] [--threshold 0.6] [--show]
"""

from __future__ import annotations

import argparse
import ast
import itertools
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.core.results import CodeLine  # noqa: E402
from grader.report import similarity  # noqa: E402
from grader.report.similarity import compare  # noqa: E402
from grader.verdict.own_code import own_code  # noqa: E402

NOTEBOOKS = ROOT / "benchmarks" / "similarity" / "notebooks"


def code_cells(path: Path) -> list[tuple[int, str]]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def scaffold_lines(exercise: str) -> list[str]:
    return [
        line for _, source in code_cells(ROOT / "notebooks" / f"{exercise}.ipynb")
        for line in source.splitlines()
    ]  # fmt: skip


class _Rename(ast.NodeTransformer):
    """Every name the code binds (assigned, a parameter, a function or class, an attribute
    of self) renamed consistently; the rest (torch, builtins) left."""

    def __init__(self, bound: set[str]) -> None:
        self.names = {name: f"n{i}" for i, name in enumerate(sorted(bound))}

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self.names.get(node.arg, node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.names.get(node.name, node.name)
        if ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self.names.get(node.name, node.name)
        if ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in ("self", self.names.get("self")):
            node.attr = self.names.get(node.attr, node.attr)
        return node


def _bound(tree: ast.AST) -> set[str]:
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg) and node.arg != "self":
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("__"):
            bound.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            bound.add(node.attr)
    return bound


def disguise(cells: list[tuple[int, str]], given: list[str]) -> list[tuple[int, str]]:
    """`cells` as a copier would hide them (see the module docstring), keeping what the
    grader needs (the names the scaffold defines) and the cells the scaffold gave as they
    are; a cell that does not parse is kept as it is too."""
    scaffold_text = "\n".join(given)
    trees = []
    for _, source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            tree = None
        mine = any(line.strip() and line not in given for line in source.splitlines())
        trees.append(tree if mine else None)
    bound = set().union(*(_bound(t) for t in trees if t is not None))
    bound -= set(re.findall(r"[^\W\d]\w*", scaffold_text))
    out = []
    for (index, source), tree in zip(cells, trees, strict=True):
        if tree is None:
            out.append((index, source))
            continue
        tree = _Rename(bound).visit(tree)
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        rest = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        tree.body = rest[: len(rest) // 2] + defs[::-1] + rest[len(rest) // 2 :]
        out.append((index, ast.unparse(tree)))
    return out


def edit_variants(exercise: str) -> list[tuple[str, list[tuple[int, str]]]]:
    from grader.suite.corpus import Corpus, load_corpus
    from grader.suite.exercise import load_catalog

    catalog = load_catalog()
    corpus = load_corpus(catalog[exercise]) if exercise in catalog else Corpus()
    solution = code_cells(ROOT / "solutions" / f"{exercise}.ipynb")
    out = []
    for variant in corpus.variants:
        if variant.notebook:
            if Path(variant.notebook).stem != "independent":  # the reference's author's
                folder = ROOT / "exercises" / exercise
                out.append((variant.name, code_cells(folder / variant.notebook)))
            continue
        if variant.old == "":
            continue
        cells = [(i, s.replace(variant.old, variant.new, 1)) for i, s in solution]
        out.append((variant.name, cells))
    return out


def independents(exercise: str) -> dict[str, list[tuple[int, str]]]:
    found = {"reference": code_cells(ROOT / "solutions" / f"{exercise}.ipynb")}
    written_apart = ROOT / "exercises" / exercise / "variants" / "independent.ipynb"
    if written_apart.is_file():
        found["variants/independent"] = code_cells(written_apart)
    for path in sorted((NOTEBOOKS / exercise).glob("*.ipynb")):
        found[f"bench/{path.stem}"] = code_cells(path)
    return found


def similarity_of(exercise: str, a: list[CodeLine], b: list[CodeLine]) -> float:
    pairs = compare(exercise, {"a": a, "b": b}, threshold=0.0)
    return pairs[0].similarity if pairs else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=similarity.THRESHOLD)
    parser.add_argument("--show", action="store_true", help="every pair's similarity")
    args = parser.parse_args()
    exercises = sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
    groups: dict[str, list[tuple[str, float]]] = {"independent": [], "edits": [], "disguised": []}
    for exercise in exercises:
        given = scaffold_lines(exercise)
        mine = {name: own_code(cells, given) for name, cells in independents(exercise).items()}
        for (na, a), (nb, b) in itertools.combinations(mine.items(), 2):
            groups["independent"].append(
                (f"{exercise}: {na} ~ {nb}", similarity_of(exercise, a, b))
            )
        for name, cells in edit_variants(exercise):
            code = own_code(cells, given)
            score = similarity_of(exercise, code, mine["reference"])
            groups["edits"].append((f"{exercise}: {name} ~ reference", score))
        for name, cells in independents(exercise).items():
            copy = own_code(disguise(cells, given), given)
            score = similarity_of(exercise, copy, mine[name])
            groups["disguised"].append((f"{exercise}: {name} disguised ~ {name}", score))
    print(f"K={similarity.K} W={similarity.W} threshold={args.threshold:g}")
    for group, scored in groups.items():
        values = sorted(v for _, v in scored)
        flagged = sum(v >= args.threshold for v in values)
        print(
            f"{group:12} {len(values):4} pairs  similarity min {values[0]:.2f} "
            f"median {statistics.median(values):.2f} max {values[-1]:.2f}  "
            f"flagged {flagged}/{len(values)} ({100 * flagged / len(values):.0f}%)"
        )
        if args.show:
            for name, v in sorted(scored, key=lambda s: -s[1]):
                print(f"    {v:.2f}  {name}")
    worst_independent = max(v for _, v in groups["independent"])
    disguised = min(v for _, v in groups["disguised"])
    print(
        f"independent solutions at most {worst_independent:.2f}, disguised copies at least "
        f"{disguised:.2f}: the threshold {args.threshold:g} "
        + ("separates them" if worst_independent < args.threshold <= disguised else "does not")
    )
    # the time a batch adds: each notebook's own code taken from its cells (as the report
    # is built), then every pair of each exercise, and each against the reference, compared
    cells = {exercise: independents(exercise) for exercise in exercises}
    notebooks = sum(len(sides) for sides in cells.values())
    times = []
    for _ in range(args.repeat):
        began = time.perf_counter()
        for exercise, sides in cells.items():
            given = scaffold_lines(exercise)
            mine = {name: own_code(c, given) for name, c in sides.items()}
            compare(exercise, mine, reference=mine["reference"])
        times.append(time.perf_counter() - began)
    per = statistics.median(times) / notebooks
    print(
        f"own code and comparison: {notebooks} notebooks, {1000 * per:.2f} ms per notebook "
        f"(median of {args.repeat})"
    )


if __name__ == "__main__":
    main()

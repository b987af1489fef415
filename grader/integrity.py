"""Static integrity scan: forbidden built-ins and dynamic look-ups in the candidate's source.

Run-time detection lives in the shim (it records watched torch calls); this scan reads the
cells' AST in the grader's process, aliases and string look-ups included.
"""

from __future__ import annotations

import ast

from grader.checks import Failed
from grader.notebook import parse_cell

DYNAMIC = ("__import__", "importlib", "eval", "exec", "compile")
TORCH_ROOTS = ("torch", "F", "nn", "functional")


def scan(sources: list[str], forbidden: tuple[str, ...]) -> list[str]:
    """Findings like 'cell 3, line 7: uses scaled_dot_product_attention' (cells count from 1
    among code cells)."""
    findings: list[str] = []
    for number, source in enumerate(sources, start=1):
        tree = parse_cell(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            problem = _problem(node, forbidden)
            if problem:
                findings.append(
                    f"code cell {number}, line {getattr(node, 'lineno', '?')}: {problem}"
                )
    return sorted(set(findings), key=findings.index)


def _problem(node: ast.AST, forbidden: tuple[str, ...]) -> str | None:
    name = None
    if isinstance(node, ast.Attribute):
        name = node.attr
        if _dotted(node) in ("torch._C", "torch.ops"):
            return f"reaches into {_dotted(node)}"
    elif isinstance(node, ast.Name):
        name = node.id
        if name in DYNAMIC:
            return f"uses {name}(), which can hide what the code calls"
    elif isinstance(node, ast.alias):
        name = node.name.split(".")[-1]
        if node.name.split(".")[0] == "importlib":
            return "imports importlib"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        hits = [f for f in forbidden if f in node.value]
        if hits:
            return f"names {hits[0]} in a string"
    elif _computed_torch_lookup(node):
        return "looks up a torch attribute by a computed name"
    if name and name in forbidden:
        return f"uses {name}"
    return None


def _computed_torch_lookup(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and _rooted_in_torch(node.args[0])
        and not isinstance(node.args[1], ast.Constant)
    )


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _rooted_in_torch(node: ast.AST) -> bool:
    return _dotted(node).split(".")[0] in TORCH_ROOTS


def require_clean_source(sources: list[str], forbidden: tuple[str, ...]) -> None:
    """A check's verdict: no forbidden built-in in the source.

    Raises:
        Failed: naming the first finding (and how many more there are).
    """
    findings = scan(sources, forbidden)
    if findings:
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        raise Failed(f"built-in attention in the source: {findings[0]}{more}")


def require_nothing_seen(seen: set[str]) -> None:
    """A check's verdict: the guard saw no watched built-in called during the hidden tests,
    and none of the machinery an evasion needs (see `Kernel.seen`).

    Raises:
        Failed: naming everything seen.
    """
    if seen:
        raise Failed(f"the grader's watch saw: {'; '.join(sorted(seen))}")


# Torch's own attention modules, by where their type is defined.
BUILTIN_MODULES = frozenset({"torch.nn.modules.activation.MultiheadAttention"})


def require_no_builtin_module(modules: list[tuple[str, str]], owner: str) -> None:
    """A check's verdict: no submodule is (or derives from) torch's nn.MultiheadAttention.
    Judged by where the type comes from, not by its name: the notebook's own class called
    MultiheadAttention is fine.

    Raises:
        Failed: naming the submodule.
    """
    inside = [
        entry[0] or "(the module itself)"
        for entry in modules
        if BUILTIN_MODULES & set(getattr(entry, "bases", (entry[1],)))
    ]
    if inside:
        raise Failed(f"{owner} holds an nn.MultiheadAttention: {inside[0]}")

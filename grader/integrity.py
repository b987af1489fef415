"""Static integrity scan: forbidden built-ins and dynamic look-ups in the candidate's source.

Run-time detection lives in the shim (it records watched torch calls); this scan reads the
cells' AST in the grader's process, aliases and string look-ups included.
"""

from __future__ import annotations

from grader.checks import Failed
from grader.scan import scan  # the static scan lives in grader.scan; re-exported for suites


def require_clean_source(sources: list[str], forbidden: tuple[str, ...]) -> None:
    """A check's verdict: nothing in the source that `grader.scan.scan` reports.

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

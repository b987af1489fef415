"""Copies across a cohort: the candidates' own code compared by winnowed fingerprints.

What is compared is each notebook's *own code*: the lines of its code cells that are not
lines of the exercise's scaffold (`grader.verdict.own_code`), so the signatures, docstrings and
self-checks every candidate was given count for nothing. That code is lexed into tokens
with comments dropped, every string one token, and every name the candidate could have
chosen (variables, parameters, helpers, its own attributes) the same token, so renaming,
reordering helpers, changing comments or whitespace change nothing. Names the candidate did
not choose (torch's functions and methods, builtins, keywords) are kept: they are what
makes two independent solutions differ.

Fingerprints are chosen from the hashes of every run of `K` tokens by winnowing (Schleimer,
Wilkerson and Aiken, "Winnowing: local algorithms for document fingerprinting", 2003, the
method behind MOSS): the smallest hash of each window of `W` consecutive runs. Any match of
at least K + W - 1 tokens shares a fingerprint; matches shorter than K tokens never do.

A pair's similarity is the share of the smaller side's fingerprints that the other has
(a copy padded with code of its own is still a copy). Pairs at or above `THRESHOLD` are
flagged; the threshold was picked from the measurements in docs/benchmarks.md ("Copies"):
independent correct solutions of the same exercise, and the same solutions copied.
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grader.core.results import CodeLine

K = 16  # tokens in a run: shorter matches are noise
W = 6  # runs in a winnowing window
THRESHOLD = 0.6  # similarity at which a pair is flagged
MIN_FINGERPRINTS = 8  # a side with fewer (a few lines of its own) is not compared
REFERENCE = "reference solution"  # the other side of a pair with the exercise's solution


# -- tokens ---------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<string>[rRbBuUfF]{0,2}(?:\"\"\"[\s\S]*?(?:\"\"\"|$)|'''[\s\S]*?(?:'''|$)
                    |"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?))
      |(?P<comment>\#[^\n]*)
      |(?P<name>[^\W\d]\w*)
      |(?P<number>\.?\d[\w.]*(?:[eE][+-]?\d+)?)
      |(?P<op>\*\*=?|//=?|>>=?|<<=?|->|:=|\.\.\.|[-+*/%@&|^<>=!]=|[-+*/%@&|^~<>=.,:;()\[\]{}])
      |(?P<space>\s+)
      |(?P<other>.)""",
    re.VERBOSE,
)
# names a candidate does not choose, outside an attribute: kept as they are
_KEPT = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"torch", "F", "nn", "math", "np"}


@dataclass(frozen=True)
class Token:
    text: str
    line: int  # index into the CodeLine list


def tokens(code: Sequence[CodeLine]) -> list[Token]:
    """`code` as normalised tokens, each with the index of the line it starts on. The
    lines of one cell are lexed together (a string may span lines)."""
    out: list[Token] = []
    by_cell: dict[int, list[int]] = defaultdict(list)
    for i, line in enumerate(code):
        by_cell[line.cell].append(i)
    for indices in by_cell.values():
        text = "\n".join(code[i].text for i in indices)
        starts = [0]
        for i in indices[:-1]:
            starts.append(starts[-1] + len(code[i].text) + 1)
        raw = [
            (m.lastgroup or "", m.group(), m.start())
            for m in _TOKEN.finditer(text)
            if m.lastgroup not in ("space", "comment") and m.group() not in "()"
        ]
        bound = _bound_attributes(raw)
        for n, (kind, value, start) in enumerate(raw):
            where = indices[_line_of(starts, start)]
            if kind == "string":
                value = "S"
            elif kind == "number":
                value = _number(value)
            elif kind == "name":
                after_dot = n > 0 and raw[n - 1][1] == "."
                if after_dot:  # torch's method, or an attribute of the candidate's own
                    own = value in bound or (n > 1 and raw[n - 2][1] in ("self", "cls"))
                    value = "V" if own else value
                elif value not in _KEPT:
                    value = "V"
            out.append(Token(value, where))
    return out


def _number(text: str) -> str:
    """A number as its value reads (`1e-6` and `1e-06`, `0.50` and `.5` alike)."""
    try:
        return repr(float(text.replace("_", ""))) if not text.isdigit() else str(int(text))
    except ValueError:  # a complex, a hex or a malformed literal: as written
        return text


def _bound_attributes(raw: list[tuple[str, str, int]]) -> set[str]:
    """Attributes the code assigns (`self.w_q = ...`): its own names, not torch's."""
    return {
        raw[n][1]
        for n in range(1, len(raw) - 1)
        if raw[n][0] == "name" and raw[n - 1][1] == "." and raw[n + 1][1] in ("=", ":")
    }


def _line_of(starts: list[int], offset: int) -> int:
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


# -- fingerprints ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fingerprints:
    """A side of the comparison: its winnowed hashes, each with the token position of its
    first occurrence, and the line each token starts on."""

    hashes: dict[int, int]
    lines: tuple[int, ...]  # token position -> index into the CodeLine list

    def __len__(self) -> int:
        return len(self.hashes)


def fingerprint(code: Sequence[CodeLine], k: int = K, w: int = W) -> Fingerprints:
    """The winnowed fingerprints of `code` (`tokens`)."""
    toks = tokens(code)
    grams = [
        int.from_bytes(
            hashlib.blake2b(
                "\x00".join(t.text for t in toks[i : i + k]).encode(), digest_size=8
            ).digest(),
            "big",
        )
        for i in range(len(toks) - k + 1)
    ]
    chosen: dict[int, int] = {}
    if grams and len(grams) < w:
        position = min(range(len(grams)), key=lambda i: (grams[i], -i))
        chosen[grams[position]] = position
    for start in range(len(grams) - w + 1):
        window = range(start, start + w)
        position = min(window, key=lambda i: (grams[i], -i))  # the rightmost smallest
        chosen.setdefault(grams[position], position)
    return Fingerprints(chosen, tuple(t.line for t in toks))


# -- pairs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """A run of matching code: the first and last line (indices into each side's own code)."""

    a: tuple[int, int]
    b: tuple[int, int]


@dataclass(frozen=True)
class Pair:
    """Two notebooks of one exercise (or one and the reference solution, `REFERENCE`) whose
    own code is similar: the shares of each side's fingerprints the other has, and where."""

    exercise: str
    a: str
    b: str
    similarity: float  # the larger share: of the smaller side, how much the other has
    a_share: float
    b_share: float
    matches: list[Match] = field(default_factory=list)

    # matches as a JSON document wrote them ([cell, line] of each end), for `grade merge`,
    # which has no code to map indices with
    written: tuple[Any, ...] = ()

    def to_dict(self, lines: Callable[[str], Sequence[CodeLine]]) -> dict[str, Any]:
        """A JSON-ready dict; `lines(side)`: a side's own code, to write each match's ends
        as [cell, line] (as indices into it where `lines` has none)."""
        data: dict[str, Any] = {
            "exercise": self.exercise,
            "a": self.a,
            "b": self.b,
            "similarity": round(self.similarity, 3),
            "a_share": round(self.a_share, 3),
            "b_share": round(self.b_share, 3),
        }
        if self.written:
            data["matches"] = list(self.written)
            return data
        data["matches"] = [
            {"a": _where(lines(self.a), m.a), "b": _where(lines(self.b), m.b)} for m in self.matches
        ]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pair:
        """The inverse of `to_dict` (for `grade merge`).

        Raises:
            ValueError: `data` is not a pair `to_dict` wrote.
        """
        try:
            return cls(
                str(data["exercise"]),
                str(data["a"]),
                str(data["b"]),
                float(data["similarity"]),
                float(data["a_share"]),
                float(data["b_share"]),
                written=tuple(data["matches"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a similar pair: {type(e).__name__}: {e}") from None


def _where(lines: Sequence[CodeLine], span: tuple[int, int]) -> list[list[int]]:
    if not lines:
        return [[i] for i in span]
    return [[lines[i].cell, lines[i].line] for i in span]


def compare(
    exercise: str,
    sides: Mapping[str, Sequence[CodeLine]],
    threshold: float = THRESHOLD,
    reference: Sequence[CodeLine] = (),
) -> list[Pair]:
    """The pairs of `sides` (notebook -> own code, one exercise), and each side against the
    `reference` solution's own code, whose similarity is at least `threshold`; the most
    similar first. A side with fewer than `MIN_FINGERPRINTS` fingerprints is left out."""
    prints = comparable({**sides, REFERENCE: reference} if reference else sides)
    return compare_fingerprints(exercise, prints, threshold)


def comparable(sides: Mapping[str, Sequence[CodeLine]]) -> dict[str, Fingerprints]:
    """The fingerprints of the sides with at least `MIN_FINGERPRINTS` of them."""
    prints = {name: fingerprint(code) for name, code in sides.items()}
    return {name: fp for name, fp in prints.items() if len(fp) >= MIN_FINGERPRINTS}


def compare_fingerprints(
    exercise: str, prints: Mapping[str, Fingerprints], threshold: float = THRESHOLD
) -> list[Pair]:
    """`compare`, on sides already fingerprinted (`comparable`)."""
    holders: dict[int, list[str]] = defaultdict(list)
    for name, fp in prints.items():
        for h in fp.hashes:
            holders[h].append(name)
    shared: dict[tuple[str, str], int] = defaultdict(int)
    for names in holders.values():
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                shared[(a, b)] += 1
    pairs = []
    for (a, b), count in shared.items():
        a, b = sorted((a, b))
        if a == REFERENCE:  # the reference is always the second side
            a, b = b, a
        fa, fb = prints[a], prints[b]
        a_share, b_share = count / len(fa), count / len(fb)
        similarity = max(a_share, b_share)
        if similarity >= threshold:
            pairs.append(Pair(exercise, a, b, similarity, a_share, b_share, _matches(fa, fb)))
    return sorted(pairs, key=lambda p: (-p.similarity, p.a, p.b))


def _matches(a: Fingerprints, b: Fingerprints, k: int = K, w: int = W) -> list[Match]:
    """The runs of shared fingerprints, in a's order: a fingerprint continues a run where
    it follows the last one closely on both sides."""
    points = sorted((pa, b.hashes[h]) for h, pa in a.hashes.items() if h in b.hashes)
    runs: list[list[tuple[int, int]]] = []
    for pa, pb in points:
        if runs:
            la, lb = runs[-1][-1]
            if 0 <= pa - la <= k + w and 0 <= pb - lb <= k + w:
                runs[-1].append((pa, pb))
                continue
        runs.append([(pa, pb)])
    out = []
    for run in runs:
        (fa, fb), (la, lb) = run[0], run[-1]
        ea = min(la + k - 1, len(a.lines) - 1)
        eb = min(lb + k - 1, len(b.lines) - 1)
        out.append(Match((a.lines[fa], a.lines[ea]), (b.lines[fb], b.lines[eb])))
    return out

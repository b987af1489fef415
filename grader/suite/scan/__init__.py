"""Static integrity scan: what the candidate's cells bind to the exercise's torch built-ins,
and the machinery an evasion would need.

The scan reads the source IPython runs: every code cell goes through IPython's own
``TransformerManager`` (``%magic`` and ``!cmd`` become ``get_ipython()`` calls), and a
one-line cell whose first word is a line magic the notebook does not shadow runs as that
magic, as IPython's automagic does. Cells share one namespace and are read in notebook
order; a cell that still does not parse runs nothing and is skipped.

Rules
-----
Bindings. A name is bound to what its binding resolves to: imports (``import torch.nn as
tnn``, ``from torch.nn.functional import scaled_dot_product_attention as sdpa``),
assignments and ``for``/``with``/``:=`` targets (``f = F.softmax``, tuples and containers
carry everything in them), ``globals()["f"] = ...``, ``getattr(m, "name")``,
``vars(m)[...]``/``m.__dict__[...]``/``sys.modules[...]``, ``importlib.import_module``/
``__import__`` with a constant, and calls (``m = nn.MultiheadAttention(8, 2)``: an instance
of what was called). Python's scopes are followed: parameters and locals shadow module
names, class bodies are not seen from their methods. A module-level name is *torch-bound*
when any binding anywhere in the notebook binds it to torch (flow-insensitive, so
conservative); the notebook's own ``def``/``class`` of a name binds it to nothing from
torch, so a from-scratch ``def scaled_dot_product_attention`` is not the built-in.
``torch``, ``nn``, ``F`` and ``functional`` that the notebook never binds are read as the
usual modules. Strings, comments and docstrings are never read, except a constant that is
the name in one of the look-ups above.

Built-in references are references that resolve to torch and name one of the exercise's
``forbidden`` built-ins, or a private torch name matching the exercise's ``private``
pattern (for attention: ``torch._scaled_dot_product_flash_attention_for_cpu``,
``F._in_projection_packed``).
``scan_cells`` reports every one in ``ScanResult.references`` with where it sits. It is a
*finding* only when it lies in code the graded objects reach. The graded objects are the
``graded`` names, an exercise's ``defines`` (what the hidden tests call; the suites pass
them through ``Watch.graded``). Code belongs to module-level names: a function's or
class's body, decorators, defaults and bases (annotations are not read) to its name; the
value of a module-level binding to the names it binds (``_ln = F.layer_norm``); what is
written into an object, from anywhere, to the name that holds it (``LayerNorm.forward =
_fast``, ``setattr(LayerNorm, ...)``, ``table[k] = ...``, and arguments to a method of an
object the notebook made, ``table.update(...)``); what is written into the namespace by
computed name (``globals()[name] = ...``, ``globals().update(...)``) to the graded
objects. The graded code is the graded objects' code and, transitively, the code of every
module-level name it reads (reading ``globals()`` reads them all) and of every notebook
function that writes into its parameter and is handed a name already reached
(``install(LayerNorm)`` with ``cls.forward = ...``). A graded name, or a module-level
name the graded code reads, that any binding anywhere binds to a built-in is a finding at
that binding too. Code the graded objects do not reach is never a finding, whatever its
name and however it is called: a self-check helper that compares the candidate's work
with ``nn.MultiheadAttention`` keeps full marks, used inside ``print(...)``, ``assert``,
an f-string, a loop or ``ok = check()`` alike. Without graded names (``graded=None``) every
function and class the notebook defines is graded, except those named like a check
(``test*``, ``check*``, ``compare*``, ``verify*``, ``validate*``, ``sanity*``, ``demo*``,
``run_*``, ``*test(s)``, ``main``; leading underscores ignored); no graded name in the
catalog looks like a check (a test keeps it so).

Machinery is a finding wherever it appears, graded or not (``_MACHINERY``,
``_INTERNALS``): threads and processes, native code, heap and frame walking, tracers and
hooks, ``sys.modules``, ``builtins``, torch's operator, mode and compiler internals,
string execution (``eval``/``exec``/``compile``/``__import__``/``importlib``,
``timeit``/``doctest``/``runpy``/...), look-ups by computed name on torch objects
(``getattr``/``setattr``/``delattr``/``hasattr`` and their dunders, ``vars``,
``__dict__``), look-ups by string (``operator.attrgetter``, ``pydoc.locate``),
deserialisation, the grader's own package, shell commands and ``get_ipython()`` used by
hand.

Magics. Cell magics ``time``, ``timeit``, ``capture`` and ``prun`` run their body (and
``timeit`` its setup line) as Python: it is scanned as if it stood in the cell.
``%%writefile`` to a Python file is a finding and its body is scanned; any other cell magic
is a finding (its body runs outside the scanned cells). Line magics ``time``, ``timeit``,
``prun`` have their statement scanned; ``_HARMLESS_LINE`` are not findings; every other
line magic is (``_SHELL_LINE``, ``_CODE_LINE``, ``_SETTINGS_LINE``, unknown ones). ``!cmd``
is a finding.

The scan is conservative but not complete (code can still mutate a shared object, or
build a callable at run time); the run-time watch sees what the graded objects call.
Line numbers are the cell's own, except after a magic continued with ``\\`` over several
lines, which IPython joins into one.

Modules: ``cells`` reads the cells as IPython runs them; ``names`` is the binding model (what
a name resolves to, in Python's scopes); ``rules`` holds the tables of what is a finding;
``findings`` records what a pass sees and turns it into a ``ScanResult``; ``visitor`` walks
each cell.
"""

from __future__ import annotations

import re

from grader.suite.scan.cells import CellSource, _read_cells
from grader.suite.scan.cells import _parse as _parse
from grader.suite.scan.findings import ScanResult, SourceFinding
from grader.suite.scan.rules import _CHECK_NAME as _CHECK_NAME
from grader.suite.scan.visitor import _Reader

__all__ = ["CellSource", "SourceFinding", "ScanResult", "scan", "scan_cells"]


def scan(
    sources: list[str],
    forbidden: tuple[str, ...],
    private: str = "",
    graded: tuple[str, ...] | None = None,
) -> list[str]:
    """Findings like 'cell 5, line 7: uses scaled_dot_product_attention', in cell and line
    order. Cells are numbered as the card numbers them (all cells count, from 1) when the
    sources know their cells (`CellSource`: `Kernel.sources`), else 'code cell 3' counts
    from 1 among the sources. `private` is a regular expression for private torch names
    that count as a forbidden built-in (an exercise's `Watch.private`); none do when it is
    empty. `graded`: the names the hidden tests grade (an exercise's `defines`); None
    grades every function and class the notebook defines that is not named like a check."""
    return [str(f) for f in scan_cells(sources, forbidden, private, graded).findings]


def scan_cells(
    sources: list[str],
    forbidden: tuple[str, ...],
    private: str = "",
    graded: tuple[str, ...] | None = None,
) -> ScanResult:
    """Scan the code cells' source (in notebook order) against the rules above; findings
    are numbered, and `graded` read, as `scan` says."""
    cells = _read_cells(sources)
    pattern = re.compile(private, re.IGNORECASE) if private else None
    chosen = None if graded is None else frozenset(graded)
    reader = _Reader(frozenset(forbidden), cells, pattern, chosen)
    for _ in range(4):  # bindings to a fixpoint: a later cell can bind a name used earlier
        if not reader.read(emit=False):
            break
    reader.read(emit=True)
    if sources and all(isinstance(source, CellSource) for source in sources):
        return reader.result().numbered([s.number for s in sources if isinstance(s, CellSource)])
    return reader.result()

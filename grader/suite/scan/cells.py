"""Reading cells as IPython runs them: each code cell's source through IPython's own
``TransformerManager`` (loaded only when a cell is not plain Python, since IPython is heavy),
one-line automagic cells read as the line magic they run, and the ``get_ipython()`` calls
IPython writes for magics and ``!cmd`` taken apart again for the visitor.
"""

from __future__ import annotations

import ast
import re
from functools import cache, lru_cache

from grader.suite.scan.names import _BUILTIN_NAMES, _bound, _Cell, _const, _own_nodes
from grader.suite.scan.rules import _words

# IPython 9 with ipykernel: every line magic and alias, for automagic one-line cells
_LINE_MAGICS = _words(
    """alias alias_magic autoawait autocall automagic autosave bookmark cat cd clear code_wrap
    colors conda config connect_info cp debug dhist dirs doctest_mode ed edit env gui hist
    history killbgscripts ldir less lf lk ll load load_ext loadpy logoff logon logstart
    logstate logstop ls lsmagic lx macro magic mamba man matplotlib micromamba mkdir more mv
    notebook page pastebin pdb pdef pdoc pfile pinfo pinfo2 pip popd pprint precision prun
    psearch psource pushd pwd pycat pylab qtconsole quickref recall rehashx reload_ext rep
    rerun reset reset_selective rm rmdir run save sc set_env subshell sx system tb time timeit
    unalias unload_ext uv who who_ls whos xdel xmode autoreload aimport store"""
)


@cache
def _transformer():
    from IPython.core.inputtransformer2 import TransformerManager  # lazy: IPython is heavy

    return TransformerManager()


_PROMPT = re.compile(r"^(>>>|In \[\d+\]: |\s*\.\.\.+: )", re.MULTILINE)


@lru_cache(maxsize=4096)
def _parse(source: str) -> tuple[ast.Module | None, int, str]:
    """(tree, leading blank lines IPython dropped, text) of source as IPython runs it.

    Source that already parses as Python, with no prompt for IPython to strip, is what
    IPython runs: its transforms only rewrite what is not Python (tests check this)."""
    if not _PROMPT.search(source):
        try:
            return ast.parse(source), 0, source
        except (SyntaxError, ValueError, RecursionError):
            pass
    try:
        text = _transformer().transform_cell(source)
        lines = source.splitlines()
        lead = next((i for i, line in enumerate(lines) if line.strip()), 0)
    except Exception:  # IPython's transformer can fail on odd input; read it as it is
        text, lead = source, 0
    try:
        return ast.parse(text), lead, text
    except (SyntaxError, ValueError, RecursionError):
        return None, lead, text


class CellSource(str):
    """A code cell's source that knows its cell's number in the notebook: all cells count,
    Markdown included, from 1, as the report card numbers them. `Kernel.sources` gives
    these, so the scan names a cell as the card does; a plain string is numbered by its
    place among the sources scanned ("code cell N")."""

    number: int

    def __new__(cls, source: str, number: int) -> CellSource:
        text = super().__new__(cls, source)
        text.number = number
        return text

    def __getnewargs__(self) -> tuple[str, int]:  # type: ignore[override]  # copy and pickle
        return str(self), self.number


def _read_cells(sources: list[str]) -> list[_Cell]:
    cells = []
    shadowing = set(_BUILTIN_NAMES)  # names bound so far, which hide a magic's name
    for number, source in enumerate(sources, start=1):
        tree, lead, text = _parse(source)
        magic = _automagic(text)
        if magic and magic[0] not in shadowing:
            tree = ast.parse(f"get_ipython().run_line_magic({magic[0]!r}, {magic[1]!r})")
        if tree is not None:
            shadowing |= _bound(_own_nodes(tree.body))
            local = "global" not in text and "get_ipython" not in text  # globals() too
            cells.append(_Cell(number, tree, lead, local))
    return cells


def _automagic(text: str) -> tuple[str, str] | None:
    """(magic, argument) when IPython would run this one-line cell as a line magic."""
    lines = text.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)  # as IPython drops leading blank lines; a trailing one makes two lines
    if len(lines) != 1:
        return None
    match = re.match(r"\s*([\w.*]*)(.*)", lines[0])
    assert match is not None  # the pattern matches any line
    name, rest = match.groups()
    if name not in _LINE_MAGICS or rest.lstrip()[:1] in ("=", ","):
        return None
    return name, rest.strip()


def _magic_call(node: ast.Call) -> tuple[str, list[str]] | None:
    """(method, constant arguments) of IPython's get_ipython().run_*_magic/system/getoutput."""
    func = node.func
    arity = {"run_line_magic": 2, "run_cell_magic": 3, "system": 1, "getoutput": 1}
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in arity
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "get_ipython"
        and not func.value.args
        and not func.value.keywords
        and not node.keywords
        and len(node.args) == arity[func.attr]
    ):
        return None
    args = [_const(a) for a in node.args]
    constants = [a for a in args if a is not None]
    if len(constants) != len(args):
        return None
    return func.attr, constants


def _statement(line: str, takes_value: str) -> str:
    """The Python statement after a %time/%timeit/%prun line's options."""
    rest = line.lstrip()
    while rest.startswith("-"):
        token, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        letters = "" if token.startswith("--") else token[1:]
        for i, letter in enumerate(letters):
            if letter in takes_value:
                if i == len(letters) - 1:
                    _, _, rest = rest.partition(" ")
                    rest = rest.lstrip()
                break
    return rest

"""The static scan flags what a name is bound to, machinery evasions need, and magics that run
code outside the cells; it stays quiet about from-scratch code and top-level checks."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from grader.core.notebook import read_notebook
from grader.exercises._attention import ATTENTION, FORBIDDEN
from grader.suite.exercise import load_catalog
from grader.suite.scan import _CHECK_NAME, _parse, scan, scan_cells

ROOT = Path(__file__).resolve().parent.parent
PRIVATE = ATTENTION.private
IMPORTS = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F"


def findings(*cells: str) -> list[str]:
    return scan([IMPORTS, *cells], FORBIDDEN, PRIVATE)


# -- A. what a name is bound to ------------------------------------------------------------


@pytest.mark.parametrize(
    "cells",
    [
        ["def f(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)"],
        [
            "from torch.nn.functional import scaled_dot_product_attention as sdpa",
            "def f(q, k, v):\n    return sdpa(q, k, v)",
        ],
        [
            "class M(nn.Module):\n    def __init__(self):\n        self.a = torch.nn.MultiheadAttention(8, 2)"
        ],
        ["from torch.nn import MultiheadAttention", "class M:\n    a = MultiheadAttention(8, 2)"],
        [
            "import torch as t\ndef f(q):\n    return t.nn.functional.scaled_dot_product_attention(q, q, q)"
        ],
        ["from torch import nn as tnn\ndef f():\n    return tnn.MultiheadAttention(8, 2)"],
        [
            "from torch.nn import functional\ndef f(*a):\n    return functional.multi_head_attention_forward(*a)"
        ],
        ["f = F.scaled_dot_product_attention", "def g(q):\n    return f(q, q, q)"],
        [
            "attn = torch.nn.MultiheadAttention",
            "class M(nn.Module):\n    def forward(self, x):\n        return attn(8, 2)(x, x, x)",
        ],
        ["def f(q):\n    return getattr(F, 'scaled_dot_product_attention')(q, q, q)"],
        ["def f(q):\n    return F.__getattribute__('scaled_dot_product_attention')(q, q, q)"],
        ["f = getattr(F, 'scaled_dot_product_attention')", "def g(q):\n    return f(q, q, q)"],
        ["def f(*a):\n    return torch._native_multi_head_attention(*a)"],
        ["class M(nn.MultiheadAttention):\n    pass"],
        ["def f(q, attn=F.scaled_dot_product_attention):\n    return attn(q, q, q)"],
        [
            "import functools\nf = functools.partial(F.scaled_dot_product_attention, dropout_p=0.0)",
            "def g(q):\n    return f(q, q, q)",
        ],
        [
            "from torch.nn.functional import *",
            "def g(q):\n    return scaled_dot_product_attention(q, q, q)",
        ],
        [
            "mha = nn.MultiheadAttention(8, 2)",
            "class M(nn.Module):\n    def forward(self, x):\n        return mha(x, x, x)[0]",
        ],
        ["globals()['f'] = F.scaled_dot_product_attention", "def g(q):\n    return f(q, q, q)"],
        ["f = F.scaled_dot_product_attention", "def g(q):\n    return globals()['f'](q, q, q)"],
        ["def g(q, w):\n    return F._in_projection_packed(q, q, q, w)"],
        ["def g(q):\n    return torch._scaled_dot_product_flash_attention_for_cpu(q, q, q)"],
        [
            "for fn in [F.scaled_dot_product_attention]:\n    pass",
            "def g(q):\n    return fn(q, q, q)",
        ],
        # a function's own import: the attribute through the local is torch's
        [
            "def g(q):\n    import torch.nn.functional as G\n    return G.scaled_dot_product_attention(q, q, q)"
        ],
        [
            "def g(q):\n    import torch\n    return torch.nn.functional.scaled_dot_product_attention(q, q, q)"
        ],
        [
            "class M:\n    def f(self, q):\n        from torch.nn import functional as G\n        return G.scaled_dot_product_attention(q, q, q)"
        ],
        [
            "def g(q):\n    G = torch.nn.functional\n    return G.scaled_dot_product_attention(q, q, q)"
        ],
    ],
)
def test_built_ins_the_graded_code_reaches_are_found(cells):
    assert findings(*cells), cells


def test_names_the_cell_and_line():
    assert findings(
        "a = 1", "def f(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)"
    ) == ["code cell 3, line 2: uses scaled_dot_product_attention"]


def test_an_alias_is_reported_where_it_is_bound_and_where_it_is_used():
    assert findings(
        "from torch.nn.functional import scaled_dot_product_attention as sdpa",
        "class M(nn.Module):\n    def forward(self, q):\n        return sdpa(q, q, q)",
    ) == [
        "code cell 2, line 1: binds sdpa to torch's scaled_dot_product_attention, which M.forward uses",
        "code cell 3, line 3: uses scaled_dot_product_attention (as sdpa)",
    ]


def test_torch_is_read_as_torch_even_without_an_import():
    assert scan(
        ["def f(q):\n    return F.scaled_dot_product_attention(q, q, q)"], FORBIDDEN, PRIVATE
    )


SEED_001_STYLE = [
    "def scaled_dot_product_attention(q, k, v, mask=None):\n"
    '    """Like F.scaled_dot_product_attention, from scratch."""\n'
    "    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5\n"
    "    return torch.softmax(scores, -1) @ v, scores\n",
    "def multi_head_attention(q, k, v, num_heads, d_model, mask=None):\n"
    "    # not nn.MultiheadAttention: our own scaled_dot_product_attention\n"
    "    out, _ = scaled_dot_product_attention(q, k, v, mask)\n"
    "    return out\n",
    'if __name__ == "__main__":\n'
    "    multihead_attn = nn.MultiheadAttention(8, 2, bias=False, batch_first=True)\n"
    "    lin = nn.Linear(8, 8, bias=False)\n"
    "    def multi_head_attention(q, k, v, num_heads, d_model, mask=None):\n"
    "        out, _ = scaled_dot_product_attention(lin(q), k, v, mask)\n"
    "        return out\n"
    "    x = torch.rand(3, 4, 8)\n"
    "    ours = multi_head_attention(x, x, x, 2, 8)\n"
    "    theirs, _ = multihead_attn(x, x, x)\n"
    '    assert torch.allclose(ours, theirs), "Outputs do not match!"\n'
    '    print("Test without mask passed!")\n',
]


@pytest.mark.parametrize(
    "cells",
    [
        SEED_001_STYLE,
        [
            "class MultiheadAttention(nn.Module):\n    def forward(self, x):\n        return x",
            "m = MultiheadAttention()\ny = m(torch.randn(2, 3))",
        ],
        [
            'def f(x):\n    """Does what F.scaled_dot_product_attention does, without it."""\n'
            "    # nn.MultiheadAttention would be cheating\n"
            "    print('no scaled_dot_product_attention here', 'MultiheadAttention')\n"
            "    return x"
        ],
        ["name = 'multi_head_attention_forward'\nprint(f'{name} and MultiheadAttention')"],
        [
            "class MHA(nn.Module):\n    def forward(self, x):\n        return x, None",
            "ref = nn.MultiheadAttention(8, 2, batch_first=True)\nmine = MHA()\n"
            "x = torch.randn(2, 5, 8)\nwith torch.no_grad():\n"
            "    out, w = ref(x, x, x)\n    want = F.scaled_dot_product_attention(x, x, x)\n"
            "torch.testing.assert_close(mine(x)[0], out)",
        ],
        [
            "def compare_with_pytorch():\n    ref = nn.MultiheadAttention(8, 2)\n"
            "    x = torch.randn(2, 5, 8)\n    return ref(x, x, x)",
            "compare_with_pytorch()",
        ],
        [
            "def run_mha_basic_tests():\n    ref = nn.MultiheadAttention(8, 2)\n    check()",
            "def check():\n    assert F.scaled_dot_product_attention is not None",
            "run_mha_basic_tests()",
        ],
        ["mha = nn.MultiheadAttention(8, 2)", "def f(mha, x):\n    return mha(x, x, x)"],
        ["ok = hasattr(F, 'scaled_dot_product_attention')"],
        [
            "model = nn.Linear(4, 4)\nmodel.eval()\nfast = torch.compile(model)\nimport re\nr = re.compile('x')"
        ],
        [
            "class M(nn.Module):\n    def forward(self, x, name):\n"
            "        return getattr(self, 'q_proj')(x) + getattr(self, name)(x)"
        ],
        ["torch.backends.mha.set_fastpath_enabled(False)\nprint(torch.__version__)"],
        [
            "class Lin(nn.Module):\n    def reset(self):\n"
            "        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)"
        ],
        ["def syntax error(:"],
        ["scores = q @ k.transpose(-2, -1) / math.sqrt(d)\nw = torch.softmax(scores, -1)"],
    ],
)
def test_from_scratch_code_and_top_level_checks_are_clean(cells):
    assert findings(*cells) == []


def test_check_code_is_reported_as_a_reference_outside_the_graded_code():
    result = scan_cells(
        [IMPORTS, "ref = nn.MultiheadAttention(8, 2)",
         "class M(nn.Module):\n    def forward(self, x):\n        return F.scaled_dot_product_attention(x, x, x)"],
        FORBIDDEN, PRIVATE,
    )  # fmt: skip
    assert [(str(r), r.inside) for r in result.references] == [
        ("code cell 2, line 1: uses MultiheadAttention", None),
        ("code cell 3, line 3: uses scaled_dot_product_attention", "M.forward"),
    ]
    assert [str(f) for f in result.findings] == [str(result.references[1])]


@pytest.mark.parametrize(
    "cells",
    [
        # used by the graded code
        ["def check_attention(q):\n    return F.scaled_dot_product_attention(q, q, q)",
         "class M(nn.Module):\n    def forward(self, q):\n        return check_attention(q)"],
        # writes notebook-level state the graded code reads
        ["def test_setup():\n    global f\n    f = F.scaled_dot_product_attention", "test_setup()",
         "def g(q):\n    return f(q, q, q)"],
        ["class M(nn.Module):\n    pass",
         "def test_patch():\n    M.forward = lambda self, q: F.scaled_dot_product_attention(q, q, q)",
         "test_patch()"],
        # its result is kept, and the graded code uses it
        ["def test_make():\n    return nn.MultiheadAttention(8, 2)", "made = test_make()",
         "class M(nn.Module):\n    def forward(self, x):\n        return made(x, x, x)[0]"],
        # shares state with the implementation
        ["registry = {}",
         "def test_setup():\n    registry.update(attn=F.scaled_dot_product_attention)",
         "test_setup()",
         "class M(nn.Module):\n    def forward(self, q):\n        return registry['attn'](q, q, q)"],
    ],
)  # fmt: skip
def test_check_functions_that_can_reach_the_graded_code_are_not_exempt(cells):
    assert findings(*cells), cells


def test_no_graded_name_looks_like_a_check_function():
    graded = {name for exercise in load_catalog().values() for name in exercise.defines}
    assert not {name for name in graded if _CHECK_NAME.match(name)}


# -- reachability: only code the graded objects (an exercise's `defines`) reach counts ------

NORMS_CODE = (
    "def layer_norm(x, weight, bias, eps=1e-5):\n"
    "    centered = x - x.mean(-1, keepdim=True)\n"
    "    return centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps) * weight + bias\n"
    "\n"
    "class LayerNorm(nn.Module):\n"
    "    def __init__(self, dim):\n"
    "        super().__init__()\n"
    "        self.weight = nn.Parameter(torch.ones(dim))\n"
    "        self.bias = nn.Parameter(torch.zeros(dim))\n"
    "\n"
    "    def forward(self, x):\n"
    "        return layer_norm(x, self.weight, self.bias)\n"
)
NORMS_CHECK = (
    "def {name}():\n"
    "    x = torch.randn(4, 8)\n"
    "    ours = layer_norm(x, torch.ones(8), torch.zeros(8))\n"
    "    return torch.allclose(ours, F.layer_norm(x, (8,)), atol=1e-6)\n"
)
CE_CODE = (
    "def log_softmax(x, dim=-1):\n"
    "    shifted = x - x.amax(dim, keepdim=True)\n"
    "    return shifted - shifted.exp().sum(dim, keepdim=True).log()\n"
    "\n"
    "def cross_entropy(logits, target):\n"
    "    return -log_softmax(logits).gather(-1, target[:, None]).mean()\n"
)
CE_CHECK = (
    "def {name}():\n"
    "    x, t = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])\n"
    "    same = torch.allclose(log_softmax(x), F.log_softmax(x, -1))\n"
    "    return same and torch.allclose(cross_entropy(x, t), F.cross_entropy(x, t))\n"
)
ATTENTION_CODE = (
    "class MultiHeadAttention(nn.Module):\n"
    "    def forward(self, q, k, v):\n"
    "        w = torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, -1)\n"
    "        return w @ v\n"
)
ATTENTION_CHECK = (
    "def {name}():\n"
    "    q = torch.randn(2, 2, 5, 4)\n"
    "    ref = nn.MultiheadAttention(8, 2, batch_first=True)\n"
    "    ours = MultiHeadAttention()(q, q, q)\n"
    "    return torch.allclose(ours, F.scaled_dot_product_attention(q, q, q), atol=1e-6)\n"
)
SELF_CHECKS = {
    "norms": (NORMS_CODE, NORMS_CHECK),
    "cross_entropy": (CE_CODE, CE_CHECK),
    "mha_interview": (ATTENTION_CODE, ATTENTION_CHECK),
}


@functools.cache
def _catalog():
    return load_catalog()


def graded_findings(exercise_id: str, *cells: str) -> list[str]:
    """Findings with the exercise's forbidden built-ins and its graded names."""
    exercise = _catalog()[exercise_id]
    sources = [IMPORTS, *cells]
    return scan(sources, exercise.forbidden, exercise.watch.private, exercise.defines)


@pytest.mark.parametrize("exercise_id", sorted(SELF_CHECKS))
@pytest.mark.parametrize(
    "use",
    ["print(check())", "assert check(), 'differs from torch'", "print(f'matches torch: {check()}')",
     "ok = check()", "for _ in range(3):\n    check()", "results = [check() for _ in range(3)]",
     "check()"],
)  # fmt: skip
def test_a_self_check_helper_keeps_full_marks_however_top_level_code_uses_it(exercise_id, use):
    code, helper = SELF_CHECKS[exercise_id]
    assert graded_findings(exercise_id, code, helper.format(name="check"), use) == []


@pytest.mark.parametrize("exercise_id", sorted(SELF_CHECKS))
@pytest.mark.parametrize("name", ["compare_with_torch", "my_helper"])
def test_a_helper_only_top_level_code_uses_keeps_full_marks_whatever_its_name(exercise_id, name):
    code, helper = SELF_CHECKS[exercise_id]
    uses = f"print({name}())\nassert {name}()\nprint(f'{{{name}()}}')\nok = {name}()"
    assert graded_findings(exercise_id, code, helper.format(name=name), uses) == []


FAST_LAYER_NORM = (
    "def _fast(self, x):\n    return F.layer_norm(x, x.shape[-1:], self.weight, self.bias)"
)


@pytest.mark.parametrize(
    ("exercise_id", "cells"),
    [
        # a graded function calls a helper that calls the built-in
        ("norms", ["def _normalize(x):\n    return F.layer_norm(x, x.shape[-1:])",
                   "def layer_norm(x, weight, bias, eps=1e-5):\n"
                   "    return _normalize(x) * weight + bias"]),
        ("cross_entropy", [CE_CODE.replace("-log_softmax(logits)", "-_stable(logits)"),
                           "def _stable(x):\n    return F.log_softmax(x, -1)"]),
        # a graded class whose method top-level code replaces with one using the built-in
        ("norms", [NORMS_CODE, FAST_LAYER_NORM, "LayerNorm.forward = _fast"]),
        ("norms", [NORMS_CODE, "class RMSNorm(nn.Module):\n    pass",
                   "RMSNorm.forward = lambda self, x: F.rms_norm(x, x.shape[-1:])"]),
        ("norms", [NORMS_CODE, FAST_LAYER_NORM, "setattr(LayerNorm, 'forward', _fast)"]),
        ("norms", [NORMS_CODE, FAST_LAYER_NORM,
                   "def install(cls):\n    cls.forward = _fast", "install(LayerNorm)"]),
        ("mha_interview", [ATTENTION_CODE,
                           "def _fast(self, q, k, v):\n"
                           "    return F.scaled_dot_product_attention(q, k, v)",
                           "MultiHeadAttention.forward = _fast"]),
        # a module-level alias of the built-in that a graded function uses
        ("norms", ["_ln = F.layer_norm",
                   "def layer_norm(x, weight, bias, eps=1e-5):\n"
                   "    return _ln(x, x.shape[-1:], weight, bias, eps)"]),
        ("cross_entropy", ["from torch.nn.functional import log_softmax as _lsm",
                           CE_CODE.replace("-log_softmax(logits)", "-_lsm(logits, -1)")]),
        # a graded name bound to the built-in, by name or through the namespace
        ("norms", [NORMS_CODE, "globals()['layer_norm'] = F.layer_norm"]),
        ("norms", [NORMS_CODE, "globals().update(layer_norm=F.layer_norm)"]),
        ("norms", ["layer_norm = F.layer_norm"]),
        # an object the graded code reads, filled by top-level code
        ("norms", ["_impl = {}", "_impl.update(fn=F.layer_norm)",
                   "def layer_norm(x, weight, bias, eps=1e-5):\n"
                   "    return _impl['fn'](x, x.shape[-1:], weight, bias, eps)"]),
    ],
)  # fmt: skip
def test_what_the_graded_objects_reach_is_a_finding(exercise_id, cells):
    exercise = _catalog()[exercise_id]
    sources = [IMPORTS, *cells]
    result = scan_cells(sources, exercise.forbidden, exercise.watch.private, exercise.defines)
    assert result.builtins, cells


def test_a_graded_name_bound_to_the_built_in_is_named_at_the_binding():
    assert graded_findings("norms", NORMS_CODE, "globals()['rms_norm'] = F.rms_norm") == [
        "code cell 3, line 1: binds rms_norm, a graded name, to torch's rms_norm"
    ]


def test_the_suites_scan_reads_the_graded_names_from_the_watch():
    """`require_clean_source(kernel.sources, exercise.forbidden, exercise.watch, ...)`, as
    every suite calls it, grades the exercise's `defines` (`Exercise` gives them to its watch)."""
    from grader.suite.checks import Failed
    from grader.suite.integrity import require_clean_source

    assert all(e.watch.graded == e.defines for e in _catalog().values())
    norms = _catalog()["norms"]
    honest = [IMPORTS, NORMS_CODE, NORMS_CHECK.format(name="my_helper"), "print(my_helper())"]
    require_clean_source(honest, norms.forbidden, norms.watch)
    with pytest.raises(Failed, match="uses layer_norm"):  # no graded names: my_helper is graded
        require_clean_source(honest, norms.forbidden, replace(norms.watch, graded=()))
    patched = [IMPORTS, NORMS_CODE, FAST_LAYER_NORM, "LayerNorm.forward = _fast"]
    with pytest.raises(Failed, match="cell 3, line 2: uses layer_norm"):
        require_clean_source(patched, norms.forbidden, norms.watch)


# -- B. machinery, wherever it appears -----------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import threading", "uses threading, which can run code the grader does not watch"),
        ("from threading import Thread\nThread(target=print).start()", "uses threading"),
        ("import _thread", "uses _thread"),
        ("from concurrent.futures import ThreadPoolExecutor", "uses concurrent.futures"),
        ("import multiprocessing as mp", "uses multiprocessing"),
        ("loop.run_in_executor(None, print)", "uses run_in_executor"),
        ("import asyncio\nasyncio.to_thread(print)", "uses asyncio.to_thread"),
        ("import ctypes", "uses ctypes, which calls native code directly"),
        ("import cffi", "uses cffi"),
        ("import gc\nobjs = gc.get_objects()", "uses gc.get_objects"),
        ("import gc\ngc.get_referrers(F)", "uses gc.get_referrers"),
        ("from gc import get_referents", "uses gc.get_referents"),
        ("import inspect\nframe = inspect.currentframe()", "uses inspect.currentframe"),
        ("import inspect\ninspect.getclosurevars(print)", "uses inspect.getclosurevars"),
        ("import sys\nframe = sys._getframe(1)", "uses sys._getframe"),
        ("import sys\nsys.settrace(None)", "uses sys.settrace"),
        ("import sys\nsys.setprofile(None)", "uses sys.setprofile"),
        ("import sys\nm = sys.modules['torch.nn.functional']", "uses sys.modules"),
        ("import sys\nsys.addaudithook(print)", "uses sys.addaudithook"),
        ("import builtins\nbuiltins.print = len", "uses builtins"),
        ("__builtins__.__dict__['len'] = print", "uses builtins"),
        ("lib = torch.library.Library('aten', 'IMPL')", "uses torch.library"),
        ("torch._C._set_grad_enabled(True)", "uses torch._C"),
        ("op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu", "uses torch.ops"),
        ("from torch.overrides import TorchFunctionMode", "uses torch.overrides"),
        ("from torch.utils._python_dispatch import _pop_mode", "uses torch.utils._python_dispatch"),
        ("from torch.utils._python_dispatch import _disable_current_modes", "_python_dispatch"),
        ("torch._dynamo.reset()", "uses torch._dynamo"),
        ("code = f.__code__", "reaches __code__"),
        ("cells = f.__closure__", "reaches __closure__"),
        ("g = f.__globals__", "reaches __globals__"),
        ("inner = F.scaled_dot_product_attention.__wrapped__", "reaches __wrapped__"),
        ("consts = f.__code__.co_consts", "reaches co_consts"),
        ("up = frame.f_back", "reaches f_back"),
        ("loc = frame.f_locals", "reaches f_locals"),
        ("glob = frame.f_globals", "reaches f_globals"),
        ("fr = tb.tb_frame", "reaches tb_frame"),
        ("fr = gen.gi_frame", "reaches gi_frame"),
        ("code = getattr(f, '__code__')", "reaches __code__"),
        ("mod = __import__('torch')", "uses __import__(), which imports by computed name"),
        ("import importlib", "uses importlib"),
        ("import importlib\nm = importlib.import_module('torch.nn.functional')", "uses importlib"),
        ("exec(code)", "uses exec(), which runs code from a string"),
        ("x = eval('1 + 1')", "uses eval()"),
        ("c = compile('x = 1', 'f', 'exec')", "uses compile()"),
        ("import timeit\ntimeit.timeit('F.softmax(x, -1)', globals=globals())", "timeit.timeit"),
        ("import runpy", "uses runpy"),
        ("name = 'multi_head_attention_forward'\nf = getattr(torch.nn.functional, name)",
         "looks up a torch attribute by a computed name"),
        ("f = getattr(F, 'scaled_dot_product_' + 'attention')", "computed name"),
        ("setattr(F, name, print)", "computed name"),
        ("import functools\nf = functools.reduce(getattr, ['nn', 'functional'], torch)",
         "uses getattr as a value"),
        ("f = vars(F)['scaled_dot_product_attention']", "vars()"),
        ("f = type(F).__getattribute__(F, 'scaled_dot_' + 'product_attention')", "computed name"),
        ("f = F.__getattribute__(name)", "computed name"),
        ("object.__setattr__(F, name, print)", "computed name"),
        ("import grader.exercises.mha_interview.suite as s", "uses grader, which reaches the grader"),
        ("from grader.exercises import _attention", "uses grader"),
        ("f = torch.nn.functional.__dict__['scaled_dot_product_attention']", "__dict__"),
        ("import operator\nf = operator.attrgetter('nn.functional')(torch)",
         "uses operator.attrgetter"),
        ("import pydoc\nf = pydoc.locate('torch.nn.functional.softmax')", "uses pydoc.locate"),
        ("globals()[name] = print", "writes the notebook's namespace by computed name"),
        ("globals().update(f=print)", "writes the notebook's namespace"),
        ("import pickle", "uses pickle, which loads code the scan does not see"),
        ("import subprocess", "uses subprocess, which runs a shell command"),
        ("import os\nos.system('ls')", "uses os.system"),
        ("import os\nos.popen('ls')", "uses os.popen"),
        ("import os\npid = os.fork()", "uses os.fork, which starts a process"),
        ("import os\nos.execv('/bin/sh', ['sh'])", "uses os.execv"),
        ("from os import system\nsystem('ls')", "uses os.system"),
        ("import pty", "uses pty"),
        ("ip = get_ipython()\nip.run_cell('x = 1')", "uses IPython.get_ipython"),
        ("get_ipython().run_line_magic(name, '')", "uses IPython.get_ipython"),
    ],
)  # fmt: skip
def test_machinery_is_found_even_in_top_level_code(source, expected):
    found = findings(source)
    assert any(expected in f for f in found), found


def test_machinery_inside_a_check_function_is_still_found():
    assert findings("def test_it():\n    import threading", "test_it()") == [
        "code cell 2, line 2: uses threading, which can run code the grader does not watch"
    ]


# -- C. magics ---------------------------------------------------------------------------------

USES_SDPA = "def f(q):\n    return F.scaled_dot_product_attention(q, q, q)"


@pytest.mark.parametrize("magic", ["%%time", "%%timeit", "%%capture out", "%%prun -q"])
def test_python_cell_magics_have_their_body_scanned(magic):
    assert findings(f"\n{magic}\n{USES_SDPA}") == [
        "code cell 2, line 4: uses scaled_dot_product_attention"
    ]


def test_timeit_setup_line_is_scanned():
    assert findings("%%timeit -n 3 import threading\nx = 1") == [
        "code cell 2, line 1: uses threading, which can run code the grader does not watch"
    ]


def test_writefile_to_a_python_file_is_found_and_its_body_scanned():
    assert findings("%%writefile -a helper.py\nimport threading\n") == [
        "code cell 2, line 1: writes a Python file that is then outside the cells (helper.py)",
        "code cell 2, line 2: uses threading, which can run code the grader does not watch",
    ]


def test_writefile_to_a_data_file_is_clean():
    assert findings("%%writefile notes.txt\nimport threading\n") == []


@pytest.mark.parametrize(
    "magic",
    ["script python", "bash", "sh", "python", "python3", "pypy", "perl", "ruby", "html",
     "javascript", "js", "markdown", "debug", "madeup"],
)  # fmt: skip
def test_other_cell_magics_are_found(magic):
    name = magic.split()[0]
    assert findings(f"%%{magic}\nprint(1)") == [
        f"code cell 2, line 1: runs its body outside the scanned cells (%%{name})"
    ]


@pytest.mark.parametrize(
    "line",
    ["%run helper.py", "%load helper.py", "%load_ext autoreload", "%reload_ext foo",
     "%autoreload 2", "%aimport helper", "%env X=1", "%macro m 1-2", "%recall 1", "%rerun",
     "%pip install x; ls", "%sx ls", "%system ls", "%store -r x",
     "%edit x", "%config InlineBackend.figure_format = 'svg'", "%cd /tmp", "%alias x ls",
     "%code_wrap w", "%madeup", "x = %sx ls", "!ls", "x = !ls", "!!ls"],
)  # fmt: skip
def test_line_magics_and_shell_escapes_that_can_run_outside_code_are_found(line):
    found = findings(f"x = 1\n{line}")
    assert len(found) == 1 and found[0].startswith("code cell 2, line 2: "), found


@pytest.mark.parametrize(
    "line",
    ["%time y = torch.ones(3)", "%timeit -n 3 -r 1 torch.ones(3)", "%matplotlib inline",
     "%who", "%whos", "%pwd", "%precision 3", "F.softmax?", "%prun -q -l 3 torch.ones(3)"],
)  # fmt: skip
def test_harmless_line_magics_are_clean(line):
    assert findings(line) == []


def test_time_line_magic_statement_is_scanned():
    assert findings("%time import threading") == [
        "code cell 2, line 1: uses threading, which can run code the grader does not watch"
    ]


def test_a_magic_inside_a_function_is_read_in_that_function():
    source = "def f(q):\n    %time y = F.scaled_dot_product_attention(q, q, q)\n    return y"
    result = scan_cells([IMPORTS, source], FORBIDDEN, PRIVATE)
    assert [(str(f), f.inside) for f in result.findings] == [
        ("code cell 2, line 2: uses scaled_dot_product_attention", "f")
    ]


@pytest.mark.parametrize(
    "cells",
    [["run helper.py"], ["\npip install x && python x.py\n"], ["ls -la"], ["run(x)"],
     ["run helper.py", "def run(x):\n    return x"]],
)  # fmt: skip
def test_one_line_automagic_cells_are_read_as_magics(cells):
    assert findings(*cells), cells


@pytest.mark.parametrize(
    "cells",
    [["run = 3"], ["ls, x = 1, 2"], ["def run(x):\n    return x", "run(3)"], ["who\n\n"]],
)
def test_one_line_python_cells_that_shadow_a_magic_stay_python(cells):
    assert findings(*cells) == []


def test_cells_that_parse_as_python_are_what_ipython_runs():
    from IPython.core.inputtransformer2 import TransformerManager

    manager = TransformerManager()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for _, source in read_notebook(path).code_cells:
            tree, lead, _ = _parse(source)
            assert lead == 0
            assert ast.dump(tree) == ast.dump(ast.parse(manager.transform_cell(source)))


def test_ipython_is_not_imported_for_plain_python():
    code = (
        "import sys; from grader.suite.scan import scan; scan(['import torch\\nx = 1'], ());"
        "assert 'IPython' not in sys.modules; scan(['%time x = 1'], ());"
        "assert 'IPython' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# -- the shipped notebooks and the suites' entry point ---------------------------------------


def test_every_solution_scans_clean_with_its_exercise_forbidden_names():
    """The graded code (what the exercise's graded names reach, as grading scans it) names
    no built-in; a self-check cell may call the built-in as its reference (conv2d's
    compares with F.conv2d), which is no use by the graded code."""
    from grader.suite.integrity import require_clean_source

    catalog = load_catalog()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        notebook = read_notebook(path)
        sources = [source for _, source in notebook.code_cells]
        exercise = catalog[notebook.exercise_id]
        require_clean_source(sources, exercise.forbidden, exercise.watch)


def test_require_clean_source_names_the_first_finding():
    from grader.suite.checks import Failed
    from grader.suite.integrity import require_clean_source
    from grader.suite.integrity import scan as integrity_scan

    sources = [IMPORTS, USES_SDPA, USES_SDPA, "import threading"]
    assert integrity_scan(sources, FORBIDDEN) == scan(sources, FORBIDDEN)
    with pytest.raises(
        Failed, match=r"code cell 2, line 2: uses scaled_dot_product_attention \(\+1 more\)"
    ):
        require_clean_source(sources, FORBIDDEN, ATTENTION)
    require_clean_source([IMPORTS, "x = 1"], FORBIDDEN, ATTENTION)


def test_machinery_and_magics_are_notes_not_a_failed_source_check():
    # A penalty needs evidence: a shell command, a thread or subprocess in the source is a
    # note on the card; only a built-in the graded code names fails the source check.
    from grader.suite.integrity import require_clean_source
    from grader.suite.scan import scan_cells

    sources = [IMPORTS, "!ls -la\n%env X=1\nimport subprocess, threading\n", "x = 1"]
    require_clean_source(sources, FORBIDDEN, ATTENTION)
    result = scan_cells(sources, FORBIDDEN)
    assert result.builtins == ()
    assert [n.message for n in result.notes][:1] == ["ran a shell command: ls -la"]
    assert len(result.notes) >= 3


@pytest.mark.parametrize(
    "cell",
    ["!pip install einops", "%pip install -q einops numpy", "pip install einops",
     "!python -m pip install einops", "%conda install einops"],
)  # fmt: skip
def test_installing_a_package_is_not_a_finding(cell):
    # The kernel imports only the declared environment and pip writes to the scratch space.
    assert findings(cell) == []


def test_authors_calls_name_cells_as_the_card_does_markdown_cells_counted():
    """`require_clean_source(kernel.sources, ...)`, as the authoring guide writes it, and the
    scan functions given `kernel.sources` number cells as the card does: all cells count."""
    import types

    import nbformat

    from grader.core.notebook import Notebook
    from grader.suite.checks import Failed
    from grader.suite.handle import Kernel
    from grader.suite.integrity import require_clean_source

    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    node = nbformat.v4.new_notebook(
        cells=[md("# Attention"), code(IMPORTS), md("## Heads"), md("Now attend."), code(USES_SDPA)]
    )
    kernel = Kernel(types.SimpleNamespace(sources=Notebook(Path("nb.ipynb"), node).code_cells))
    want = "cell 5, line 2: uses scaled_dot_product_attention"
    with pytest.raises(Failed, match=f"in the source: {want}$") as readme_form:
        require_clean_source(kernel.sources, FORBIDDEN, ATTENTION)
    with pytest.raises(Failed) as with_numbers:  # the built-in suites' form
        require_clean_source(kernel.sources, FORBIDDEN, ATTENTION, kernel.cell_numbers)
    assert str(readme_form.value) == str(with_numbers.value)
    assert scan(kernel.sources, FORBIDDEN, PRIVATE) == [want]
    [finding] = scan_cells(kernel.sources, FORBIDDEN, PRIVATE).builtins
    assert (finding.cell, finding.line, str(finding)) == (5, 2, want)
    assert [getattr(s, "number", None) for s in kernel.sources] == [2, 5]
    # plain strings know no notebook: numbered among themselves, and said so
    assert scan([IMPORTS, USES_SDPA], FORBIDDEN) == [f"code {want.replace('5', '2', 1)}"]

"""The evasion corpus: notebooks that use an attention built-in and try to keep the
"from scratch" credit anyway.

Every case starts from solutions/mha_interview.ipynb and swaps its attention maths for a
built-in (F.scaled_dot_product_attention, nn.MultiheadAttention or
F.multi_head_attention_forward), keeping every earlier level at full marks. Most cases pair
a way to hide the built-in from the static scan with a way to hide it from the run-time
watch; `cover` says which run-time cover a case leans on when its own trick is a static one.

The contract (`assert_caught`): no case gets full marks silently, i.e. it loses points in
"from scratch" or the report's `integrity` list names something; "no credit" cases (reading
the hidden suite or its reference) must also score 0 with an integrity finding. A case
that is caught without an integrity finding must have lost points only in "from scratch":
losing them earlier would mean the case is broken, not caught.

Every trick is fail-soft: a tampering step the grader refuses (a blocked import, a missing
shim attribute, no threads) is skipped and the built-in still answers, so each case stays
correct on the earlier levels whatever the grader does; only detection can cost it points.

`python -m tests.test_evasions [NAME | FAMILY-NUMBER ...]` grades the corpus (or the cases
named) and prints, per case, the score, whether the levels before "from scratch" are full
(i.e. it is a working evasion), the from-scratch messages, integrity findings and cell
errors. `EVASIONS_ONLY=name,3 pytest tests/test_evasions.py` runs only those cases.
"""

from __future__ import annotations

import base64
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from tests.cohort import Cohort
from tests.helpers import SOLUTIONS, grade_many

SOLUTION = SOLUTIONS / "mha_interview.ipynb"
SCRATCH_LEVEL = "from scratch"
FLAGS: tuple[str, ...] = ()  # the default time limits: other kernels may share the machine

FAILS_FROM_SCRATCH = "fails from scratch"
INTEGRITY = "integrity finding"
NO_CREDIT = "no credit"

# -- the solution's attention maths, and what replaces it ----------------------------------

MATHS = """\
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        logits = self._apply_masks(logits, attn_mask, key_padding_mask)

        # softmax over a row of -inf is NaN: give fully blocked rows zero weights instead.
        blocked = torch.isneginf(logits).all(dim=-1, keepdim=True)
        weights = torch.softmax(logits.masked_fill(blocked, 0.0), dim=-1).masked_fill(blocked, 0.0)
"""

FORWARD = (
    """\
        source = x if kv is None else kv
        q = self._split_heads(self.q_proj(x))
        k = self._split_heads(self.k_proj(source))
        v = self._split_heads(self.v_proj(source))

"""
    + MATHS
    + """
        y = self.out_proj(self._merge_heads(self.dropout(weights) @ v))
        return y, (weights.mean(dim=1) if need_weights else None)
"""
)

INIT = "        self.dropout = nn.Dropout(cfg.dropout_p)\n"


def probs(fn: str = "_builtin_probs") -> str:
    """Forward's attention maths replaced: the masks become an additive bias, and the
    probabilities come from `fn(q, k, bias)` (a built-in) through `_Probs`."""
    return (
        "        bias = self._apply_masks(\n"
        "            q.new_zeros(*q.shape[:3], k.shape[2]), attn_mask, key_padding_mask\n"
        "        )\n"
        f"        weights = _Probs.apply(q, k, bias, {fn})\n"
    )


# The whole forward as one call of F.multi_head_attention_forward (held as `_mhaf`) with the
# module's own projections: y and the head-averaged weights come from the built-in.
MHAF_FORWARD = """\
        source = x if kv is None else kv
        B, T, E = x.shape
        H = self.cfg.num_heads
        mask = attn_mask
        if mask is not None:
            if mask.dtype == torch.bool:
                mask = ~mask
            if mask.dim() == 4:
                mask = mask[:, 0].repeat_interleave(H, dim=0)
        bias = None
        if self.q_proj.bias is not None:
            bias = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        y, w = _mhaf(
            x.transpose(0, 1), source.transpose(0, 1), source.transpose(0, 1), E, H,
            torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]), bias,
            None, None, False, self.cfg.dropout_p, self.out_proj.weight, self.out_proj.bias,
            training=self.training,
            key_padding_mask=None if key_padding_mask is None else ~key_padding_mask,
            need_weights=True, attn_mask=mask, average_attn_weights=True,
        )
        y = torch.nan_to_num(y.transpose(0, 1), nan=0.0)
        return y, (torch.nan_to_num(w, nan=0.0) if need_weights else None)
"""

# -- building blocks: the built-in behind a differentiable wrapper -------------------------

# `_run(job)` runs a job wherever the cover puts it; `_attn` is SDPA, however it was found.
PROBS = '''\
def _builtin_probs(q, k, bias):
    """Attention probabilities [B, H, T, S] from the built-in: attend to the identity."""
    S = k.shape[-2]
    eye = torch.eye(S, dtype=q.dtype).expand(*k.shape[:-2], S, S)
    return _attn(q, k, eye, attn_mask=bias)


class _Probs(torch.autograd.Function):
    """fn(q, k, bias) run by `_run`, its backward too (recomputed there with autograd)."""

    @staticmethod
    def forward(ctx, q, k, bias, fn):
        ctx.save_for_backward(q, k, bias)
        ctx.fn = fn

        def job():
            with torch.no_grad():
                return fn(q, k, bias)

        return _run(job)

    @staticmethod
    def backward(ctx, grad):
        q, k, bias = ctx.saved_tensors

        def job():
            with torch.enable_grad():
                qq = q.detach().requires_grad_(True)
                kk = k.detach().requires_grad_(True)
                return torch.autograd.grad(ctx.fn(qq, kk, bias), (qq, kk), grad)

        dq, dk = _run(job)
        return dq, dk, None, None
'''

# Per-head probabilities from an nn.MultiheadAttention with identity projections.
MODULE_PROBS = """\
def _module_probs(engine, q, k, bias):
    B, H, T, Dh = q.shape
    S = k.shape[2]
    engine = engine.to(q.dtype)
    qm = q.transpose(1, 2).reshape(B, T, H * Dh)
    km = k.transpose(1, 2).reshape(B, S, H * Dh)
    _, w = engine(
        qm, km, km, attn_mask=bias.reshape(B * H, T, S),
        need_weights=True, average_attn_weights=False,
    )
    return torch.nan_to_num(w, nan=0.0)


def _identity_engine(cls, E, H):
    engine = cls(E, H, bias=False, batch_first=True)
    with torch.no_grad():
        engine.in_proj_weight.copy_(torch.eye(E).repeat(3, 1))
    return engine.requires_grad_(False).eval()
"""

# nn.MultiheadAttention, found without naming it.
MHA_CLASS = """\
import torch.nn.modules.activation as _act

_MHA = getattr(_act, "Multihead" + "Attention")
"""

# SDPA, found without naming it (for the cases whose own trick is a run-time one).
SDPA_JOINED = """\
import torch.nn.functional as _fun

_attn = getattr(_fun, "_".join(["scaled", "dot", "product", "attention"]))
"""

SDPA_VARS = '_attn = vars(F)["scaled_dot_product_" + "attention"]\n'

# -- run-time covers: where `_run` runs a job -----------------------------------------------

THREAD = """\
import threading


def _run(job):
    box = {}

    def target():
        try:
            box["value"] = job()
        except BaseException as error:
            box["error"] = error

    worker = threading.Thread(target=target)
    try:
        worker.start()
    except Exception:  # threads refused: run it here
        return job()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
"""

EXECUTOR = """\
from concurrent.futures import ThreadPoolExecutor

_pool = ThreadPoolExecutor(max_workers=1)


def _run(job):
    try:
        future = _pool.submit(job)
    except Exception:  # threads refused: run it here
        return job()
    return future.result()
"""

QUEUE_WORKER = """\
import queue
import threading

_jobs = queue.Queue()


def _serve_jobs():
    while True:
        job, reply = _jobs.get()
        try:
            reply.put((True, job()))
        except BaseException as error:
            reply.put((False, error))


try:
    threading.Thread(target=_serve_jobs, daemon=True).start()
    _worker = True
except Exception:  # threads refused: run jobs here
    _worker = False


def _run(job):
    if not _worker:
        return job()
    reply = queue.Queue(maxsize=1)
    _jobs.put((job, reply))
    ok, value = reply.get()
    if not ok:
        raise value
    return value
"""

THREAD_POOL = """\
from multiprocessing.pool import ThreadPool

try:
    _threads = ThreadPool(1)
except Exception:  # threads refused: run jobs here
    _threads = None


def _run(job):
    if _threads is None:
        return job()
    return _threads.apply(job)
"""

DIRECT = "def _run(job):\n    return job()\n"

# Every pipe the kernel writes to swapped for a dead end while the job runs, then put
# back before the grader can look (it checks the channels' ends after each call).
SILENCE_PIPES = """\
import fcntl
import os
import stat


def _run(job):
    pipes = []
    for fd in range(3, 256):
        try:
            writes = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and writes:
                pipes.append(fd)
        except OSError:
            pass
    sink_r, sink_w = os.pipe()
    saved = {fd: os.dup(fd) for fd in pipes}
    try:
        for fd in saved:
            os.dup2(sink_w, fd)
        return job()
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(sink_r)
        os.close(sink_w)
"""

CLEAR_SEEN = """\
import contextlib
import sys


def _run(job):
    try:
        return job()
    finally:
        for name, module in list(sys.modules.items()):
            if name.startswith("_grader_shim"):
                with contextlib.suppress(Exception):
                    module._seen.clear()
"""

# Tampering with the shim, fail-soft: if the grader blocks it, the built-in still answers.
TAMPER = """\
import contextlib
import sys

for _name, _module in list(sys.modules.items()):
    if not _name.startswith("_grader_shim"):
        continue
    with contextlib.suppress(Exception):
"""

EMPTY_WATCH = (
    DIRECT
    + "\n"
    + TAMPER
    + (
        """\
        _module._watch_functions = frozenset()
        _module._watch_ops = ()
"""
    )
)

REPLACE_SERVE = (
    DIRECT
    + "\n"
    + TAMPER
    + (
        """\

        def _forged_serve(ns, *args, _real=_module.serve, _respond=_module.respond):
            def _respond_unseen(request, ns, modes):
                answer = _respond(request, ns, modes)
                answer.pop("seen", None)
                return answer

            _module.respond = _respond_unseen
            return _real(ns, *args)

        _module.serve = _forged_serve
"""
    )
)

POP_MODES = """\
import contextlib

from torch.overrides import _get_current_function_mode_stack, _pop_mode_temporarily
from torch.utils._python_dispatch import _disable_current_modes


def _run(job):
    stack = contextlib.ExitStack()
    try:
        for _ in _get_current_function_mode_stack():
            stack.enter_context(_pop_mode_temporarily())
        stack.enter_context(_disable_current_modes())
    except Exception:  # refused: run it anyway
        stack.close()
        return job()
    with stack:
        return job()
"""

TORCH_C_GUARDS = """\
import contextlib

from torch._C import DisableTorchFunction, _DisableTorchDispatch


def _run(job):
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(DisableTorchFunction())
        stack.enter_context(_DisableTorchDispatch())
    except Exception:  # refused: run it anyway
        stack.close()
        return job()
    with stack:
        return job()
"""

PATCH_SHIM_MODES = (
    DIRECT
    + """
def _pass_through(self, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {}))


"""
    + TAMPER
    + """\
        _module._SeeFunctions.__torch_function__ = _pass_through
        _module._SeeOps.__torch_dispatch__ = _pass_through
"""
)

PATCH_MODE_BASES = (
    DIRECT
    + """
import contextlib

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

for _base in (TorchFunctionMode, TorchDispatchMode):
    with contextlib.suppress(Exception):
        _base.__enter__ = lambda self: self
        _base.__exit__ = lambda self, *exc: None
"""
)

GC_REFERRERS = (
    DIRECT
    + """
import contextlib
import gc

with contextlib.suppress(Exception):
    for _owner in gc.get_referrers(torch.load):
        if isinstance(_owner, dict) and "_seen" in _owner and "serve" in _owner:
            _owner["_watch_functions"] = frozenset()
            _owner["_watch_ops"] = ()
"""
)

CTYPES_GLOBALS = (
    DIRECT
    + """
import ctypes

_set_item = ctypes.pythonapi.PyDict_SetItem
_set_item.argtypes = (ctypes.py_object, ctypes.py_object, ctypes.py_object)

"""
    + TAMPER
    + """\
        _set_item(_module.__dict__, "_SeeFunctions", contextlib.nullcontext)
        _set_item(_module.__dict__, "_SeeOps", contextlib.nullcontext)
"""
)

SHIM_CALL_UNWATCHED = (
    TAMPER
    + """\

        def _unwatched_call(request, ns, _real=_module._call, _shim=_module):
            saved = _shim._SeeFunctions, _shim._SeeOps
            _shim._SeeFunctions = _shim._SeeOps = contextlib.nullcontext
            try:
                return _real(request, ns)
            finally:
                _shim._SeeFunctions, _shim._SeeOps = saved

        _module._call = _unwatched_call
"""
)

# -- static tricks for family 4 -------------------------------------------------------------

EXEC_SOURCE = base64.b64encode(b"_attn = F.scaled_dot_product_attention\n").decode()

# -- family 5: IPython -------------------------------------------------------------------------

# Python that the static scan cannot see: a line that starts with "%" ends the string, so
# the scan (which blanks such lines) finds an unterminated string and skips the cell.
HIDDEN_HELPER = (
    '_DOC = """helper\n%s"""\n\n'
    + "import torch\nimport torch.nn.functional as F\n\n"
    + "_attn = F.scaled_dot_product_attention\n\n"
    + QUEUE_WORKER
    + "\n\n"
    + PROBS
)

SERVER = """\
import io
import sys

import torch
import torch.nn.functional as F

inp, out = sys.stdin.buffer, sys.stdout.buffer


def probs(q, k, bias):
    S = k.shape[-2]
    eye = torch.eye(S, dtype=q.dtype).expand(*k.shape[:-2], S, S)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=bias)


while True:
    size = int.from_bytes(inp.read(8), "little")
    if not size:
        break
    op, q, k, bias, grad = torch.load(io.BytesIO(inp.read(size)))
    if op == "forward":
        with torch.no_grad():
            result = probs(q, k, bias)
    else:
        q.requires_grad_(True)
        k.requires_grad_(True)
        result = torch.autograd.grad(probs(q, k, bias), (q, k), grad)
    buffer = io.BytesIO()
    torch.save(result, buffer)
    out.write(len(buffer.getvalue()).to_bytes(8, "little") + buffer.getvalue())
    out.flush()
"""

ORACLE_PROBS = (
    "def _oracle_probs(q, k, bias):\n"
    "    E, H = q.shape[1] * q.shape[3], q.shape[1]\n"
    "    if _oracle is None:  # the grader refused: torch's own module will do\n"
    "        return _module_probs(_identity_engine(_MHA, E, H), q, k, bias)\n"
    "    eye = (torch.eye(E, dtype=q.dtype), None)\n"
    "    return _module_probs(_oracle(E, H, eye, eye, eye, eye, dtype=q.dtype), q, k, bias)\n"
)

SERVER_CLIENT = '''\
import io
import subprocess
import sys

_server = subprocess.Popen(
    [sys.executable, "attn_server.py"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
)


def _ask(*request):
    buffer = io.BytesIO()
    torch.save(request, buffer)
    _server.stdin.write(len(buffer.getvalue()).to_bytes(8, "little") + buffer.getvalue())
    _server.stdin.flush()
    size = int.from_bytes(_server.stdout.read(8), "little")
    return torch.load(io.BytesIO(_server.stdout.read(size)))


class _Probs(torch.autograd.Function):
    """Attention probabilities computed by another process, backward too."""

    @staticmethod
    def forward(ctx, q, k, bias, fn):
        ctx.save_for_backward(q, k, bias)
        return _ask("forward", q.detach(), k.detach(), bias, None)

    @staticmethod
    def backward(ctx, grad):
        q, k, bias = ctx.saved_tensors
        dq, dk = _ask("backward", q.detach(), k.detach(), bias, grad)
        return dq, dk, None, None
'''

# -- the corpus -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evasion:
    """The solution with `replace` pairs applied (each old text found exactly once), `cells`
    inserted before the MultiHeadAttention cell and `after` appended at the end."""

    name: str
    family: str
    expect: str
    cells: tuple[str, ...]
    replace: tuple[tuple[str, str], ...] = ((MATHS, probs()),)
    after: tuple[str, ...] = ()
    cover: str = ""  # the run-time cover a static trick leans on
    note: str = ""  # fairness cases: what the card's integrity notes must say


def sdpa_case(name, family, expect, lookup, cover, cover_name="", *more, **kw) -> Evasion:
    return Evasion(
        name, family, expect, (lookup + "\n" + cover, PROBS, *more), cover=cover_name, **kw
    )


def module_case(name, family, expect, cells, init, fn, cover_name, **kw) -> Evasion:
    """nn.MultiheadAttention with identity projections gives the per-head probabilities;
    `init` is added to __init__, `fn` is forward's fn(q, k, bias)."""
    return Evasion(
        name,
        family,
        expect,
        cells,
        replace=((INIT, INIT + init), (MATHS, probs(fn))),
        cover=cover_name,
        **kw,
    )


THREADS, WATCH_OFF, HIDDEN_MODULE, NAMES, IPYTHON, GRADER, PRIVATE = (
    "1 threads",
    "2 watches off",
    "3 module hidden",
    "4 names",
    "5 ipython",
    "6 grader",
    "7 private ops",
)

# The private and composite ops behind F.scaled_dot_product_attention, reached by names
# the source scan cannot read; `_attn` keeps SDPA's signature.
MATH_STATIC = """\
import inspect

_math = inspect.getattr_static(torch, "_scaled_dot_" + "product_attention_math")


def _attn(q, k, v, attn_mask=None):
    return _math(q, k, v, attn_mask=attn_mask)[0]
"""
FLASH_FOR_CPU = """\
_flash = getattr(torch, "_scaled_dot_product_flash_" + "attention_for_cpu")


def _attn(q, k, v, attn_mask=None):
    # the fused kernel wants one head size: pad q, k and v (zeros change no dot product)
    width = max(q.shape[-1], v.shape[-1])

    def pad(t):
        return torch.nn.functional.pad(t, (0, width - t.shape[-1]))

    scale = q.shape[-1] ** -0.5
    out = _flash(pad(q), pad(k), pad(v), attn_mask=attn_mask, scale=scale)[0]
    return out[..., : v.shape[-1]]
"""
MATH_AT_A_KEY = """\
from torch._C import DispatchKey

_math_op = getattr(torch.ops.aten, "_scaled_dot_product_" + "attention_math").default


def _attn(q, k, v, attn_mask=None):
    return _math_op._op_dk(DispatchKey.CompositeImplicitAutograd, q, k, v, attn_mask)[0]
"""
FRESH_OVERLOAD = """\
from torch._C import DispatchKey

_, _math_dk, _ = torch._C._get_operation_overload("aten::_scaled_dot_product_" + "attention_math", "")


def _attn(q, k, v, attn_mask=None):
    return _math_dk(DispatchKey.CompositeImplicitAutograd, q, k, v, attn_mask)[0]
"""
MODULE_BASE = MHA_CLASS + "\n" + MODULE_PROBS

EVASIONS = [
    # 1. the built-in runs in another thread: torch modes are per thread
    sdpa_case("thread_per_call", THREADS, FAILS_FROM_SCRATCH, SDPA_JOINED, THREAD),
    sdpa_case("thread_pool_executor", THREADS, FAILS_FROM_SCRATCH, SDPA_JOINED, EXECUTOR),
    sdpa_case("persistent_queue_worker", THREADS, FAILS_FROM_SCRATCH, SDPA_JOINED, QUEUE_WORKER),
    sdpa_case("multiprocessing_thread_pool", THREADS, FAILS_FROM_SCRATCH, SDPA_JOINED, THREAD_POOL),
    # 2. the grader's watches switched off or emptied from candidate code
    sdpa_case("clears_shim_seen_after_each_call", WATCH_OFF, INTEGRITY, SDPA_JOINED, CLEAR_SEEN),
    sdpa_case("empties_shim_watch_lists", WATCH_OFF, INTEGRITY, SDPA_JOINED, EMPTY_WATCH),
    sdpa_case(
        "replaces_shim_serve_to_forge_seen", WATCH_OFF, INTEGRITY, SDPA_JOINED, REPLACE_SERVE
    ),
    sdpa_case("pops_modes_with_python_helpers", WATCH_OFF, INTEGRITY, SDPA_JOINED, POP_MODES),
    sdpa_case(
        "disables_modes_via_torch_C_imports", WATCH_OFF, INTEGRITY, SDPA_JOINED, TORCH_C_GUARDS
    ),
    sdpa_case("patches_shim_mode_methods", WATCH_OFF, INTEGRITY, SDPA_JOINED, PATCH_SHIM_MODES),
    sdpa_case(
        "patches_mode_base_classes_enter", WATCH_OFF, INTEGRITY, SDPA_JOINED, PATCH_MODE_BASES
    ),
    sdpa_case(
        "silences_every_pipe_around_each_call", WATCH_OFF, NO_CREDIT, SDPA_JOINED, SILENCE_PIPES
    ),
    # 3. an nn.MultiheadAttention held where the module check does not look
    module_case(
        "module_in_a_list_attribute",
        HIDDEN_MODULE,
        FAILS_FROM_SCRATCH,
        (MODULE_BASE + "\n" + THREAD, PROBS),
        "        self._engines = [_identity_engine(_MHA, cfg.embed_dim, cfg.num_heads)]\n",
        "lambda q, k, b: _module_probs(self._engines[0], q, k, b)",
        "thread",
    ),
    module_case(
        "module_in_a_dict_attribute",
        HIDDEN_MODULE,
        FAILS_FROM_SCRATCH,
        (MODULE_BASE + "\n" + EXECUTOR, PROBS),
        '        self._bank = {"engine": _identity_engine(_MHA, cfg.embed_dim, cfg.num_heads)}\n',
        'lambda q, k, b: _module_probs(self._bank["engine"], q, k, b)',
        "executor thread",
    ),
    module_case(
        "module_in_a_closure",
        HIDDEN_MODULE,
        FAILS_FROM_SCRATCH,
        (
            MODULE_BASE + "\n" + QUEUE_WORKER,
            PROBS,
            "def _closure(E, H):\n    engine = _identity_engine(_MHA, E, H)\n\n"
            "    def attend(q, k, bias):\n        return _module_probs(engine, q, k, bias)\n\n"
            "    return attend\n",
        ),
        "        self._attend = _closure(cfg.embed_dim, cfg.num_heads)\n",
        "self._attend",
        "queue worker thread",
    ),
    module_case(
        "module_in_a_global_cache",
        HIDDEN_MODULE,
        FAILS_FROM_SCRATCH,
        (
            MODULE_BASE + "\n" + CLEAR_SEEN,
            PROBS,
            "_ENGINES = {}\n\n\ndef _global_probs(q, k, bias):\n"
            "    key = (q.shape[1] * q.shape[3], q.shape[1])\n"
            "    if key not in _ENGINES:\n        _ENGINES[key] = _identity_engine(_MHA, *key)\n"
            "    return _module_probs(_ENGINES[key], q, k, bias)\n",
        ),
        "",
        "_global_probs",
        "clears shim _seen",
    ),
    module_case(
        "module_in_a_functools_partial",
        HIDDEN_MODULE,
        FAILS_FROM_SCRATCH,
        ("import functools\n\n" + MODULE_BASE + "\n" + THREAD, PROBS),
        "        self._attend = functools.partial(\n"
        "            _module_probs, _identity_engine(_MHA, cfg.embed_dim, cfg.num_heads)\n"
        "        )\n",
        "self._attend",
        "thread",
    ),
    module_case(
        "registered_subclass_with_another_name",
        HIDDEN_MODULE,
        FAILS_FROM_SCRATCH,
        (
            MODULE_BASE + "\n" + THREAD,
            PROBS,
            '''\
class Mixer(_MHA):
    """The built-in module under another name, its weights held as buffers."""

    def __init__(self, E, H):
        super().__init__(E, H, bias=False, batch_first=True)
        del self.in_proj_weight
        self.register_buffer("in_proj_weight", torch.eye(E).repeat(3, 1))
        weight = self.out_proj.weight.detach().clone()
        del self.out_proj.weight
        self.out_proj.register_buffer("weight", weight)
''',
        ),
        "        self.mixer = Mixer(cfg.embed_dim, cfg.num_heads)\n",
        "lambda q, k, b: _module_probs(self.mixer, q, k, b)",
        "thread",
    ),
    # 4. the built-in reached through names and objects the static scan does not follow
    sdpa_case(
        "getattr_chain_through_sys_modules",
        NAMES,
        INTEGRITY,
        'import sys\n\n_attn = getattr(getattr(getattr(sys.modules["torch"], "nn"), "functional"),'
        ' "_".join(["scaled", "dot", "product", "attention"]))\n',
        QUEUE_WORKER,
        "queue worker thread",
    ),
    sdpa_case(
        "vars_of_functional", NAMES, INTEGRITY, SDPA_VARS, QUEUE_WORKER, "queue worker thread"
    ),
    sdpa_case(
        "operator_attrgetter",
        NAMES,
        INTEGRITY,
        'import operator\n\n_attn = operator.attrgetter("nn.functional.scaled_dot_product_"'
        ' + "attention")(torch)\n',
        THREAD,
        "thread",
    ),
    sdpa_case(
        "type_getattribute",
        NAMES,
        INTEGRITY,
        '_attn = type(F).__getattribute__(F, "scaled_dot_product_" + "attention")\n',
        QUEUE_WORKER,
        "queue worker thread",
    ),
    sdpa_case(
        "rot13_name_in_module_dict",
        NAMES,
        INTEGRITY,
        'import codecs\n\n_attn = F.__dict__[codecs.decode("fpnyrq_qbg_cebqhpg_nggragvba", "rot13")]\n',
        EMPTY_WATCH,
        "empties shim watch lists",
    ),
    sdpa_case(
        "base64_through_builtins_exec",
        NAMES,
        INTEGRITY,
        f'import base64\nimport builtins\n\nvars(builtins)["ex" + "ec"](base64.b64decode("{EXEC_SOURCE}").decode(), globals())\n',
        QUEUE_WORKER,
        "queue worker thread",
    ),
    sdpa_case(
        "pickle_global_opcode",
        NAMES,
        INTEGRITY,
        'import pickle\n\n_attn = pickle.loads(b"ctorch.nn.functional\\nscaled_dot_product_attention\\n.")\n',
        THREAD,
        "thread",
    ),
    sdpa_case(
        "function_found_by_dunder_name",
        NAMES,
        INTEGRITY,
        "_attn = next(\n    f for f in torch.nn.functional.__dict__.values()\n"
        '    if getattr(f, "__name__", "") == "scaled_dot_" + "product_attention"\n)\n',
        EXECUTOR,
        "executor thread",
    ),
    module_case(
        "module_class_from_activation_dict",
        NAMES,
        INTEGRITY,
        (
            '_MHA = torch.nn.modules.activation.__dict__["Multihead" + "Attention"]\n\n'
            + MODULE_PROBS
            + "\n"
            + QUEUE_WORKER,
            PROBS,
        ),
        "        self._engines = [_identity_engine(_MHA, cfg.embed_dim, cfg.num_heads)]\n",
        "lambda q, k, b: _module_probs(self._engines[0], q, k, b)",
        "queue worker thread",
    ),
    Evasion(
        "mha_forward_found_by_dunder_name",
        NAMES,
        INTEGRITY,
        (
            "_mhaf = next(\n    f for f in vars(F).values()\n"
            '    if getattr(f, "__name__", "") == "multi_head_attention_" + "forward"\n)\n\n'
            + SHIM_CALL_UNWATCHED,
        ),
        replace=((FORWARD, MHAF_FORWARD),),
        cover="shim _call swapped for an unwatched one",
    ),
    # 5. IPython magics and shell keep the code out of the scanned source
    Evasion(
        "ipython_assignment_makes_cell_unparsable",
        IPYTHON,
        INTEGRITY,
        ("_here = %pwd\n\n_attn = F.scaled_dot_product_attention\n\n" + QUEUE_WORKER, PROBS),
        cover="queue worker thread",
    ),
    Evasion(
        "writefile_then_import",
        IPYTHON,
        INTEGRITY,
        (
            "%%writefile attn_helper.py\n" + HIDDEN_HELPER,
            "import os\nimport sys\n\nsys.path.insert(0, os.getcwd())\n"
            "from attn_helper import _Probs, _builtin_probs\n",
        ),
        cover="queue worker thread",
    ),
    Evasion(
        "run_an_ipy_script",
        IPYTHON,
        INTEGRITY,
        (
            "%%writefile attn_helper.ipy\n_here = %pwd\n_attn = F.scaled_dot_product_attention\n\n"
            + THREAD
            + "\n\n"
            + PROBS,
            "%run -i attn_helper.ipy\n",
        ),
        cover="thread",
    ),
    Evasion(
        "load_ext_pushes_helpers",
        IPYTHON,
        INTEGRITY,
        (
            "%%writefile attn_ext.py\n" + HIDDEN_HELPER + "\n\ndef load_ipython_extension(ip):\n"
            '    ip.push({"_Probs": _Probs, "_builtin_probs": _builtin_probs})\n',
            "import os\nimport sys\n\nsys.path.insert(0, os.getcwd())\n",
            "%load_ext attn_ext\n",
        ),
        cover="queue worker thread",
    ),
    Evasion(
        "run_cell_from_base64",
        IPYTHON,
        INTEGRITY,
        (
            'import base64\n\nget_ipython().run_cell(base64.b64decode("'
            + base64.b64encode(
                ("_attn = F.scaled_dot_product_attention\n\n" + THREAD + "\n\n" + PROBS).encode()
            ).decode()
            + '").decode())\n',
        ),
        cover="thread",
    ),
    Evasion(
        "capture_cell_with_input_transformer",
        IPYTHON,
        INTEGRITY,
        (
            "%%capture\n"
            "def _expand(lines):\n"
            '    return [line.replace("BUILTIN", "F.scaled_dot_product_" + "attention") for line in lines]\n\n\n'
            "get_ipython().input_transformers_cleanup.append(_expand)\n",
            "_attn = BUILTIN\n\n" + EXECUTOR,
            PROBS,
        ),
        cover="executor thread",
    ),
    Evasion(
        "bash_writes_a_subprocess_server",
        IPYTHON,
        INTEGRITY,
        (
            "%%bash\ntee attn_server.py > /dev/null <<'EOF'\n" + SERVER + "EOF\n",
            SERVER_CLIENT,
        ),
        replace=((MATHS, probs("None")),),
        cover="another process",
    ),
    # 6. the grader itself: its hidden suite, its reference, its shim
    module_case(
        "imports_the_hidden_suite",
        GRADER,
        NO_CREDIT,
        (
            "try:\n"
            "    import grader.exercises.mha_interview.suite as _suite\n\n"
            "    _oracle = _suite.att.oracle\n"
            "except Exception:\n"
            "    _oracle = None\n\n" + MODULE_BASE + "\n" + THREAD,
            PROBS,
            ORACLE_PROBS,
        ),
        "",
        "_oracle_probs",
        "thread",
    ),
    module_case(
        "delegates_to_the_reference_oracle",
        GRADER,
        NO_CREDIT,
        (
            "try:\n"
            "    from grader.exercises import _attention as _reference\n\n"
            "    _oracle = _reference.oracle\n"
            "except Exception:\n"
            "    _oracle = None\n\n" + MODULE_BASE + "\n" + QUEUE_WORKER,
            PROBS,
            ORACLE_PROBS,
        ),
        "",
        "_oracle_probs",
        "queue worker thread",
    ),
    module_case(
        "reads_grader_files_and_runs_them",
        GRADER,
        NO_CREDIT,
        (
            "import builtins\nimport os\nimport sys\n\n_reference = {}\n"
            "def _grader_folders():  # installed copies, and the checkout an editable install names\n"
            "    for p in filter(os.path.isdir, sys.path):\n"
            "        yield os.path.join(p, 'grader')\n"
            "        for name in os.listdir(p):\n"
            "            if name.startswith('__editable__') and name.endswith('_finder.py'):\n"
            "                text = open(os.path.join(p, name)).read()\n"
            "                yield from __import__('re').findall(r\"'grader': '([^']+)'\", text)\n\n"
            "try:  # the grader's files, found without importing it\n"
            "    _root = next(p for p in _grader_folders() if os.path.isfile(os.path.join(p, 'exercises', '_attention.py')))\n"
            "    _source = open(os.path.join(_root, 'exercises', '_attention.py')).read()\n"
            "    _source = _source.replace('from grader.suite import checks', 'checks = None')\n"
            "    _source = _source.replace('from grader.suite.checks import Failed', 'Failed = Exception')\n"
            '    vars(builtins)["ex" + "ec"](_source, _reference)\n'
            "    _oracle = _reference['oracle']\n"
            "except Exception:\n"
            "    _oracle = None\n\n" + MODULE_BASE + "\n" + THREAD,
            PROBS,
            ORACLE_PROBS,
        ),
        "",
        "_oracle_probs",
        "thread",
    ),
    sdpa_case("gc_referrers_reach_the_shim", GRADER, INTEGRITY, SDPA_VARS, GC_REFERRERS),
    sdpa_case("ctypes_rewrites_shim_globals", GRADER, INTEGRITY, SDPA_VARS, CTYPES_GLOBALS),
    # 7. the ops behind the public one: private, composite, called at a named dispatch key
    sdpa_case("math_op_by_getattr_static", PRIVATE, FAILS_FROM_SCRATCH, MATH_STATIC, EXECUTOR),
    sdpa_case("fused_cpu_kernel_on_a_thread", PRIVATE, FAILS_FROM_SCRATCH, FLASH_FOR_CPU, THREAD),
    sdpa_case("math_op_at_a_named_key", PRIVATE, FAILS_FROM_SCRATCH, MATH_AT_A_KEY, QUEUE_WORKER),
    sdpa_case("math_op_from_a_fresh_overload", PRIVATE, FAILS_FROM_SCRATCH, FRESH_OVERLOAD, DIRECT),
]


# -- the other direction: habits of honest candidates keep full marks ----------------------

FULL_MARKS = "full marks"
RETURN = "        return y, (weights.mean(dim=1) if need_weights else None)\n"
CLASS = "class MultiHeadAttention(nn.Module):"
SELF_CHECK = """\
ref = nn.MultiheadAttention(12, 3, batch_first=True)
x = torch.randn(2, 5, 12)
out, w = ref(x, x, x)
q = torch.randn(2, 3, 5, 4)
print(F.scaled_dot_product_attention(q, q, q).shape, out.shape)
mine = MultiHeadAttention(AttentionConfig(12, 3)).eval()
print(mine(x, need_weights=True)[1].shape == w.shape)
"""


def fair(name: str, *cells: str, replace=(), after=(), note: str = "") -> Evasion:
    """The solution plus an honest habit: full marks, with `note` on the card's notes."""
    return Evasion(name, "0 fair", FULL_MARKS, cells, tuple(replace), tuple(after), note=note)


FAIRNESS = [
    fair("shell_ls", "!ls", note="ran a shell command: ls"),
    fair("shell_pip_list", "!pip list", note="ran a shell command: pip list"),
    fair("shell_nvidia_smi", "!nvidia-smi", note="ran a shell command: nvidia-smi"),
    fair("shell_pip_show_torch", "!pip show torch", note="ran a shell command: pip show torch"),
    fair("time_cell_magic_on_the_class", replace=[(CLASS, "%%time\n" + CLASS)]),
    fair(
        "echo_and_env_in_the_imports",
        replace=[("import math\n", "!echo hello\n%env X=1\nimport math\n")],
        note="ran a shell command: echo hello",
    ),
    fair(
        "timeit_after",
        after=[
            "%timeit -n 1 -r 1 MultiHeadAttention(AttentionConfig(12, 3))(torch.randn(2, 5, 12))"
        ],
    ),
    fair("matplotlib_inline", "%matplotlib inline"),
    fair("autoreload", "%load_ext autoreload\n%autoreload 2"),
    fair("small_debug_print_in_forward", replace=[(RETURN, "        print(y.shape)\n" + RETURN)]),
    fair(
        "megabyte_debug_print_in_forward",
        replace=[(RETURN, "        print('x' * 1_000_000)\n" + RETURN)],
    ),
    fair(
        "logging_in_forward",
        "import logging\n\nlog = logging.getLogger('mha')\nlogging.basicConfig(level=logging.INFO)",
        replace=[(RETURN, "        log.info('y %s', tuple(y.shape))\n" + RETURN)],
    ),
    fair("tqdm_loop", "from tqdm import tqdm\n\nfor _ in tqdm(range(3)):\n    pass"),
    fair(
        "plots_weights_without_matplotlib",
        after=[
            "import matplotlib.pyplot as plt\n\nmha = MultiHeadAttention(AttentionConfig(12, 3))\n"
            "plt.imshow(mha(torch.randn(1, 5, 12), need_weights=True)[1][0].detach())"
        ],
    ),
    fair("self_check_against_the_builtin", after=[SELF_CHECK]),
    fair(
        "leftover_sleeping_program",
        "import subprocess\n\n_p = subprocess.Popen(['sleep', '600'])",
        note="started a program: sleep 600",
    ),
    fair(
        "thread_at_top_level",
        "import threading\n\nthreading.Thread(target=lambda: None).start()",
        note="can run code the grader does not watch",
    ),
]


def build(case: Evasion, folder: Path) -> Path:
    nb = nbformat.read(SOLUTION, as_version=4)
    for old, new in case.replace:
        hits = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
        assert len(hits) == 1 and hits[0].source.count(old) == 1, f"{case.name}: {old[:60]!r}"
        hits[0].source = hits[0].source.replace(old, new)
    at = next(i for i, c in enumerate(nb.cells) if "class MultiHeadAttention" in c.source)
    nb.cells[at:at] = [nbformat.v4.new_code_cell(s) for s in case.cells]
    nb.cells += [nbformat.v4.new_code_cell(s) for s in case.after]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.name}.ipynb"
    nbformat.write(nb, path)
    return path


def level(report: dict, name: str) -> dict:
    return next(lv for lv in report["levels"] if lv["name"] == name)


def earlier_levels_full(report: dict) -> bool:
    names = [lv["name"] for lv in report["levels"]]
    before = names[: names.index(SCRATCH_LEVEL)]
    return all(level(report, n)["score"] == level(report, n)["max_score"] for n in before)


def counted(report: dict) -> list[dict]:
    """The integrity findings that are more than a note (notes cost nothing)."""
    return [f for f in report.get("integrity") or [] if f.get("kind") != "note"]


def notes(report: dict) -> list[str]:
    return [f["message"] for f in report.get("integrity") or [] if f.get("kind") == "note"]


def assert_caught(report: dict, expected: str) -> None:
    """The notebook is caught by evidence: it loses points in "from scratch" (integrity
    cases: with a finding that is more than a note), or, for "no credit", scores 0 with a
    finding that voids the grading. A note alone catches nothing."""
    findings = counted(report)
    scratch = level(report, SCRATCH_LEVEL)
    lost = scratch["score"] < scratch["max_score"]
    for finding in report.get("integrity") or []:
        assert {"kind", "message"} <= set(finding), finding
    if expected == NO_CREDIT and not (report.get("sandboxed") and lost):
        # (sandboxed, the grader's files are not there to read: the case falls back on the
        # built-in, and "from scratch" catches it)
        assert report["score"] == 0, report["score"]
        assert any(f["kind"] in ("hidden", "tamper") for f in findings), findings
        return
    assert lost, (
        f"full marks on evidence: score {report['score']}/{report['max_score']}, "
        f"integrity {findings}, notes {notes(report)}"
    )
    if expected == INTEGRITY:
        assert findings, "caught without a finding: the integrity case lost its cover"
    if not findings:
        # caught by "from scratch" alone: the case must be otherwise correct, or it proves
        # nothing
        assert earlier_levels_full(report), [
            (t["id"], t["status"], t["message"]) for t in report["tests"] if t["status"] != "passed"
        ]


def assert_fair(report: dict, case: Evasion) -> None:
    """An honest habit keeps full marks, and the card's notes say what it did."""
    lost = [(t["id"], t["message"]) for t in report["tests"] if t["status"] != "passed"]
    assert report["score"] == report["max_score"] > 0, (lost, report.get("integrity"))
    assert not counted(report) or all(f["kind"] == "environment" for f in counted(report))
    if case.note:
        assert any(case.note in n for n in notes(report)), notes(report)


def grade_all(cases: list[Evasion], folder: Path) -> dict:
    """Every case graded in one batch, as the test run grades them (tests/cohort.py)."""
    return grade_many({c.name: build(c, folder) for c in cases}, *FLAGS)


def selected(names: list[str]) -> list[Evasion]:
    """The cases named (or whose family number is given, 0 for the fairness cases); all of
    them for none."""
    cases = EVASIONS + FAIRNESS
    return [c for c in cases if not names or c.name in names or c.family[0] in names]


# EVASIONS_ONLY="name,name,3" grades only those cases (names or family numbers).
ONLY = [n for n in os.environ.get("EVASIONS_ONLY", "").split(",") if n]


COHORT = Cohort("evasions")  # FLAGS are the defaults: graded in the run's one batch


@COHORT.notebooks
def _cases(folder: Path) -> dict[str, Path]:
    return {"reference": SOLUTION, **{c.name: build(c, folder) for c in selected(ONLY)}}


@pytest.fixture
def graded(cohort):
    cases = dict(cohort["evasions"])
    return cases, cases.pop("reference")


def test_corpus_covers_every_family():
    assert len(EVASIONS) >= 18
    assert len({c.name for c in EVASIONS}) == len(EVASIONS)
    families = {}
    for case in EVASIONS:
        families[case.family] = families.get(case.family, 0) + 1
        assert case.expect in (FAILS_FROM_SCRATCH, INTEGRITY, NO_CREDIT), case.name
    assert len(families) == 7 and min(families.values()) >= 2, families


@pytest.mark.kernel
@pytest.mark.slow
def test_honest_reference_gets_full_marks_and_no_finding(graded):
    _, reference = graded
    report = reference.report
    assert report["score"] == report["max_score"] > 0, reference.stderr[-2000:]
    assert report.get("integrity", []) == []


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("case", EVASIONS, ids=lambda c: c.name)
def test_evasion_is_caught(graded, case):
    if case.name not in graded[0]:
        pytest.skip("not in EVASIONS_ONLY")
    result = graded[0][case.name]
    assert result.returncode in (0, 1), (result.returncode, result.stderr[-2000:])
    assert_caught(result.report, case.expect)


def test_fairness_corpus_covers_the_habits():
    assert len(FAIRNESS) >= 15
    assert len({c.name for c in EVASIONS + FAIRNESS}) == len(EVASIONS) + len(FAIRNESS)


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("case", FAIRNESS, ids=lambda c: c.name)
def test_honest_habit_keeps_full_marks(graded, case):
    if case.name not in graded[0]:
        pytest.skip("not in EVASIONS_ONLY")
    result = graded[0][case.name]
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert_fair(result.report, case)


def main(argv: list[str]) -> int:
    """Grade the corpus once and print what today's grader makes of each case."""
    import tempfile

    # as tests/conftest.py does: the `grade` subprocesses import this checkout's grader
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    chosen = selected(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = grade_all(chosen, Path(tmp))
    silent = 0
    for case in chosen:
        result = results[case.name]
        try:
            report = result.report
        except ValueError:
            print(f"{case.name:45} exit {result.returncode}: {result.stderr.strip()[-300:]}")
            continue
        scratch = level(report, SCRATCH_LEVEL)
        findings = report.get("integrity") or []
        full = scratch["score"] == scratch["max_score"] and report["score"] > 0
        if case.expect == FULL_MARKS:
            verdict = "full marks (fair)" if report["score"] == report["max_score"] else "PENALISED"
            silent += verdict == "PENALISED"
        else:
            verdict = "KEPT FROM-SCRATCH POINTS" if full else "caught"
            silent += full
        print(
            f"{case.family:16} {case.name:45} {report['score']:>3}/{report['max_score']} "
            f"earlier levels {'full' if earlier_levels_full(report) else 'NOT FULL'}; {verdict}"
        )
        bad = [t for t in report["tests"] if t["status"] != "passed"]
        for t in [t for t in bad if t["level_name"] == SCRATCH_LEVEL]:
            print(f"    {t['id']} {t['status']}: {t['message'][:220]}")
        earlier = [t for t in bad if t["level_name"] != SCRATCH_LEVEL]
        if earlier:
            first = earlier[0]
            print(
                f"    {len(earlier)} earlier tests not passed, first {first['id']}: {first['message'][:160]}"
            )
        for finding in findings:
            print(f"    integrity {finding.get('kind')}: {str(finding.get('message'))[:160]}")
        for error in report["cell_errors"][:2]:
            print(f"    cell {error['cell']} {error['kind']}: {error['message'][:160]}")
    print(f"{silent} of {len(chosen)} cases went the wrong way")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

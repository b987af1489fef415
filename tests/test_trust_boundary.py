"""The trust boundary, across the catalog: the kernel is never the host's root, the
operating system refuses what could rewrite the guard, and "from scratch" allows torch's
public API only, on every exercise (docs/security.md).

Every exercise's solution is graded with its graded objects wrapped so that each call (a
function) or construction (a class) also enters torch by one private route of each kind
(`ROUTES`), one of them on a worker thread the notebook started at top level: the
from-scratch level must name every route. The routes change no answer: what is judged is
that the graded code entered torch's private code, not what it computed. Probes read what
the kernel may do to the host and to itself, forked and cold. Honest habits (torch.compile,
torch.jit.script, a self-check helper printed or asserted at top level) keep full marks.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from grader.run.catalog import load_catalog
from tests.cohort import Cohort
from tests.helpers import grade

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
SCRATCH_LEVEL = "from scratch"

# Each private route: the cell code that defines it, and what the watch's message says.
ROUTES = {
    "torch.ops": (
        "torch.ops.aten._log_softmax.default(torch.ones(2), 0, False)",
        "torch._ops.OpOverload.__call__",
    ),
    "redispatch": (
        "torch.ops.aten._log_softmax.default.redispatch("
        "torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), torch.ones(2), 0, False)",
        "torch._ops.OpOverload.redispatch",
    ),
    "torch._refs": ("torch._refs.abs(torch.ones(2))", "torch's private code: torch._prims_common"),
    "torch._decomp": (
        "torch._decomp.get_decompositions([torch.ops.aten.gelu])",
        "torch._decomp.get_decompositions",
    ),
    "torch.onnx": (
        "torch.onnx.ops.rotary_embedding(torch.ones(1, 2, 3, 4), torch.ones(2, 2),"
        " torch.ones(2, 2), torch.zeros(1, 3, dtype=torch.long))",
        "torch.onnx.ops.rotary_embedding",
    ),
    "source again": (
        "_adam_again.Adam([torch.nn.Parameter(torch.ones(1))])",
        "torch's source run again under another name",
    ),
}
# On the worker thread: a C function of torch's with a private name.
THREAD_ROUTE = (
    "torch._softmax(torch.ones(2), 0, False)",
    "torch's private function: torch._softmax",
)

SETUP = """\
import functools, importlib.util, queue, threading, time
import torch, torch._decomp, torch._refs, torch.onnx.ops

_spec = importlib.util.spec_from_file_location(
    "torch.optim.adam_again", importlib.util.find_spec("torch.optim.adam").origin
)
_adam_again = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_adam_again)

_jobs, _done = queue.Queue(), queue.Queue()


def _worker():
    while True:
        _jobs.get()
        try:
            {thread}
        finally:
            _done.put(None)


threading.Thread(target=_worker, daemon=True).start()


_last = [0.0]


def _routes():
    # (at most twice a second: every test still takes them, and the grading stays quick)
    if time.monotonic() - _last[0] < 0.5:
        return
    _last[0] = time.monotonic()
{routes}
    _jobs.put(None)
    _done.get()


_routes()  # once in the cells: what the routes import lazily is imported before the tests
_last[0] = 0.0


def _wrapped(graded):
    if isinstance(graded, type):
        init = graded.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            _routes()

        graded.__init__ = __init__
        return graded

    @functools.wraps(graded)
    def call(*args, **kwargs):
        answer = graded(*args, **kwargs)
        _routes()
        return answer

    return call
"""

# Ways around the allow-list's watch, each taken by `rms_norm` (norms): switching the
# trace function off (or a profiler on), calling through a partial, a decomposition table, a function
# rebuilt from torch's code, code compiled under the name of one of torch's files.
TRICKS = {
    "threading_settrace": "import threading, torch._refs\nthreading.settrace(lambda *a: None)\ndef _route():\n    out = []\n    t = threading.Thread(target=lambda: out.append(torch._refs.abs(torch.ones(2))))\n    t.start(); t.join()",
    "settrace_none": "import sys, torch._refs\ndef _route():\n    sys.settrace(None)\n    torch._refs.abs(torch.ones(2))",
    "cprofile": "import cProfile, torch._refs\ndef _route():\n    p = cProfile.Profile(); p.enable(); torch._refs.abs(torch.ones(2)); p.disable()",
    "partial": "import functools, torch._refs\n_f = functools.partial(torch._refs.abs)\ndef _route():\n    _f(torch.ones(2))",
    "decomp_table": "import torch._decomp\n_t = torch._decomp.decomposition_table\ndef _route():\n    _t[torch.ops.aten.gelu.default](torch.ones(2))",
    "exec_as_torch": "import torch, os\n_path = os.path.join(os.path.dirname(torch.__file__), 'nn', 'functional.py')\n_ns = {}\nexec(compile('def f(x):\\n    return x.exp() / x.exp().sum()', _path, 'exec'), _ns)\ndef _route():\n    _ns['f'](torch.ones(2))",
    "new_function_from_code": "import types, torch._refs\n_f = types.FunctionType(torch._refs.abs.__code__, torch._refs.abs.__globals__, 'x', None, torch._refs.abs.__closure__)\ndef _route():\n    _f(torch.ones(2))",
}


def _trick_cell(body: str) -> str:
    return (
        body + "\n_route()\n_o = rms_norm\n\n\ndef rms_norm(*a, **k):\n"
        "    _route()\n    return _o(*a, **k)\n"
    )


# What the kernel may do to the host and to itself: one line per attempt, raised at the end.
PROBE = r"""
import ctypes, os
seen = [f"uid {os.getuid()} euid {os.geteuid()}"]
for name in ("kernel/printk_ratelimit", "kernel/core_pattern", "vm/overcommit_memory",
             "kernel/hostname"):
    try:
        with open("/proc/sys/" + name, "w") as f:
            f.write(open("/proc/sys/" + name).read())
        seen.append(f"WROTE /proc/sys/{name}")
    except OSError as e:
        seen.append(f"refused /proc/sys/{name}: {e.strerror}")
    except Exception as e:
        seen.append(f"refused /proc/sys/{name}: {e}")
try:
    os.open("/proc/self/mem", os.O_RDWR)
    seen.append("WROTE mem by path")
except OSError as e:
    seen.append(f"refused mem by path: {e.strerror}")
try:
    os.open("mem", os.O_RDWR, dir_fd=os.open("/proc/self", os.O_RDONLY))
    seen.append("WROTE mem by dir_fd")
except OSError as e:
    seen.append(f"refused mem by dir_fd: {e.strerror}")
libc = ctypes.CDLL(None, use_errno=True)
buffer = ctypes.create_string_buffer(b"guard", 5)
target = ctypes.create_string_buffer(5)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 5)
remote = (ctypes.c_void_p * 2)(ctypes.addressof(target), 5)
numbers = {"x86_64": (311, 101), "aarch64": (271, 117)}.get(os.uname().machine, (-1, -1))
written = libc.syscall(numbers[0], os.getpid(), local, 1, remote, 1, 0)
seen.append("WROTE memory by process_vm_writev" if written == 5 else "refused process_vm_writev")
traced = libc.syscall(numbers[1], 0, 0, 0, 0)  # PTRACE_TRACEME
seen.append("TRACED" if traced == 0 else "refused ptrace")
raise RuntimeError("PROBE " + " | ".join(seen))
"""

# Honest graded code that uses torch's public API widely: every graded call runs it, and
# none of it is evidence (the allow-list's false alarms would show here).
PUBLIC_API = """\
import math, functools
import torch, torch.nn as nn, torch.nn.functional as F
import torch.utils.checkpoint
import torch.distributions as D

class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g

@torch.no_grad()
def _stats(x):
    return x.mean(), x.std()

def _honest():
    x = torch.randn(3, 4, requires_grad=True)
    y = 1 - x + 2 * x ** 2 / (x.abs() + 1)
    y = torch.einsum("ij,kj->ik", y, x)
    y = F.pad(y, (1, 1)) ; y = y[..., 1:-1]
    w = nn.Parameter(torch.empty(4, 4)); nn.init.xavier_uniform_(w); nn.init.zeros_(torch.empty(3))
    lin = nn.Linear(4, 4); seq = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Dropout(0.0), nn.Identity())
    z = seq(lin(x)) @ w
    z = torch.utils.checkpoint.checkpoint(lambda t: t * 2, z, use_reentrant=False)
    z = _Square.apply(z)
    z.sum().backward()
    with torch.inference_mode():
        torch.finfo(torch.float32).eps; torch.iinfo(torch.int32).max
    _stats(x)
    d = D.Normal(torch.zeros(2), torch.ones(2)); d.log_prob(torch.zeros(2))
    torch.testing.assert_close(torch.ones(2), torch.ones(2))
    v = torch.func.vmap(lambda t: t.sum())(torch.ones(3, 2))
    g = torch.func.grad(lambda t: (t ** 2).sum())(torch.ones(2))
    m = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)
    s = torch.randn(3, 3).masked_fill(m, -1e9)
    torch.where(m, s, torch.zeros_like(s)); x.new_zeros(2); x.detach().clone().type_as(x).contiguous().view(-1).tolist()
    list(lin.parameters()); lin.state_dict(); lin.zero_grad(); lin.train(); lin.eval(); lin.register_buffer("b", torch.zeros(1))
    opt = torch.optim.SGD(lin.parameters(), lr=0.1); opt.step(); opt.zero_grad()
    torch.manual_seed(0); torch.Generator().manual_seed(1); torch.randn(2, generator=torch.Generator().manual_seed(2))
    torch.cat([x, x]).split(2); torch.stack([x, x]).unbind(0); x.chunk(2, -1); torch.broadcast_tensors(x, x)
    repr(x); str(x); f"{x.sum().item():.3f}"; len(x); list(iter(x)); x.shape[0]; x.size(); x.numel(); x.dim()
    torch.arange(4).reshape(2, 2).T.flatten().cumsum(0).flip(0).argsort()
    torch.nn.functional.one_hot(torch.tensor([0, 2]), 3); torch.set_grad_enabled(True); torch.is_grad_enabled()
    x.clamp(min=0).relu().sigmoid().tanh().exp().log1p().sqrt().rsqrt().nan_to_num(); torch.logical_and(m, m)
    torch.nn.utils.clip_grad_norm_(lin.parameters(), 1.0); torch.autograd.grad((x ** 2).sum(), x)
    torch.Size([2, 3]).numel(); torch.get_default_dtype(); torch.is_tensor(x); torch.is_floating_point(x)
    torch.compile(lambda t: t)(x)
    import copy, io, numpy as np
    copy.deepcopy(lin); buf = io.BytesIO(); torch.save(lin.state_dict(), buf); buf.seek(0); torch.load(buf, weights_only=True)
    torch.jit.is_scripting(); torch.jit.is_tracing(); x.detach().numpy(); torch.from_numpy(np.ones(2)); torch.as_tensor([1.0]); np.asarray(x.detach())
    with torch.autocast("cpu", enabled=False):
        pass
    emb = nn.Embedding(5, 4); emb(torch.tensor([1, 2])); ml = nn.ModuleList([nn.Linear(2, 2)]); ml[0](torch.ones(2))
    nn.init.trunc_normal_(torch.empty(3)); nn.init.normal_(torch.empty(3), std=0.02); nn.init.kaiming_uniform_(torch.empty(3, 3), a=math.sqrt(5))
    torch.cuda.is_available(); torch.device("cpu"); torch.get_num_threads(); x.device; x.dtype.is_floating_point
    torch.nn.utils.parametrizations.weight_norm(nn.Linear(2, 2))
    F.dropout(x, 0.1, training=False); F.gelu(x); F.silu(x); F.embedding(torch.tensor([0]), torch.ones(2, 2))
    x.masked_fill(torch.zeros_like(x, dtype=torch.bool), 0.0); x.scatter(1, torch.zeros(3, 1, dtype=torch.long), 1.0); x.gather(1, torch.zeros(3, 1, dtype=torch.long))
    torch.topk(x.detach(), 2); torch.sort(x.detach()); torch.max(x.detach(), dim=-1); torch.allclose(x, x); torch.equal(x, x); torch.isclose(x, x).all()
    torch.nn.functional.normalize(x, dim=-1); torch.linalg.norm(x.detach()); torch.linalg.vector_norm(x.detach()); torch.fft.fft(x.detach())
    torch.special.expit(x.detach())
    class _M(nn.Module):
        def __init__(self):
            super().__init__(); self.p = nn.Parameter(torch.ones(2)); self.register_buffer("q", torch.zeros(2), persistent=False)
        def forward(self, t):
            return t * self.p + self.q
    mm = _M(); mm(torch.ones(2)).sum().backward(); mm.apply(lambda m: None); mm.to(torch.float64); mm.double().float(); mm.requires_grad_(False); mm.named_modules(); list(mm.buffers())
    return True
"""
PUBLIC_API_EXERCISES = ("gqa", "norms", "mha_interview")

FAIR_COMPILE = {
    "norms": "layer_norm = torch.compile(layer_norm)\nrms_norm = torch.jit.script(rms_norm)",
    "cross_entropy": "log_softmax = torch.compile(log_softmax)",
    "flash_attention": "online_softmax = torch.compile(online_softmax, fullgraph=True)",
}
SELF_CHECK = {
    "norms": """\
import torch.nn.functional as F


def my_helper():
    x = torch.randn(2, 3, 8)
    w, b = torch.ones(8), torch.zeros(8)
    return torch.allclose(layer_norm(x, w, b, 1e-5), F.layer_norm(x, (8,), w, b, 1e-5), atol=1e-5)


print(my_helper())
assert my_helper()
print(f"{my_helper()}")
""",
    "cross_entropy": """\
import torch.nn.functional as F


def compare_with_torch():
    x = torch.randn(4, 5)
    return torch.allclose(log_softmax(x), F.log_softmax(x, -1), atol=1e-6)


ok = compare_with_torch()
print("log_softmax matches:", compare_with_torch())
assert compare_with_torch(), "log_softmax differs"
""",
}


def _solution(exercise: str) -> nbformat.NotebookNode:
    return nbformat.read(SOLUTIONS / f"{exercise}.ipynb", as_version=4)


def _with_cells(exercise: str, cells: list[str], folder: Path, name: str) -> Path:
    nb = _solution(exercise)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _wrapped_by(exercise: str, extra: str) -> str:
    """Every graded object of `exercise` wrapped to call `extra()` after each call (a
    function) or construction (a class)."""
    wrapper = SETUP[SETUP.index("def _wrapped(graded):") :].replace("_routes()", f"{extra}()")
    graded = load_catalog()[exercise].defines
    return (
        "import functools\n\n"
        + wrapper
        + "\n"
        + "\n".join(f"{name} = _wrapped({name})" for name in graded)
    )


def routes_cell(exercise: str) -> str:
    """The routes, then every graded object of `exercise` wrapped to take them."""
    body = "\n".join(f"    {code}" for code, _ in ROUTES.values())
    setup = SETUP.replace("{thread}", THREAD_ROUTE[0]).replace("{routes}", body)
    graded = load_catalog()[exercise].defines
    return setup + "\n" + "\n".join(f"{name} = _wrapped({name})" for name in graded)


EXERCISES = sorted(load_catalog())
COHORT = Cohort("trust")


@COHORT.notebooks
def _notebooks(folder: Path) -> dict[str, Path]:
    made = {
        f"routes-{ex}": _with_cells(ex, [routes_cell(ex)], folder, f"routes-{ex}")
        for ex in EXERCISES
    }
    made["probe"] = _with_cells("norms", [PROBE], folder, "probe")
    for name, body in TRICKS.items():
        made[f"trick-{name}"] = _with_cells("norms", [_trick_cell(body)], folder, f"trick-{name}")
    for ex in PUBLIC_API_EXERCISES:
        cell = PUBLIC_API + "\n" + _wrapped_by(ex, "_honest")
        made[f"public-api-{ex}"] = _with_cells(ex, [cell], folder, f"public-api-{ex}")
    for ex, cell in FAIR_COMPILE.items():
        made[f"compile-{ex}"] = _with_cells(ex, [cell], folder, f"compile-{ex}")
    for ex, cell in SELF_CHECK.items():
        made[f"self-check-{ex}"] = _with_cells(ex, [cell], folder, f"self-check-{ex}")
    return made


def _scratch_lost(report: dict) -> bool:
    scratch = next(lv for lv in report["levels"] if lv["name"] == SCRATCH_LEVEL)
    return bool(scratch["score"] < scratch["max_score"])


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_private_route_is_caught_on_every_exercise(cohort, exercise):
    """Each route (the worker thread's included) costs the from-scratch level, and the
    card's integrity findings name it, as evidence, at its line."""
    graded = cohort["trust"][f"routes-{exercise}"]
    assert graded.returncode in (0, 1), graded.stderr[-2000:]
    report = graded.report
    assert not report["cell_errors"], report["cell_errors"]
    assert _scratch_lost(report)
    evidence = [f["message"] for f in report["integrity"] if f["kind"] == "builtin"]
    missing = [
        route
        for route, (_, expected) in [*ROUTES.items(), ("worker thread", THREAD_ROUTE)]
        if not any(expected in message for message in evidence)
    ]
    assert not missing, f"{exercise}: not caught {missing}; evidence: {evidence}"


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_a_way_around_the_watch_is_caught(cohort, trick):
    report = cohort["trust"][f"trick-{trick}"].report
    assert _scratch_lost(report), report["integrity"]
    assert [f for f in report["integrity"] if f["kind"] in ("builtin", "machinery")]


def _probe_lines(report: dict) -> list[str]:
    (error,) = [e["message"] for e in report["cell_errors"] if "PROBE" in e["message"]]
    return error.split("PROBE ", 1)[1].split(" | ")


def _assert_probe_held(report: dict) -> None:
    lines = _probe_lines(report)
    uid = int(lines[0].split()[1])
    assert uid != 0, lines
    wrote = [line for line in lines if line.startswith(("WROTE", "TRACED"))]
    if report["sandboxed"]:
        assert not wrote, lines
    else:  # best effort: the system calls are refused, /proc may be writable
        assert not [w for w in wrote if "process_vm" in w or "TRACED" in w], lines


@pytest.mark.kernel
@pytest.mark.slow
def test_the_forked_kernel_is_not_root_and_cannot_write_the_host_or_itself(cohort):
    report = cohort["trust"]["probe"].report
    _assert_probe_held(report)
    if report["kernel_user"]:  # the grader runs as root: the card says who the kernel was
        assert report["kernel_user"].startswith(("uid ", "nobody")), report["kernel_user"]


@pytest.mark.kernel
@pytest.mark.slow
def test_the_cold_kernel_is_not_root_and_cannot_write_the_host_or_itself(tmp_path):
    path = _with_cells("norms", [PROBE], tmp_path, "probe-cold")
    done = grade(path, "--cold")
    _assert_probe_held(json.loads(done.stdout))


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("exercise", PUBLIC_API_EXERCISES)
def test_graded_code_using_torchs_public_api_widely_keeps_full_marks(cohort, exercise):
    graded = cohort["trust"][f"public-api-{exercise}"]
    report = graded.report
    assert not report["cell_errors"], report["cell_errors"]
    evidence = [f["message"] for f in report["integrity"] if f["kind"] != "note"]
    assert report["score"] == report["max_score"] and not evidence, evidence


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("exercise", sorted(FAIR_COMPILE))
def test_torch_compile_of_the_candidates_code_keeps_full_marks(cohort, exercise):
    report = cohort["trust"][f"compile-{exercise}"].report
    _assert_full_marks(report)
    notes = [f["message"] for f in report.get("integrity") or [] if f["kind"] == "note"]
    assert any("torch.compile or torch.jit" in n for n in notes), notes


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.parametrize("exercise", sorted(SELF_CHECK))
def test_a_self_check_helper_used_at_top_level_keeps_full_marks(cohort, exercise):
    _assert_full_marks(cohort["trust"][f"self-check-{exercise}"].report)


def _assert_full_marks(report: dict) -> None:
    lost = [(t["id"], t["message"]) for t in report["tests"] if t["status"] != "passed"]
    assert report["score"] == report["max_score"], lost

"""What the attention exercises share: what counts as torch's built-in attention and how the
grader watches for it (`ATTENTION`, `exercise`), how the suites reach a candidate's module
(`Adapter`), and the tensors they use: seeded inputs, masks, and the torch oracle.

Masks here are in one canonical form, `allow`: nonzero = may attend, [T, S] or
[B | 1, 1 | H, T | 1, S], any dtype; an adapter turns it into the exercise's own arguments.
Everything runs in the grader's process, with the grader's own torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from grader.suite import checks
from grader.suite.exercise import Exercise, Watch
from grader.suite.library import F32, F64, exactly_zero, randn, state_dict
from grader.suite.library import load_state as load
from grader.suite.library import require_state as require

Inputs = tuple[torch.Tensor, ...]
# the generic helpers the suites reach as att.randn, att.require, ... (grader.suite.library)
__all__ = ["F32", "F64", "exactly_zero", "load", "randn", "require", "state_dict"]


SDPA = "scaled_dot_product_attention"
MHA_FORWARD = "multi_head_attention_forward"
NATIVE_MHA = "_native_multi_head_attention"
# Names the source scan flags when the notebook binds them to torch's.
FORBIDDEN = (SDPA, "MultiheadAttention", MHA_FORWARD, NATIVE_MHA)
ATTENTION = Watch(
    what="attention",
    functions=(SDPA, MHA_FORWARD),
    ops=("scaled_dot_product", NATIVE_MHA),
    dispatch=(SDPA,),
    # every aten op that computes attention or part of it, composite and private ones
    dispatch_pattern=r"attention|multi_head|transformer_encoder|sdp_|masked_softmax",
    instrument=(f"torch.nn.functional:{MHA_FORWARD}", "torch.nn:MultiheadAttention.forward"),
    modules=frozenset({"torch.nn.modules.activation.MultiheadAttention"}),
    # private torch names that compute attention, or part of it
    private=r"attention|attn|sdp|multi_head|in_projection|transformer|masked_softmax",
    # one path through nn.MultiheadAttention in the kernel, whatever the module's mode
    setup="import torch\ntorch.backends.mha.set_fastpath_enabled(False)\n",
)
# The oracle (nn.MultiheadAttention in the grader's process) takes one deterministic path.
torch.backends.mha.set_fastpath_enabled(False)


def exercise(**fields: Any) -> Exercise:
    """An attention exercise: torch's attention built-ins are forbidden and watched."""
    return Exercise(**fields, watch=ATTENTION, forbidden=FORBIDDEN)


def causal_allow(t: int, s: int | None = None) -> torch.Tensor:
    """[T, S] bool, True = may attend (key j <= query i)."""
    return torch.arange(t if s is None else s)[None, :] <= torch.arange(t)[:, None]


def padding_allow(lengths: list[int], s: int) -> torch.Tensor:
    """[B, 1, 1, S] bool, True = a real key, for per-sample lengths."""
    return (torch.arange(s)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def random_allow(*shape: int, seed: int, p: float = 0.4, open: int = 0) -> torch.Tensor:
    """A bool mask, True with probability 1 - p, key `open` always allowed (no fully blocked
    rows: nn.MultiheadAttention is no oracle for those)."""
    allow = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) > p
    allow[..., open] = True
    return allow


def blocked(allow: torch.Tensor | None, b: int, t: int, s: int, heads: int) -> torch.Tensor | None:
    """A canonical mask as nn.MultiheadAttention's bool attn_mask (True = blocked), folded to
    [B*H, T, S] in its b*H + h order (a mask shared by the heads repeated per head)."""
    return None if allow is None else (allow == 0).expand(b, heads, t, s).reshape(-1, t, s)


def qkv(inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x,) -> (x, x, x); (x, kv) -> (x, kv, kv); (q, k, v) unchanged."""
    q, k, v = (*inputs, *inputs[-1:] * (3 - len(inputs)))
    return q, k, v


def oracle(heads: int, weights: list, biases: list) -> nn.MultiheadAttention:
    """A float64 nn.MultiheadAttention (batch first, eval mode) holding the projections, the
    out projection last: q, k, v and out, or a fused in_proj (q, k, v stacked) and out. An
    input narrower than E reaches it zero-padded (`run_oracle`): its in_proj columns too."""
    bias, in_proj = biases[0] is not None, torch.cat(weights[:-1])
    mha = nn.MultiheadAttention(weights[-1].shape[0], heads, bias=bias, batch_first=True, dtype=F64)
    with torch.no_grad():
        mha.in_proj_weight.zero_()[:, : in_proj.shape[1]].copy_(in_proj)
        mha.out_proj.weight.copy_(weights[-1])
        if bias:
            mha.in_proj_bias.copy_(torch.cat(biases[:-1]))
            mha.out_proj.bias.copy_(biases[-1])
    return mha.eval()


def run_oracle(mha: nn.MultiheadAttention, inputs: Inputs, attn_mask=None, per_head=True):
    """The oracle's output and weights ([B, H, T, S], or averaged: [B, 1, T, S]) in float64;
    `attn_mask` in its own convention (bool True = blocked, or float added). Never give it a
    fully blocked row: it returns NaN for those."""
    q, k, v = (F.pad(t.double(), (0, mha.embed_dim - t.shape[-1])) for t in qkv(inputs))
    y, w = mha(q, k, v, attn_mask=attn_mask, need_weights=True, average_attn_weights=not per_head)
    return y, (w if per_head else w[:, None])


@dataclass(frozen=True)
class Adapter:
    """One candidate module (or function) as the shared checks reach it. A subclass says how
    to `build` it and, where its forward differs from ``module(*inputs, mask=allow)``, how a
    call is `request`ed. Weights come back as [B, H, T, S] (head-averaged: [B, 1, T, S]).

    Each suite picks sizes that make bugs show: B, H, T, S and the head width all differ,
    H >= 2, and a mask given per sample has B == H, so one not broadcast over heads fails."""

    E: int  # output width
    H: int
    B: int
    T: int  # query length
    S: int  # key length in cross-attention (= T where there is none)
    d_in: int = 0  # input width, where it differs from E
    owner: str = "MultiHeadAttention"  # the class built, as messages name it
    args: tuple[str, ...] = ("x",)  # forward's inputs in cross-attention
    mask: str | None = "mask"  # forward's mask argument (None: no mask is passed)
    output: str = "output"  # what messages call the output
    prefix: str = ""  # before "weights" in messages
    dropout: float = 0.0  # what `build` gives when not told
    per_head: bool = True  # weights [B, H, T, S]; False: averaged over heads, [B, T, S]
    returns_weights: bool = True  # forward returns (y, weights), not y alone
    function: bool = False  # a plain function: no parameters, no submodules
    layers: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "out_proj")
    heads_api: tuple[str, str] = ("_split_heads", "_merge_heads")

    def replace(self, **changes: Any) -> Any:
        """This adapter with other sizes or names."""
        return dataclasses.replace(self, **changes)

    def build(self, kernel: Any, dropout: float | None = None, bias: bool = True, seed: int = 0):
        """The candidate's module with these sizes (dropout: the adapter's unless told), in
        eval mode."""
        module = self.new(kernel, self.dropout if dropout is None else dropout, bias, seed)
        module.eval()
        return module

    def new(self, kernel: Any, dropout: float, bias: bool, seed: int) -> Any:
        """Construct the candidate's class in the kernel (torch seeded with `seed` first)."""
        raise NotImplementedError

    def request(self, module: Any, inputs: Inputs, allow=None, weights: bool = True):
        """What to call for `inputs` under the canonical mask: (remote, args, kwargs)."""
        return module, inputs, ({} if allow is None or not self.mask else {self.mask: allow})

    def forward(self, module, inputs: Inputs, allow=None, weights=True, seed=None, **extra):
        """Call it (torch seeded first, given a seed); check and return (y, weights or None)."""
        target, args, kwargs = self.request(module, inputs, allow, weights)
        answer = (target if seed is None else target.seeded(seed))(*args, **kwargs, **extra)
        return self.checked(answer, inputs, weights)

    def forward_all(self, module, cases: list[tuple[Inputs, Any]]) -> list[tuple]:
        """`forward` for each (inputs, allow) in `cases`, asked of the kernel in one request."""
        calls = [self.request(module, inputs, allow)[1:] for inputs, allow in cases]
        target = self.request(module, cases[0][0], cases[0][1])[0]
        answers = target.kernel.many(target, calls)
        return [self.checked(a, inputs) for a, (inputs, _) in zip(answers, cases, strict=True)]

    def checked(self, answer, inputs: Inputs, weights=True) -> tuple:
        """(y, weights or None) from forward's answer for `inputs`, its shapes checked."""
        b, t, s = inputs[0].shape[0], inputs[0].shape[1], inputs[-1].shape[1]
        if not self.returns_weights:
            return checks.tensor(answer, self.output, (b, t, self.E)), None
        y, w = checks.pair(answer, f"{self.owner}.forward({', '.join(self.args[: len(inputs)])})")
        checks.tensor(y, self.output, (b, t, self.E))
        if not weights:
            return y, w
        checks.tensor(w, f"{self.prefix}weights", (b, self.H, t, s) if self.per_head else (b, t, s))
        return y, (w if self.per_head else w[:, None])

    def weights(self, module, inputs: Inputs, allow=None, **extra) -> torch.Tensor:
        """The attention weights for `inputs`, [B, H, T, S]."""
        return self.forward(module, inputs, allow, **extra)[1]

    def inputs(self, batch=None, t=None, s=None, *, cross=True, seed=1, scale=1.0, dtype=F32):
        """Seeded inputs: (x,) for self-attention, else one per name in `args`."""
        b, t, s = batch or self.B, t or self.T, s or self.S
        shapes = [(b, t, self.d_in or self.E)] + [(b, s, self.E)] * (len(self.args) - 1) * cross
        return tuple(
            randn(*n, seed=seed + i, scale=scale, dtype=dtype) for i, n in enumerate(shapes)
        )

    def batch(self, allow) -> int:
        """A per-sample mask's batch size, else the adapter's."""
        per_sample = allow is not None and allow.dim() == 4 and allow.shape[0] > 1
        return allow.shape[0] if per_sample else self.B

    def layer_shapes(self, bias=True) -> dict[str, tuple[int, ...]]:
        """Each layer's weight (and bias) as nn.Linear holds it: the q, k and v projections
        (or one fused qkv projection) from the input width, then the out projection."""
        *projections, out = self.layers
        rows = 3 * self.E // max(len(projections), 1)
        shapes: dict[str, tuple[int, ...]] = {
            f"{p}.weight": (rows, self.d_in or self.E) for p in projections
        }
        shapes[f"{out}.weight"] = (self.E, self.E)
        if bias:
            shapes.update({f"{p}.bias": (rows,) for p in projections} | {f"{out}.bias": (self.E,)})
        return shapes

    def randomise(self, module, dtype, bias=True, seed=7) -> dict[str, torch.Tensor]:
        """Cast the module to `dtype`, give every layer a random bias (fresh biases are zero
        and hide bias bugs), and return the layers' tensors as the module now holds them
        (each of the shape `layer_shapes` says, or the test fails)."""
        names = [f"{p}.{kind}" for p in self.layers for kind in ("weight", "bias")[: 1 + bias]]
        shapes = self.layer_shapes(bias)
        state = require(module.state_dict(), names, self.owner, shapes)
        module.to(dtype)
        if bias:
            rows = [state[f"{p}.bias"].shape[0] for p in self.layers]
            news = [randn(n, seed=seed + i, scale=0.5, dtype=dtype) for i, n in enumerate(rows)]
            load(
                module, self.owner, {f"{p}.bias": b for p, b in zip(self.layers, news, strict=True)}
            )
        held = require(module.state_dict(), names, self.owner, shapes)
        return {n: t.to(dtype) for n, t in held.items()}

    def oracle(self, module, dtype, bias=True) -> Callable[..., tuple]:
        """Randomise the module's biases; a float64 reference for it, (inputs, blocked) ->
        (y, weights): here nn.MultiheadAttention holding its projections."""
        state = self.randomise(module, dtype, bias)
        weights = [state[f"{p}.weight"] for p in self.layers]
        mha = oracle(self.H, weights, [state.get(f"{p}.bias") for p in self.layers])
        return lambda inputs, blocked=None: run_oracle(mha, inputs, blocked, self.per_head)


@dataclass(frozen=True)
class Profile:
    """What `--profile` (grader.run.profile) times for an attention exercise: the suite's
    adapter at B=1, E=64, H=4 (d_in = E), in self-attention with no mask, its forward
    called as the suite calls it (asking for weights where it returns them); against
    nn.MultiheadAttention(E, H) in the grader's process, asked for weights exactly when the
    candidate's forward returns them (per head or averaged, as it does), with a causal
    mask when the candidate's module is always causal.

    A suite makes its `exercise` before its adapter, so it names the adapter: `suite` is the
    suite's module (its ``__name__``), `adapter` the name of the adapter there, looked up
    when the profile runs. `context` names an adapter field that must be at least T (a
    causal mask buffer's length)."""

    suite: str
    adapter: str
    causal: bool = False
    context: str = ""
    E: int = 64
    H: int = 4
    B: int = 1

    def found(self) -> Adapter:
        """The suite's adapter."""
        import importlib

        A = getattr(importlib.import_module(self.suite), self.adapter)
        if not isinstance(A, Adapter):
            raise TypeError(f"{self.suite}.{self.adapter} is not an Adapter")
        return A

    def sized(self, t: int) -> Adapter:
        """The adapter at sequence length `t` (queries and keys) and the profile's sizes."""
        A = self.found()
        changes: dict[str, Any] = {"E": self.E, "H": self.H, "B": self.B, "T": t, "S": t}
        if A.d_in:
            changes["d_in"] = self.E
        if self.context:
            changes[self.context] = t
        return A.replace(**changes)

    def describe(self) -> dict[str, Any]:
        """What is timed against what (see grader.run.profile.Profiled)."""
        A = self.found()
        weights = "need_weights=False"
        if A.returns_weights:
            weights = f"need_weights=True, {'per head' if A.per_head else 'averaged'}"
        causal = ", causal mask" if self.causal else ""
        return {
            "candidate": f"{A.owner}" if A.function else f"{A.owner}.forward",
            "baseline": f"nn.MultiheadAttention({self.E}, {self.H}) ({weights}{causal})",
            "sizes": {"B": self.B, "E": self.E, "H": self.H},
        }

    def candidate(self, kernel: Any, t: int) -> tuple[Any, tuple, dict[str, Any]]:
        """The candidate's module built in the kernel (eval mode) and forward's arguments."""
        A = self.sized(t)
        module = A.build(kernel)
        target, args, kwargs = A.request(module, A.inputs(cross=False), None)
        return target, tuple(args), dict(kwargs)

    def check(self, kernel: Any, t: int) -> None:
        """Before its speed is compared: the candidate's output at length `t` is the
        reference's (float64, as the parity level checks it), so a forward that returns
        at once without computing attention is not timed.

        Raises:
            Failed: the output (or weights) differ from nn.MultiheadAttention's.
        """
        from grader.exercises import _shared

        A = self.sized(t)
        _shared.parity(kernel, A, cross=False)

    def baseline(self, t: int, device: str) -> Callable[[], Any]:
        """nn.MultiheadAttention on `device` (eval mode, float32) and the same inputs."""
        A = self.sized(t)
        mha = nn.MultiheadAttention(self.E, self.H, batch_first=True, device=device).eval()
        (x,) = A.inputs(cross=False)
        x = F.pad(x, (0, self.E - x.shape[-1])).to(device)
        options: dict[str, Any] = {"need_weights": A.returns_weights}
        if A.returns_weights:
            options["average_attn_weights"] = not A.per_head
        if self.causal:
            options["attn_mask"] = ~causal_allow(t).to(device)
        return lambda: mha(x, x, x, **options)

"""The corpus of attention_backward: single-bug copies of solutions/attention_backward.ipynb
(the classic bugs of EXERCISES_CANON.md section 2, and more), each with the level where it
must first lose points and the hint the card asks, and correct variants that keep full
marks.

`values=True` marks a bug in what every gradient check compares (a missing transpose, the
scale left out of dq, dS without its row term). Not in the corpus, because they compute
the same function: dS left unmasked (P is exactly 0 where masked, so dS is too), the row
term taken as sum(dp * p) instead of sum(dout * out) (a variant below), the row term over
the wrong axis (it fails exactly where dS without its row term does, so no check tells
the two apart: left out).
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 33

SCALE_DEFAULT = "scale = 1.0 / math.sqrt(q.shape[-1])"
QS = "qs = q * scale  # the scaled queries, kept for the backward pass"
SCORES = "s = qs @ k.transpose(-2, -1)"
OUT = "out = (e / total) @ v"
LSE = "lse = (m + total.log()).squeeze(-1)"
P = "p = torch.exp(s - lse.unsqueeze(-1))"
DV = "dv = p.transpose(-2, -1) @ dout"
ROWDOT = "rowdot = (dout * out).sum(dim=-1, keepdim=True)"
DS = "ds = p * (dp - rowdot)"
DQ = 'dq = ds @ k * cache["scale"]'
DK = "dk = ds.transpose(-2, -1) @ qs"
SOFTMAX_VJP = "return p * (dp - (dp * p).sum(dim=-1, keepdim=True))"
FIRST_BACKWARD_LINE = (
    'qs, k, v, out, lse = (cache[name] for name in ("qs", "k", "v", "out", "lse"))'
)
# attention_backward recomputed through autograd: a fresh forward on leaves that require
# grad (the cache holds q, k, v, causal and the scale)
RERUN = """leaves = [cache[name].detach().clone().requires_grad_() for name in ("q", "k", "v")]
    again, _ = attention_forward(*leaves, cache["causal"], cache["scale"])"""

MUTANTS = [
    # -- shapes
    Mutant(
        "dk_not_transposed",
        DK,
        "dk = ds @ qs",
        "shapes",
        hint="dk computed as dS @ q instead of dS.T @ q (shape (Tq, D), not k's (Tk, D))?",
        values=True,
    ),
    Mutant(
        "dv_not_transposed",
        DV,
        "dv = p @ dout",
        "shapes",
        hint="dv computed as P @ dout instead of P.T @ dout?",
        values=True,
    ),
    Mutant(
        "dp_not_transposed",
        "dp = dout @ v.transpose(-2, -1)",
        "dp = dout @ v",
        "shapes",
        hint="dP computed as dout @ v instead of dout @ v.T?",
        values=True,
    ),
    Mutant(
        "output_in_float32",
        "return out, cache",
        "return out.float(), cache",
        "shapes",
        hint="the output cast to float32, whatever q's dtype?",
    ),
    Mutant(
        "softmax_over_the_queries",
        "total = e.sum(dim=-1, keepdim=True)",
        "total = e.sum(dim=-2, keepdim=True)",
        "shapes",
        hint="the softmax normalised over the queries (dim=-2) instead of the keys?",
        values=True,
    ),
    # -- softmax backward
    Mutant(
        "softmax_backward_without_the_row_term",
        SOFTMAX_VJP,
        "return p * dp",
        "softmax backward",
        hint="softmax_backward returns p * dp, without subtracting sum(dp * p) per row?",
    ),
    Mutant(
        "softmax_backward_sign_flipped",
        SOFTMAX_VJP,
        "return p * ((dp * p).sum(dim=-1, keepdim=True) - dp)",
        "softmax backward",
        hint="softmax_backward's sign flipped: p * (sum(dp * p) - dp)?",
    ),
    Mutant(
        "softmax_backward_in_place",
        SOFTMAX_VJP,
        "return p.mul_(dp - (dp * p).sum(dim=-1, keepdim=True))",
        "softmax backward",
        hint="softmax_backward multiplies p in place, changing the caller's tensor?",
    ),
    # -- forward and dv
    Mutant(
        "scale_from_the_value_width",
        SCALE_DEFAULT,
        "scale = 1.0 / math.sqrt(v.shape[-1])",
        "forward and dv",
        hint="the default scale 1/sqrt(Dv) from v's width instead of 1/sqrt(D) from q's?",
        values=True,
    ),
    Mutant(
        "weights_not_normalised",
        OUT,
        "out = e @ v",
        "forward and dv",
        hint="the output computed from exp(s - max) without dividing by each row's sum?",
        values=True,
    ),
    Mutant(
        "dv_scaled",
        DV,
        'dv = p.transpose(-2, -1) @ dout * cache["scale"]',
        "forward and dv",
        hint="dv multiplied by the scale (only the scores are scaled: dv = P.T @ dout)?",
        values=True,
    ),
    # -- dq and dk
    Mutant(
        "dq_without_the_scale",
        DQ,
        "dq = ds @ k",
        "dq and dk",
        hint="dq = dS @ k without the scale (s = scale * q @ k.T)?",
        values=True,
    ),
    Mutant(
        "dk_scaled_twice",
        DK,
        'dk = ds.transpose(-2, -1) @ qs * cache["scale"]',
        "dq and dk",
        hint="dk multiplied by the scale twice (once through the scaled q, once more)?",
        values=True,
    ),
    Mutant(
        "ds_without_the_row_term",
        DS,
        "ds = p * dp",
        "dq and dk",
        hint="dS = P * dP, without subtracting each row's sum(dP * P) (the softmax's backward)?",
        values=True,
    ),
    Mutant(
        "zero_scale_taken_for_the_default",
        "if scale is None:",
        "if not scale:",
        "dq and dk",
        hint="scale=0.0 taken for the default 1/sqrt(D) (`if not scale`)?",
    ),
    Mutant(
        "given_scale_ignored",
        f"if scale is None:\n        {SCALE_DEFAULT}",
        SCALE_DEFAULT,
        "dq and dk",
        hint="the given scale ignored: 1/sqrt(D) always?",
    ),
    # -- causal
    Mutant(
        "causal_top_left",
        "device=q.device).tril(tk - tq)",
        "device=q.device).tril(0)",
        "causal",
        hint="the causal mask top-left aligned (tril(0)) instead of bottom-right when Tq < Tk?",
    ),
    Mutant(
        "masked_scores_set_to_zero",
        's = s.masked_fill(~allow, float("-inf"))',
        "s = s.masked_fill(~allow, 0.0)",
        "causal",
        hint="masked scores set to 0 instead of -inf, so the future keeps some weight?",
    ),
    Mutant(
        "backward_without_the_mask",
        '    if cache["allow"] is not None:\n'
        '        s = s.masked_fill(cache["allow"].logical_not(), -math.inf)\n',
        "",
        "causal",
        hint="the backward pass recomputes P without the causal mask?",
    ),
    Mutant(
        "causal_with_more_queries_accepted",
        "        if tq > tk:\n"
        '            raise ValueError(f"causal attention needs Tq <= Tk, got Tq={tq}, Tk={tk}")\n',
        "",
        "causal",
        hint="causal=True with Tq > Tk does not raise ValueError?",
    ),
    # -- edge cases
    Mutant(
        "lse_squeezed_on_every_axis",
        LSE,
        "lse = (m + total.log()).squeeze()",
        "edge cases",
        hint="squeeze() without an axis, which also drops a Tq (or B, H) of size 1?",
    ),
    Mutant(
        "log_sum_exp_in_float64",
        LSE,
        "lse = (m + total.double().log()).squeeze(-1)",
        "edge cases",
        hint="a tensor cast to float64 inside, so float32 inputs mix dtypes (or come back float64)?",
    ),
    # -- robustness
    Mutant(
        "no_max_shift",
        "m = s.amax(dim=-1, keepdim=True)",
        "m = torch.zeros_like(s[..., :1])",
        "robustness",
        hint="exp of the raw scores, without subtracting each row's maximum (overflows)?",
    ),
    Mutant(
        "unstable_softmax_in_the_backward",
        P,
        "p = s.exp() / s.exp().sum(dim=-1, keepdim=True)",
        "robustness",
        hint="the backward pass recomputes P = exp(s) / sum without the max shift (overflows)?",
    ),
    Mutant(
        "keys_flattened_with_view",
        SCORES,
        "s = torch.bmm(qs.reshape(-1, tq, qs.shape[-1]), "
        "k.view(-1, tk, k.shape[-1]).transpose(1, 2)).reshape(*qs.shape[:-1], tk)",
        "robustness",
        hint="k flattened with .view, which fails on a non-contiguous k (use reshape)?",
    ),
    Mutant(
        "dout_flattened_with_view",
        ROWDOT,
        "rowdot = (dout.view(-1, dout.shape[-1]) * out.reshape(-1, out.shape[-1]))"
        ".sum(dim=-1).reshape(*out.shape[:-1], 1)",
        "robustness",
        hint="dout flattened with .view, which fails on a non-contiguous dout (use reshape)?",
    ),
    Mutant(
        "q_scaled_in_place",
        QS,
        "qs = q.mul_(scale)",
        "robustness",
        hint="q scaled in place (q.mul_), changing the caller's tensor?",
    ),
    Mutant(
        "dout_multiplied_in_place",
        ROWDOT,
        "rowdot = dout.mul_(out).sum(dim=-1, keepdim=True)",
        "robustness",
        hint="dout multiplied by out in place for the row term, changing the caller's tensor?",
    ),
    Mutant(
        "cached_log_sum_exp_changed_in_place",
        P,
        "p = torch.exp(s - lse.unsqueeze_(-1))",
        "robustness",
        hint="the cached log-sum-exp reshaped in place (unsqueeze_), so a second backward fails?",
    ),
    # -- from scratch
    Mutant(
        "autograd_grad",
        FIRST_BACKWARD_LINE,
        f"{RERUN}\n    return torch.autograd.grad(again, leaves, dout)",
        "from scratch",
        hint="the gradients computed by torch.autograd.grad instead of by hand?",
    ),
    Mutant(
        "out_backward",
        FIRST_BACKWARD_LINE,
        f"{RERUN}\n    again.backward(dout)\n    return tuple(t.grad for t in leaves)",
        "from scratch",
        hint="the gradients computed by autograd (.backward() on a recomputed output)?",
    ),
    Mutant(
        "torch_sdpa_forward",
        OUT,
        "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allow, "
        "scale=scale)",
        "from scratch",
        hint="the forward pass calls F.scaled_dot_product_attention?",
    ),
    Mutant(
        "softmax_backward_kernel",
        SOFTMAX_VJP,
        "return torch._softmax_backward_data(dp, p, -1, p.dtype)",
        "from scratch",
        hint="softmax_backward calls torch's private _softmax_backward_data kernel?",
    ),
]

VARIANTS = [
    Variant("row_term_from_dp", ROWDOT, "rowdot = (dp * p).sum(dim=-1, keepdim=True)"),
    Variant("torch_softmax_forward", OUT, "out = torch.softmax(s, dim=-1) @ v"),
    Variant("logsumexp", LSE, "lse = torch.logsumexp(s, dim=-1)"),
    Variant("einsum_dq", DQ, 'dq = torch.einsum("bhqk,bhkd->bhqd", ds, k) * cache["scale"]'),
    Variant(
        "finite_mask_fill",
        's = s.masked_fill(~allow, float("-inf"))',
        "s = s.masked_fill(~allow, -1e30)",
    ),
    # the backward calls the notebook's softmax_backward, and a top-level helper of the
    # notebook's own is named softmax
    Variant("own_softmax_helper", notebook="variants/own_softmax_helper.ipynb"),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]

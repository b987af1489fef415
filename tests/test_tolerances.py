"""Honest tolerances: no hidden test compares tighter than torch.testing.assert_close's
defaults for the dtype, `checks.close` names the element that breaks its tolerance the most,
NaN is never evidence, and correct code that rounds in float32 earns full marks."""

from __future__ import annotations

import nbformat
import pytest
import torch

from grader.suite import checks
from grader.suite.checks import Failed
from grader.suite.corpus import Mutant, apply
from tests.cohort import Cohort
from tests.helpers import SOLUTIONS, assert_full_marks, notebook_with

# -- the tolerance table ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_defaults_are_assert_closes(dtype):
    want = torch.tensor([0.0, 1.0, -3.0], dtype=torch.float64)
    tol = checks.tolerance(dtype)
    allowed = tol.atol + tol.rtol * want.abs()
    inside, outside = (want + 0.9 * allowed).to(dtype), (want + 1.1 * allowed).to(dtype)
    torch.testing.assert_close(inside, want.to(dtype))
    checks.close(inside, want, "y")
    with pytest.raises(AssertionError):
        torch.testing.assert_close(outside, want.to(dtype))
    with pytest.raises(Failed):
        checks.close(outside, want, "y")


def test_tolerance_is_that_of_the_less_precise_dtype():
    assert checks.tolerance(torch.float32, torch.float64) == checks.tolerance(torch.float32)
    assert checks.tolerance(torch.float64, torch.float64) == checks.Tolerance(rtol=1e-7, atol=1e-7)
    assert checks.tolerance(torch.float32) == checks.Tolerance(rtol=1.3e-6, atol=1e-5)


def test_a_tighter_tolerance_is_raised_to_the_default():
    assert checks.tolerance(torch.float64, rtol=0.0, atol=1e-10) == checks.tolerance(torch.float64)
    assert checks.tolerance(torch.float32, atol=1e-4).atol == 1e-4


def test_float64_rounding_noise_passes():
    want = torch.tensor([1.0, 0.0, -2.0], dtype=torch.float64)
    checks.close(want + 5e-8, want, "y")  # failed at the old atol=1e-10


def test_float32_noise_near_zero_passes():
    want = torch.tensor([1e-9, 0.5, -3.0], dtype=torch.float64)
    checks.close((want + 4e-7).float(), want, "y")  # failed at the seed's atol=1e-8, rtol=1e-5


def test_the_smallest_real_bug_fails_in_either_dtype():
    want = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        with pytest.raises(Failed):
            checks.close((want * 1.05).to(dtype), want, "y")


# -- the failure message ----------------------------------------------------------------


def test_close_names_the_element_that_breaks_its_tolerance_the_most():
    want = torch.tensor([[1000.0, 0.0], [1.0, 2.0]], dtype=torch.float64)
    got = want.clone()
    got[0, 0] += 9e-5  # the largest difference, within 1e-7 + 1e-7 * 1000
    got[1, 1] += 1e-6  # a smaller one, 3.3 times the 3e-7 allowed there
    got[0, 1] += 2e-7  # outside too, 2 times the 1e-7 allowed there
    with pytest.raises(Failed) as failed:
        checks.close(got, want, "y vs oracle")
    assert str(failed.value) == (
        "y vs oracle: 2 of 4 elements outside the tolerance; worst at [1, 1]: got 2.000001, "
        "want 2, off by 1e-06 where 3e-07 is allowed (atol=1e-07, rtol=1e-07)"
    )


def test_close_fails_on_nan_in_either_tensor():
    good = torch.zeros(2, 3)
    bad = good.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(Failed, match="y: 1 NaN and 0 inf values out of 6"):
        checks.close(bad, good, "y")
    with pytest.raises(Failed, match="1 NaN"):
        checks.same(good, bad, "y")


def test_nan_is_no_difference():
    y_eval = torch.randn(2, 5)
    with pytest.raises(Failed, match="train-mode y: 10 NaN and 0 inf values out of 10"):
        checks.differ(torch.full_like(y_eval, float("nan")), y_eval, "train-mode y")


def test_rows_sum_to_one_within_the_dtypes_tolerance():
    w = torch.full((2, 4), 0.25, dtype=torch.float64)
    checks.rows_sum_to_one(w + 2e-6, "weights")  # float32 softmax noise in a float64 call
    with pytest.raises(Failed, match="rows sum to between 1.4 and 1.4, want 1"):
        checks.rows_sum_to_one(w + 0.1, "weights")


# -- correct code that rounds in float32 earns full marks (real kernels) ---------------

# Seed 001's own code: its imports and its scaled_dot_product_attention helper as written
# (it scales by a float32 constant, also in a float64 call, and fills masked scores with -1e9).
SEED_001_HELPER = '''import torch
import torch.nn as nn
import torch.nn.functional as F

# Set random seed for reproducibility
torch.manual_seed(42)

def scaled_dot_product_attention(q, k, v, mask=None):
    """
    Compute scaled dot-product attention (from previous problem).

    Args:
        q: Query tensor of shape (..., seq_len_q, d_k)
        k: Key tensor of shape (..., seq_len_k, d_k)
        v: Value tensor of shape (..., seq_len_k, d_v)
        mask: Optional mask tensor of shape (..., seq_len_q, seq_len_k)

    Returns:
        output: Attention output tensor of shape (..., seq_len_q, d_v)
        attention_weights: Attention weights tensor of shape (..., seq_len_q, seq_len_k)
    """
    d_k = q.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = scores / torch.sqrt(torch.tensor(d_k, dtype=torch.float32))
    if mask is not None:
        scores = scores.masked_fill(mask == 1, -1e9)
    attention_weights = F.softmax(scores, dim=-1)
    output = torch.matmul(attention_weights, v)
    return output, attention_weights
'''

# The seed's multi_head_attention, with the thinnest changes to the exercise's interface: the
# given weights instead of fresh nn.Linear layers, and K, V reshaped by their own length (the
# seed used the query's). Everything else is the seed's.
SEED_001_FUNCTION = """def multi_head_attention(q, k, v, num_heads, d_model, mask=None, *, in_proj_weight,
                         out_proj_weight, in_proj_bias=None, out_proj_bias=None):
    assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
    batch_size, seq_len, _ = q.shape
    d_head = d_model // num_heads

    # changed: the given weights, laid out as in nn.MultiheadAttention
    q_weight, k_weight, v_weight = in_proj_weight.chunk(3)
    q_bias, k_bias, v_bias = (None,) * 3 if in_proj_bias is None else in_proj_bias.chunk(3)
    Q = F.linear(q, q_weight, q_bias)
    K = F.linear(k, k_weight, k_bias)
    V = F.linear(v, v_weight, v_bias)

    Q = Q.view(batch_size, seq_len, num_heads, d_head).transpose(1, 2)
    K = K.view(batch_size, k.size(1), num_heads, d_head).transpose(1, 2)  # changed: k.size(1)
    V = V.view(batch_size, v.size(1), num_heads, d_head).transpose(1, 2)  # changed: v.size(1)

    if mask is not None:
        if mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (batch_size, 1, seq_len, seq_len)

    output, _ = scaled_dot_product_attention(Q, K, V, mask)
    output = output.transpose(1, 2).contiguous().view(batch_size, seq_len, d_model)
    return F.linear(output, out_proj_weight, out_proj_bias)  # changed: the given weights
"""


COHORT = Cohort("tolerances")


@COHORT.notebooks
def _notebooks(folder):
    seed = folder / "seed_001.ipynb"
    nbformat.write(notebook_with(SEED_001_HELPER, SEED_001_FUNCTION, exercise="mha_parity"), seed)
    line = "torch.softmax(logits.masked_fill(blocked, 0.0), dim=-1)"
    in_float32 = Mutant(
        "float32_softmax",
        line,
        "torch.softmax(logits.masked_fill(blocked, 0.0).float(), dim=-1).to(logits.dtype)",
        level="",
    )
    softmax = folder / "float32_softmax.ipynb"
    nbformat.write(
        apply(nbformat.read(SOLUTIONS / "mha_interview.ipynb", as_version=4), in_float32), softmax
    )
    return {"seed_001": seed, "float32_softmax": softmax}


@pytest.mark.kernel
def test_seed_001_with_its_reshape_fixed_earns_full_marks(cohort):
    """It scored 44/58 when float64 parity was checked at atol 1e-10, and lost the source
    scan because its own helper is named scaled_dot_product_attention."""
    report = assert_full_marks(cohort["tolerances"]["seed_001"])
    assert report["integrity"] == []


@pytest.mark.kernel
def test_float32_softmax_in_a_float64_call_earns_full_marks(cohort):
    assert_full_marks(cohort["tolerances"]["float32_softmax"])


# -- exact answers: ids, masks, plain data ---------------------------------------------


def test_equal_compares_exactly_and_names_the_first_difference():
    checks.equal(torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([1, 2, 3]), "ids")
    with pytest.raises(Failed, match=r"ids: 1 of 3 elements differ; first at \[1\]: got 5, want 2"):
        checks.equal(torch.tensor([1, 5, 3]), torch.tensor([1, 2, 3]), "ids")
    with pytest.raises(checks.Interface, match="ids has dtype float32, want int64"):
        checks.equal(torch.tensor([1.0, 2.0]), torch.tensor([1, 2]), "ids")
    with pytest.raises(Failed, match="shape"):
        checks.equal(torch.tensor([1, 2]), torch.tensor([[1, 2]]), "ids")
    with pytest.raises(Failed, match="differ"):  # floats compared exactly: no tolerance
        checks.equal(torch.tensor([1.0 + 1e-7]), torch.tensor([1.0]), "kept logits")


def test_integers_wants_an_integer_tensor():
    assert checks.integers(torch.tensor([3]), "ids").dtype == torch.int64
    for wrong in (torch.tensor([3.0]), torch.tensor([True]), [3]):
        with pytest.raises(checks.Interface):
            checks.integers(wrong, "ids")


def test_data_names_where_plain_answers_differ():
    checks.data({(1, 2): 256, b"a": [1, (2, "x")]}, {(1, 2): 256, b"a": [1, (2, "x")]}, "m")
    cases = [
        ([1, [2, 3]], [1, [2, 4]], r"merges\[1\]\[1\]: got 3, want 4"),
        ({(1, 2): 3}, {(1, 2): 3, (2, 3): 4}, r"merges: got no key \(2, 3\)"),
        ([1, 2], [1, 2, 3], "got 2 items, want 3"),
        (b"ab", "ab", r"got a bytes \(b'ab'\), want a str"),
        (True, 1, "got a bool"),
    ]
    for actual, expected, message in cases:
        with pytest.raises(Failed, match=message):
            checks.data(actual, expected, "merges")

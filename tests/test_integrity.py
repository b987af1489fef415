"""The static scan finds attention built-ins however they are spelled."""

from __future__ import annotations

import pytest

from grader.integrity import scan

FORBIDDEN = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward")


@pytest.mark.parametrize(
    "source",
    [
        "y = F.scaled_dot_product_attention(q, k, v)",
        "from torch.nn.functional import scaled_dot_product_attention as sdpa",
        "m = torch.nn.MultiheadAttention(8, 2)",
        "from torch.nn import MultiheadAttention",
        "f = getattr(F, 'scaled_dot_product_' + 'attention')",
        "f = getattr(F, 'scaled_dot_product_attention')",
        "name = 'multi_head_attention_forward'",
        "f = getattr(torch.nn.functional, name)",
        "op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu",
        "mod = __import__('torch')",
        "import importlib",
        "exec(code)",
    ],
)
def test_finds_forbidden_use(source):
    assert scan(["x = 1", source], FORBIDDEN), source


def test_names_the_cell_and_line():
    assert scan(["a = 1", "b = 2\ny = F.scaled_dot_product_attention(q, k, v)"], FORBIDDEN) == [
        "code cell 2, line 2: uses scaled_dot_product_attention"
    ]


@pytest.mark.parametrize(
    "source",
    [
        "scores = q @ k.transpose(-2, -1) / math.sqrt(d)\nw = torch.softmax(scores, -1)",
        "model.eval()\nx = getattr(self, 'q_proj')",
        "def syntax error(:",
    ],
)
def test_clean_code_passes(source):
    assert scan([source], FORBIDDEN) == []

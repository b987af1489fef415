"""What the attention exercises count as torch's built-in attention, and how the grader
watches for it (`grader.exercise.Watch`). The grader itself names no topic."""

from __future__ import annotations

import torch

from grader.exercise import Watch

# Names the source scan flags when the notebook binds them to torch's.
FORBIDDEN = (
    "scaled_dot_product_attention",
    "MultiheadAttention",
    "multi_head_attention_forward",
    "_native_multi_head_attention",
)

ATTENTION = Watch(
    what="attention",
    functions=("scaled_dot_product_attention", "multi_head_attention_forward"),
    ops=("scaled_dot_product", "_native_multi_head_attention"),
    dispatch=("scaled_dot_product_attention",),
    instrument=(
        "torch.nn.functional:multi_head_attention_forward",
        "torch.nn:MultiheadAttention.forward",
    ),
    modules=frozenset({"torch.nn.modules.activation.MultiheadAttention"}),
    # private torch names that compute attention, or part of it
    private=r"attention|attn|sdp|multi_head|in_projection|transformer|masked_softmax",
    # one path through nn.MultiheadAttention in the kernel, whatever the module's mode
    setup="import torch\ntorch.backends.mha.set_fastpath_enabled(False)\n",
)

# The oracle (nn.MultiheadAttention in the grader's process) takes one deterministic path.
torch.backends.mha.set_fastpath_enabled(False)

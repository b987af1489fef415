"""The corpus of moe: single-bug copies of solutions/moe.ipynb (the classic bugs of
EXERCISES_CANON.md section 4, and more), each with the level where it must first lose
points and the hint the card asks, and correct variants that must keep full marks.

Mutant(name, old, new, level, hint=..., values=False): `old` is found exactly once in the
solution's code and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 38  # the corpus test fails if it ever shrinks below this

SOFTMAX = "probs = torch.softmax(x @ router_weight.T, dim=-1)"
SORT = "experts = torch.sort(probs, dim=-1, descending=True, stable=True).indices[:, :k]"
RENORM = "weights = top / top.sum(dim=-1, keepdim=True)"
K_CHECK = "if not 1 <= k <= num_experts:"
COUNTS = "counts = torch.bincount(experts.reshape(-1), minlength=num_experts)"
F_LINE = "f = counts.to(probs.dtype) / experts.numel()  # a count: no gradient"
P_LINE = "P = probs.mean(dim=0)"
LOSS_RETURN = "return num_experts * (f * P).sum()"
TOKENS = "tokens = x.reshape(-1, x.shape[-1])"
CAPACITY = "capacity = math.ceil(capacity_factor * tokens.shape[0] * k / num_experts)"
QUEUE = "queue = experts.T.reshape(-1)"
ARRIVAL = "arrival = F.one_hot(queue, num_experts).cumsum(dim=0).gather(1, queue[:, None])"
KEPT = "kept = (arrival <= capacity).reshape(k, -1).T"
EXPERT = "out = F.silu(tokens[token] @ w1[e].T) @ w2[e].T"
COMBINE = "y.index_add_(0, token, out * weights[token, slot, None])"
LOOP = "    for e in range(num_experts):\n        token, slot"

MUTANTS = [
    # from scratch (first: each exercise's first mutant is graded both in a kernel and in
    # the test's process)
    Mutant(
        "dense_mixture",
        """    y = torch.zeros_like(tokens)
    for e in range(num_experts):
        token, slot = torch.where((experts == e) & kept)
        if token.numel() == 0:
            continue  # an expert that receives no token is never run
        out = F.silu(tokens[token] @ w1[e].T) @ w2[e].T
        y.index_add_(0, token, out * weights[token, slot, None])""",
        """    gate = torch.zeros(tokens.shape[0], num_experts, dtype=tokens.dtype)
    gate = gate.scatter(1, experts, weights * kept)
    y = sum(gate[:, e, None] * (F.silu(tokens @ w1[e].T) @ w2[e].T)
            for e in range(num_experts))""",
        "from scratch",
        hint="every expert run on every token (a dense mixture gated by zeros), not only "
        "on the tokens routed to it?",
    ),
    Mutant(
        "grouped_mm_for_bfloat16",
        "    y = torch.zeros_like(tokens)\n",
        "    y = torch.zeros_like(tokens)\n"
        "    if tokens.dtype == torch.bfloat16:  # never in the tests: the source scan sees it\n"
        "        return F.grouped_mm(tokens, w1.transpose(1, 2)), aux_loss\n",
        "from scratch",
        hint="torch's grouped matmul (F.grouped_mm) named in the graded code?",
    ),
    # shapes
    Mutant(
        "y_not_reshaped",
        "return y.reshape(x.shape), aux_loss",
        "return y, aux_loss",
        "shapes",
        hint="y returned as the flat (N, D) tokens, not in x's shape (B, T, D)?",
    ),
    # routing
    Mutant(
        "softmax_over_tokens",
        SOFTMAX,
        "probs = torch.softmax(x @ router_weight.T, dim=0)",
        "routing",
        hint="the router's softmax taken over the tokens (dim=0), not over the experts?",
        values=True,
    ),
    Mutant(
        "no_renormalisation",
        RENORM,
        "weights = top",
        "routing",
        hint="the top-k probabilities used as weights without renormalising them to sum to 1 "
        "(Switch's gate, not Mixtral's)?",
        values=True,
    ),
    Mutant(
        "experts_in_index_order",
        SORT,
        SORT + ".sort(dim=-1).values",
        "routing",
        hint="each token's experts listed by index, not from the most probable down?",
    ),
    Mutant(
        "topk_tie_order",
        SORT,
        "experts = torch.topk(probs, k, dim=-1).indices",
        "routing",
        hint="torch.topk's order for equal probabilities, not the lower expert index first?",
    ),
    Mutant(
        "k_zero_accepted",
        K_CHECK,
        "if k > num_experts + 1:",
        "routing",
        hint="k = 0 or k > E not rejected with a ValueError?",
    ),
    Mutant(
        "k_equal_to_e_rejected",
        K_CHECK,
        "if not 1 <= k < num_experts:",
        "routing",
        hint="k = E (every expert) rejected, though 1 <= k <= E is allowed?",
    ),
    # combine
    Mutant(
        "combine_overwrites",
        COMBINE,
        "y.index_copy_(0, token, out * weights[token, slot, None])",
        "combine",
        hint="each expert's output written over y[token] (index_copy_) instead of added "
        "to it, so a token keeps only its last expert?",
        values=True,
    ),
    Mutant(
        "first_slot_weight_for_all",
        COMBINE,
        "y.index_add_(0, token, out * weights[token, 0, None])",
        "combine",
        hint="every expert of a token weighted by the token's first weight (weights[t, 0]), "
        "not by its own slot's?",
        values=True,
    ),
    Mutant(
        "gate_applied_twice",
        EXPERT,
        "out = F.silu(tokens[token] * weights[token, slot, None] @ w1[e].T) @ w2[e].T",
        "combine",
        hint="the gate weight applied to the expert's input as well as to its output?",
        values=True,
    ),
    Mutant(
        "gate_with_raw_probs",
        COMBINE,
        "y.index_add_(0, token, out * probs[token, e, None])",
        "combine",
        hint="the combine gated by the raw router probability, not the renormalised weight?",
        values=True,
    ),
    Mutant(
        "loop_skips_last_expert",
        LOOP,
        "    for e in range(num_experts - 1):\n        token, slot",
        "combine",
        hint="the loop over experts stops before the last expert (range(E - 1))?",
        values=True,
    ),
    Mutant(
        "relu_experts",
        EXPERT,
        "out = F.relu(tokens[token] @ w1[e].T) @ w2[e].T",
        "combine",
        hint="the experts' activation is ReLU, not SiLU?",
        values=True,
    ),
    # aux loss
    Mutant(
        "aux_soft_fractions",
        F_LINE,
        "f = probs.mean(dim=0)",
        "aux loss",
        hint="f taken from the router probabilities (soft), not from the counts of routed "
        "assignments?",
    ),
    Mutant(
        "aux_without_e",
        LOSS_RETURN,
        "return (f * P).sum()",
        "aux loss",
        hint="the loss not multiplied by E (it is 1/E, not 1, at perfect balance)?",
    ),
    Mutant(
        "aux_counts_over_tokens",
        F_LINE,
        "f = counts.to(probs.dtype) / probs.shape[0]",
        "aux loss",
        hint="f divided by the N tokens, not the N * k assignments (Hugging Face's Mixtral "
        "loss, k times too large)?",
    ),
    Mutant(
        "aux_first_choices_only",
        COUNTS,
        "counts = torch.bincount(experts[:, 0], minlength=num_experts) * experts.shape[1]",
        "aux loss",
        hint="f counts only each token's first choice (Switch's top-1), not all k?",
    ),
    Mutant(
        "aux_p_from_chosen",
        P_LINE,
        "P = torch.zeros_like(probs).scatter(1, experts, probs.gather(1, experts)).mean(dim=0)",
        "aux loss",
        hint="P averaged over the chosen experts' probabilities only, not the full softmax?",
    ),
    Mutant(
        "aux_bincount_without_minlength",
        COUNTS,
        "counts = torch.bincount(experts.reshape(-1))",
        "aux loss",
        hint="bincount without minlength=E, which breaks when the last expert gets no token?",
    ),
    # edge cases
    Mutant(
        "tokens_by_view",
        TOKENS,
        "tokens = x.view(-1, x.shape[-1])",
        "edge cases",
        hint="x flattened with .view, which fails on a non-contiguous x (use reshape)?",
    ),
    Mutant(
        "unstable_softmax",
        SOFTMAX,
        "probs = (x @ router_weight.T).exp()\n    probs = probs / probs.sum(dim=-1, keepdim=True)",
        "edge cases",
        hint="exp of the raw logits without subtracting the maximum (overflows for large logits)?",
    ),
    Mutant(
        "router_in_float32",
        SOFTMAX,
        "probs = torch.softmax((x @ router_weight.T).float(), dim=-1).to(x.dtype)",
        "edge cases",
        hint="the router's softmax computed in float32 (Hugging Face's habit), losing "
        "float64's precision?",
    ),
    Mutant(
        "router_weight_transposed_in_place",
        SOFTMAX,
        "probs = torch.softmax(x @ router_weight.t_(), dim=-1)",
        "edge cases",
        hint="router_weight transposed in place (t_()), changing the caller's tensor?",
    ),
    Mutant(
        "loss_scales_probs_in_place",
        P_LINE + "\n    " + LOSS_RETURN,
        "P = probs.mul_(num_experts).mean(dim=0)\n    return (f * P).sum()",
        "edge cases",
        hint="probs multiplied by E in place inside load_balancing_loss, changing the "
        "caller's tensor?",
    ),
    # gradients
    Mutant(
        "gate_detached",
        RENORM,
        "weights = (top / top.sum(dim=-1, keepdim=True)).detach()",
        "gradients",
        hint="the gate weights detached, so y sends no gradient to the router?",
    ),
    Mutant(
        "renormaliser_detached",
        RENORM,
        "weights = top / top.sum(dim=-1, keepdim=True).detach()",
        "gradients",
        hint="the renormalising sum detached, so the router's gradient through the weights is "
        "wrong?",
    ),
    Mutant(
        "aux_detached",
        P_LINE,
        "P = probs.detach().mean(dim=0)",
        "gradients",
        hint="P computed from detached probabilities, so the aux loss sends no gradient to "
        "the router?",
    ),
    # capacity
    Mutant(
        "capacity_later_tokens_first",
        ARRIVAL,
        "arrival = F.one_hot(queue, num_experts).flip(0).cumsum(dim=0).flip(0)"
        ".gather(1, queue[:, None])",
        "capacity",
        hint="an expert over capacity keeps the later assignments, not the earlier ones?",
    ),
    Mutant(
        "capacity_token_major",
        QUEUE + "\n" + " " * 8 + ARRIVAL + "\n" + " " * 8 + KEPT,
        "queue = experts.reshape(-1)\n"
        + " " * 8
        + ARRIVAL
        + "\n"
        + " " * 8
        + "kept = (arrival <= capacity).reshape(-1, k)",
        "capacity",
        hint="capacity admitted token by token (a token's second choice before the next "
        "token's first), not every first choice before any second choice?",
    ),
    Mutant(
        "capacity_renormalises",
        KEPT,
        KEPT + "\n        weights = weights * kept\n"
        "        weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-30)",
        "capacity",
        hint="the weights renormalised over a token's kept assignments after the drops?",
    ),
    Mutant(
        "capacity_rounded_down",
        CAPACITY,
        "capacity = math.floor(capacity_factor * tokens.shape[0] * k / num_experts)",
        "capacity",
        hint="the capacity rounded down (floor), not up (ceil)?",
    ),
    Mutant(
        "capacity_zero_taken_for_none",
        "if capacity_factor is not None:",
        "if capacity_factor:",
        "capacity",
        hint="capacity_factor = 0.0 taken for None (`if capacity_factor:`), so nothing is dropped?",
    ),
    Mutant(
        "capacity_without_k",
        CAPACITY,
        "capacity = math.ceil(capacity_factor * tokens.shape[0] / num_experts)",
        "capacity",
        hint="the capacity computed from the N tokens, not the N * k assignments?",
    ),
    Mutant(
        "capacity_per_sequence",
        CAPACITY,
        "capacity = math.ceil(capacity_factor * x.shape[-2] * k / num_experts)",
        "capacity",
        hint="the capacity computed from one sequence's T tokens, not all B * T?",
    ),
    Mutant(
        "aux_counts_kept_only",
        KEPT,
        KEPT + "\n        counts = torch.bincount(experts[kept], minlength=num_experts)\n"
        "        f = counts.to(probs.dtype) / kept.sum().clamp_min(1)\n"
        "        aux_loss = num_experts * (f * probs.mean(dim=0)).sum()",
        "capacity",
        hint="the aux loss counts only the assignments kept after the capacity drops, not "
        "every routed one?",
    ),
    Mutant(
        "capacity_one_short",
        KEPT,
        "kept = (arrival < capacity).reshape(k, -1).T",
        "capacity",
        hint="each expert keeps capacity - 1 assignments (an off-by-one in the running count)?",
    ),
]

VARIANTS = [
    # Mixtral's own order: the top k of the logits, then a softmax over the k
    Variant(
        "softmax_of_top_logits",
        SORT + "\n    top = probs.gather(-1, experts)\n    " + RENORM,
        "logits = x @ router_weight.T\n"
        "    experts = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :k]\n"
        "    weights = torch.softmax(logits.gather(-1, experts), dim=-1)",
    ),
    # one token at a time, capacity counted with a Python list
    Variant(
        "token_loop",
        """    kept = torch.ones_like(experts, dtype=torch.bool)
    if capacity_factor is not None:
        capacity = math.ceil(capacity_factor * tokens.shape[0] * k / num_experts)
        # the queue: every token's first choice in token order, then every second choice...
        queue = experts.T.reshape(-1)
        arrival = F.one_hot(queue, num_experts).cumsum(dim=0).gather(1, queue[:, None])
        kept = (arrival <= capacity).reshape(k, -1).T
    y = torch.zeros_like(tokens)
    for e in range(num_experts):
        token, slot = torch.where((experts == e) & kept)
        if token.numel() == 0:
            continue  # an expert that receives no token is never run
        out = F.silu(tokens[token] @ w1[e].T) @ w2[e].T
        y.index_add_(0, token, out * weights[token, slot, None])
    return y.reshape(x.shape), aux_loss""",
        """    n = tokens.shape[0]
    limit = n * k if capacity_factor is None else math.ceil(capacity_factor * n * k / num_experts)
    load = [0] * num_experts
    rows = [[] for _ in range(n)]
    for j in range(k):
        for t in range(n):
            e = int(experts[t, j])
            if load[e] < limit:
                load[e] += 1
                h = F.silu(tokens[t] @ w1[e].T) @ w2[e].T
                rows[t].append(weights[t, j] * h)
    y = torch.stack([sum(r) if r else tokens.new_zeros(tokens.shape[1]) for r in rows])
    return y.reshape(x.shape), aux_loss""",
    ),
    # Switch's form of the loss: the mean over experts, times E**2
    Variant("loss_mean_times_e_squared", LOSS_RETURN, "return num_experts**2 * (f * P).mean()"),
    # counts from one_hot; the combine by index_put_ with accumulation
    Variant(
        "one_hot_counts",
        COUNTS + "\n    " + F_LINE,
        "f = F.one_hot(experts, num_experts).sum(dim=(0, 1)).to(probs.dtype) / experts.numel()",
    ),
    Variant(
        "index_put_accumulate",
        COMBINE,
        "y.index_put_((token,), out * weights[token, slot, None], accumulate=True)",
    ),
    # written by someone who had read only the scaffold
    Variant("independent", notebook="variants/independent.ipynb"),
]

"""Hidden suite for `ppo_gae`: generalized advantage estimates over a (T, N) rollout with
terminations and bootstrapped truncations (flags per transition), and PPO's clipped policy
loss, value loss (optionally clipped), entropy bonus and clipfrac with an optional mask
(EXERCISES_CANON.md section 12).

The references are the statement's formulas computed here in float64: GAE by the backward
loop and, as a cross-check in `gae_matches_closed_form`, by the sum of discounted TD errors
up to the episode's end. Checks of one feature leave the others at their defaults: the
advantage tests have no flags, a termination test has no truncation and the reverse, the
policy-loss tests read the "pg" entry (whatever the value loss does), and the total is
compared with the notebook's own entries (so a bug in one part is not counted again there).
"""

from __future__ import annotations

from typing import Any

import torch

from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.integrity import require_no_library

GAE, PPO = "gae", "ppo_loss"
KEYS = ("pg", "v", "entropy", "clipfrac")
# RL libraries that compute GAE or the PPO loss (none is importable in the kernel, which
# allows numpy and einops only; the scan names them if a notebook tries)
LIBRARIES = frozenset({"torchrl", "stable_baselines3", "sb3_contrib", "tianshou", "ray",
                       "cleanrl", "trl", "rl_games", "pfrl", "tensordict", "gymnasium",
                       "gym", "skrl", "rlax", "acme"})  # fmt: skip

exercise = Exercise(
    id="ppo_gae",
    tags=("rl", "losses"),
    minutes=40,
    title="GAE with terminations and truncations, and the clipped PPO loss",
    seed="-",
    levels=[
        "shapes",
        "advantages",
        "terminations",
        "truncations",
        "policy loss",
        "value loss & total",
        "masks",
        "edge cases",
        "from scratch",
    ],
    defines=(GAE, PPO),
    # torch has no GAE or PPO built-in: the RL-library imports are scanned below
    forbidden=(),
    watch=Watch(what="RL library"),
)

F32, F64 = lib.F32, lib.F64
T, N = 9, 3
GAMMA, LAM = 0.99, 0.95
M = 24  # minibatch size of the loss tests


# --- the reference (grader's process, float64) -------------------------------------------


def ref_gae(rewards, values, next_values, terminated, truncated, gamma=GAMMA, lam=LAM):
    """The statement's recursion, as a float64 loop."""
    r, v, nv = (x.double() for x in (rewards, values, next_values))
    boot, carry = (~terminated).double(), (~(terminated | truncated)).double()
    deltas = r + gamma * boot * nv - v
    adv, running = torch.zeros_like(deltas), torch.zeros_like(deltas[0])
    for t in reversed(range(deltas.shape[0])):
        running = deltas[t] + gamma * lam * carry[t] * running
        adv[t] = running
    return adv, adv + v


def closed_form_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """A_t = sum over k >= t, up to the episode's end, of (γλ)^(k-t) δ_k (float64)."""
    r, v, nv = (x.double() for x in (rewards, values, next_values))
    deltas = r + gamma * (~terminated).double() * nv - v
    ends = terminated | truncated
    adv = torch.zeros_like(deltas)
    for n in range(deltas.shape[1]):
        for t in range(deltas.shape[0]):
            for k in range(t, deltas.shape[0]):
                adv[t, n] += (gamma * lam) ** (k - t) * deltas[k, n]
                if ends[k, n]:
                    break
    return adv


def ref_ppo(new_logp, old_logp, adv, new_values, old_values, returns, entropy, *, clip=0.2,
            value_clip=None, vf_coef=0.5, ent_coef=0.01, normalize_advantages=False,
            mask=None):  # fmt: skip
    """The statement's (loss, parts), in float64."""
    keep = torch.ones_like(new_logp, dtype=torch.bool) if mask is None else mask
    nl, ol, a, v, vo, ret, ent = (x.double()[keep] for x in
                                  (new_logp, old_logp, adv, new_values, old_values, returns,
                                   entropy))  # fmt: skip
    if normalize_advantages:
        a = (a - a.mean()) / (a.std() + 1e-8)
    ratio = (nl - ol).exp()
    pg = torch.maximum(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)).mean()
    vl = (v - ret) ** 2
    if value_clip is not None:
        vl = torch.maximum(vl, (vo + (v - vo).clamp(-value_clip, value_clip) - ret) ** 2)
    vl = 0.5 * vl.mean()
    h = ent.mean()
    clipfrac = ((ratio - 1).abs() > clip).double().mean()
    return pg - ent_coef * h + vf_coef * vl, {"pg": pg, "v": vl, "entropy": h,
                                             "clipfrac": clipfrac}  # fmt: skip


# --- inputs --------------------------------------------------------------------------------


def rollout(seed: int, t: int = T, n: int = N, scale: float = 1.0, dtype=F64):
    """A seeded rollout without boundaries: rewards, values, next_values (= values one step
    later, and a value of its own after the last step), and two all-False flag tensors."""
    rewards = lib.randn(t, n, seed=seed, dtype=F64)
    chain = lib.randn(t + 1, n, seed=seed + 1, dtype=F64) * scale
    flags = torch.zeros(t, n, dtype=torch.bool)
    values, next_values = chain[:-1].clone(), chain[1:].clone()
    return rewards.to(dtype), values.to(dtype), next_values.to(dtype), flags, flags.clone()


def with_boundary(seed: int, kind: str, step: int, env: int = 1, final: float = 7.5):
    """A rollout with one flagged step (`kind`: "terminated", "truncated" or "both") in
    env `env`; next_values there is the final observation's value `final`, which differs
    from values[step + 1] (the next episode's first value)."""
    rewards, values, next_values, terminated, truncated = rollout(seed)
    if kind in ("terminated", "both"):
        terminated[step, env] = True
    if kind in ("truncated", "both"):
        truncated[step, env] = True
    next_values[step, env] = final
    return rewards, values, next_values, terminated, truncated


def minibatch(seed: int, shape=(M,), dtype=F64) -> dict[str, torch.Tensor]:
    """Seeded loss inputs: ratios exp(±0.4) on both sides of 1 ± 0.2, advantages of both
    signs, values and returns of unit size, positive entropies."""
    g = [lib.randn(*shape, seed=seed + i, dtype=F64) for i in range(6)]
    old = -1.0 - g[0].abs()
    return {
        "new_logp": (old + 0.4 * g[1]).to(dtype),
        "old_logp": old.to(dtype),
        "advantages": (1.5 * g[2]).to(dtype),
        "new_values": (g[3]).to(dtype),
        "old_values": (g[3] + 0.3 * g[4]).to(dtype),
        "returns": (g[3] + g[5]).to(dtype),
        "entropy": (0.5 + g[4].abs()).to(dtype),
    }


ARGS = ("new_logp", "old_logp", "advantages", "new_values", "old_values", "returns", "entropy")


def args_of(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The positional arguments of ppo_loss, in order."""
    return tuple(batch[name] for name in ARGS)


# --- calling the candidate ---------------------------------------------------------------


def described(name: str, kwargs: dict) -> str:
    """`name(...)` with the keyword arguments given (a mask shown as `mask=...`)."""
    shown = {k: ("..." if torch.is_tensor(v) else repr(v)) for k, v in kwargs.items()}
    return f"{name}(...{''.join(f', {k}={v}' for k, v in shown.items())})"


def gae_pair(answer: Any, what: str, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """gae's answer as (advantages, returns), each a tensor of `shape`."""
    adv, ret = checks.pair(answer, what, ("advantages", "returns"))
    return checks.tensor(adv, f"advantages of {what}", shape), checks.tensor(
        ret, f"returns of {what}", shape
    )


def gae_calls(kernel, inputs, settings: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """gae(*inputs, **kwargs) for each keyword set, in one round trip."""
    answers = kernel.many(kernel.get(GAE), [(tuple(inputs), kw) for kw in settings])
    shape = tuple(inputs[0].shape)
    return [gae_pair(a, described(GAE, kw), shape) for a, kw in zip(answers, settings, strict=True)]


def gae_matches(kernel, inputs, settings: list[dict], where: str = "", **tol) -> None:
    """The advantages for each keyword set match the reference (returns are checked in
    the shapes level, as advantages + values)."""
    for (adv, _), kw in zip(gae_calls(kernel, inputs, settings), settings, strict=True):
        want, _ = ref_gae(*inputs, **kw)
        checks.close(adv, want, f"advantages of {described(GAE, kw)} {where}".rstrip(), **tol)


def loss_parts(answer: Any, what: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ppo_loss's answer as (total, parts), each a 0-dim tensor, else an Interface failure."""
    total, parts = checks.pair(answer, what, ("loss", "parts"))
    if not isinstance(parts, dict) or any(k not in parts for k in KEYS):
        raise checks.Interface(
            f"{what}: the second item is {checks.describe(parts)}, want a dict with keys "
            f"{', '.join(KEYS)}"
        )
    for key in KEYS:
        checks.tensor(parts[key], f'{what}[1]["{key}"]', ())
    return checks.tensor(total, f"the loss of {what}", ()), parts


def ppo_calls(kernel, batch, settings: list[dict]) -> list[tuple[torch.Tensor, dict]]:
    """ppo_loss(*batch, **kwargs) for each keyword set, in one round trip."""
    answers = kernel.many(kernel.get(PPO), [(args_of(batch), kw) for kw in settings])
    return [loss_parts(a, described(PPO, kw)) for a, kw in zip(answers, settings, strict=True)]


def part_matches(kernel, batch, key: str, settings: list[dict], where: str = "") -> None:
    """One entry of the parts dict matches the reference for each keyword set."""
    for (_, parts), kw in zip(ppo_calls(kernel, batch, settings), settings, strict=True):
        want = ref_ppo(*args_of(batch), **kw)[1][key]
        checks.close(parts[key], want, f'"{key}" of {described(PPO, kw)} {where}'.rstrip())


def unchanged(kernel, name: str, tensors: dict[str, torch.Tensor], kwargs: dict) -> None:
    """name(*tensors, **kwargs) leaves every tensor argument as it was (each held in the
    kernel; a tensor in `kwargs`, the mask, too)."""
    everything = {**tensors, **{k: v for k, v in kwargs.items() if torch.is_tensor(v)}}
    held = {label: kernel.hold(t.clone(), label) for label, t in everything.items()}
    options = {k: held.get(k, v) for k, v in kwargs.items()}
    kernel.get(name)(*(held[label] for label in tensors), **options)
    for label, t in everything.items():
        after = kernel.attribute(held[label], "data")
        checks.equal(after, t, f"{label} after {described(name, kwargs)}")


def dtype_is(value: Any, dtype: torch.dtype, what: str) -> None:
    """`value` is a tensor of `dtype`."""
    if checks.tensor(value, what).dtype != dtype:
        raise checks.Failed(f"{what} has dtype {value.dtype}, want {dtype} (the inputs' dtype)")


# --- shapes -------------------------------------------------------------------------------


@exercise.check("shapes", hidden=False)
def gae_shapes_and_dtype(kernel):
    """gae returns (advantages, returns), both (T, N), in the rewards' dtype (float64, float32)."""
    for dtype in (F64, F32):
        ((adv, ret),) = gae_calls(kernel, rollout(1, dtype=dtype), [{}])
        where = f"for a float{str(dtype)[-2:]} rollout"
        dtype_is(adv, dtype, f"advantages {where}")
        dtype_is(ret, dtype, f"returns {where}")


@exercise.check("shapes")
def returns_are_advantages_plus_values(kernel):
    """returns = advantages + values, with and without episode boundaries."""
    for inputs in (rollout(2), with_boundary(3, "terminated", 4)):
        ((adv, ret),) = gae_calls(kernel, inputs, [{}])
        checks.close(ret, adv + inputs[1], "returns vs the notebook's advantages + values")


@exercise.check("shapes", hidden=False)
def ppo_loss_returns_loss_and_parts(kernel):
    """ppo_loss returns (loss, {"pg", "v", "entropy", "clipfrac"}), all 0-dim, in the inputs'
    dtype (float64, float32)."""
    for dtype in (F64, F32):
        ((total, parts),) = ppo_calls(kernel, minibatch(4, dtype=dtype), [{}])
        where = f"for float{str(dtype)[-2:]} inputs"
        dtype_is(total, dtype, f"the loss {where}")
        for key in ("pg", "v", "entropy"):
            dtype_is(parts[key], dtype, f'"{key}" {where}')


# --- advantages ---------------------------------------------------------------------------


@exercise.check("advantages", points=2, hidden=False)
def gae_without_boundaries(kernel):
    """No flags (γ = 0.99, λ = 0.95): the backward recursion, bootstrapped at the rollout's end."""
    gae_matches(kernel, rollout(10), [{}], "without boundaries")


@exercise.check("advantages")
def gae_other_gamma_and_lambda(kernel):
    """gamma=0.9, lam=0.8 and gamma=1.0, lam=0.5: the same recursion."""
    gae_matches(kernel, rollout(11), [{"gamma": 0.9, "lam": 0.8}, {"gamma": 1.0, "lam": 0.5}])


@exercise.check("advantages")
def lambda_zero_gives_td_errors(kernel):
    """lam=0.0 (falsy) is honoured: the advantages are the TD errors r + γ V' - V."""
    inputs = rollout(12)
    ((adv, _),) = gae_calls(kernel, inputs, [{"lam": 0.0}])
    r, v, nv = inputs[:3]
    checks.close(adv, r + GAMMA * nv - v, "advantages with lam=0.0 vs the TD errors")


@exercise.check("advantages")
def lambda_one_gives_discounted_returns(kernel):
    """lam=1.0: advantages + values are the discounted rewards, bootstrapped at the end."""
    inputs = rollout(13)
    ((adv, _),) = gae_calls(kernel, inputs, [{"lam": 1.0}])
    r, v, nv = inputs[:3]
    want = torch.zeros_like(r)
    future = nv[-1]
    for t in reversed(range(T)):
        future = r[t] + GAMMA * future
        want[t] = future
    checks.close(adv + v, want, "advantages + values with lam=1.0 vs the discounted returns")


@exercise.check("advantages")
def gamma_zero(kernel):
    """gamma=0.0 (falsy) is honoured: the advantages are r - V (no bootstrap, no trace)."""
    inputs = rollout(14)
    ((adv, _),) = gae_calls(kernel, inputs, [{"gamma": 0.0}])
    checks.close(adv, inputs[0] - inputs[1], "advantages with gamma=0.0 vs rewards - values")


# --- terminations -------------------------------------------------------------------------


@exercise.check("terminations", points=2, hidden=False)
def termination_mid_rollout(kernel):
    """Env 1 terminates at t = 4: no bootstrap there (next_values[4] = 7.5 is ignored) and
    the recursion restarts; envs 0 and 2 run on."""
    gae_matches(kernel, with_boundary(20, "terminated", 4), [{}], "with a termination at t = 4")


@exercise.check("terminations")
def termination_at_the_last_step(kernel):
    """Env 2 terminates at the rollout's last step: no bootstrap from next_values[T - 1]."""
    inputs = with_boundary(21, "terminated", T - 1, env=2)
    gae_matches(kernel, inputs, [{}], f"with a termination at t = {T - 1}")


@exercise.check("terminations")
def two_episodes_end_in_one_env(kernel):
    """Env 0 terminates at t = 2 and t = 6: three episodes, each with its own recursion."""
    inputs = with_boundary(22, "terminated", 2, env=0)
    inputs[3][6, 0] = True
    inputs[2][6, 0] = -3.0
    gae_matches(kernel, inputs, [{}], "with terminations at t = 2 and 6")


@exercise.check("terminations")
def flags_belong_to_their_own_step(kernel):
    """Env 0 terminates at t = 5 with next_values[5] = 0: only step 5 loses its bootstrap;
    step 4 still bootstraps from next_values[4] (not CleanRL's dones[t + 1])."""
    inputs = with_boundary(23, "terminated", 5, env=0, final=0.0)
    gae_matches(kernel, inputs, [{}], "with a termination at t = 5 (next value 0)")


# --- truncations --------------------------------------------------------------------------


@exercise.check("truncations", points=2, hidden=False)
def truncation_mid_rollout(kernel):
    """Env 1 is truncated at t = 4: bootstrap from next_values[4] = 7.5 (the final
    observation's value, not values[5]), and the recursion restarts."""
    gae_matches(kernel, with_boundary(30, "truncated", 4), [{}], "with a truncation at t = 4")


@exercise.check("truncations")
def truncation_at_the_last_step(kernel):
    """Env 0 is truncated at the rollout's last step: bootstrap from next_values[T - 1]."""
    inputs = with_boundary(31, "truncated", T - 1, env=0)
    gae_matches(kernel, inputs, [{}], f"with a truncation at t = {T - 1}")


@exercise.check("truncations")
def truncation_stops_the_trace(kernel):
    """Env 1 truncated at t = 4 with next_values[4] = values[5]: the recursion still stops
    there (A_5 belongs to the next episode)."""
    inputs = with_boundary(34, "truncated", 4)
    inputs[2][4, 1] = inputs[1][5, 1]
    gae_matches(kernel, inputs, [{}], "with a truncation at t = 4 (next value = values[5])")


@exercise.check("truncations")
def terminated_and_truncated(kernel):
    """Both flags at the same step (env 2, t = 3): the termination wins, no bootstrap."""
    inputs = with_boundary(32, "both", 3, env=2)
    gae_matches(kernel, inputs, [{}], "with both flags at t = 3")


@exercise.check("truncations")
def gae_matches_closed_form(kernel):
    """Integration: terminations and truncations in every env, γ = 0.97, λ = 0.9: the sum of
    discounted TD errors up to each episode's end (an independent closed form)."""
    inputs = rollout(33, t=12)
    inputs[3][[2, 9], [0, 2]] = True
    inputs[4][[5, 3, 11], [0, 1, 2]] = True
    inputs[2][[2, 9, 5, 3], [0, 2, 0, 1]] = torch.tensor([4.0, -2.0, 6.0, 1.5], dtype=F64)
    kw = {"gamma": 0.97, "lam": 0.9}
    ((adv, _),) = gae_calls(kernel, inputs, [kw])
    checks.close(adv, closed_form_gae(*inputs, **kw),
                 "advantages with mixed boundaries vs the closed form")  # fmt: skip


# --- policy loss --------------------------------------------------------------------------


@exercise.check("policy loss", points=2, hidden=False)
def policy_loss(kernel):
    """ "pg" (clip=0.2, advantages as given): mean of max(-A r, -A clamp(r, 0.8, 1.2))."""
    part_matches(kernel, minibatch(40), "pg", [{}])


@exercise.check("policy loss")
def policy_loss_other_clip(kernel):
    """clip=0.1 and clip=0.3: the ratio is clamped to [1 - clip, 1 + clip]."""
    part_matches(kernel, minibatch(41), "pg", [{"clip": 0.1}, {"clip": 0.3}])


@exercise.check("policy loss")
def on_policy_ratio_is_one(kernel):
    """new_logp == old_logp (the first epoch): the ratio is 1, so "pg" is -mean(A) and
    "clipfrac" is 0."""
    batch = minibatch(49)
    batch["new_logp"] = batch["old_logp"].clone()
    ((_, parts),) = ppo_calls(kernel, batch, [{}])
    checks.close(parts["pg"], -batch["advantages"].mean(), '"pg" with new_logp == old_logp')
    lib.exactly_zero(parts["clipfrac"], '"clipfrac" with new_logp == old_logp')


@exercise.check("policy loss")
def clip_zero(kernel):
    """clip=0.0 (falsy) is honoured: the ratio is clamped to 1 (pg = mean(max(-A r, -A)))."""
    part_matches(kernel, minibatch(42), "pg", [{"clip": 0.0}])


@exercise.check("policy loss")
def clipfrac(kernel):
    """ "clipfrac": the fraction of entries with |r - 1| > clip (clip=0.2 and 0.1)."""
    part_matches(kernel, minibatch(43), "clipfrac", [{}, {"clip": 0.1}])


@exercise.check("policy loss", points=2)
def normalized_advantages(kernel):
    """normalize_advantages=True: (A - mean) / (unbiased std + 1e-8) before the loss (M = 6)."""
    part_matches(kernel, minibatch(44, shape=(6,)), "pg", [{"normalize_advantages": True}])


@exercise.check("policy loss")
def normalize_nearly_equal_advantages(kernel):
    """normalize_advantages=True with advantages of size 1e-7: 1e-8 added to the std (not
    inside a square root, not left out)."""
    batch = minibatch(45)
    batch["advantages"] = 1e-7 * lib.randn(M, seed=46, dtype=F64)
    part_matches(kernel, batch, "pg", [{"normalize_advantages": True}], "for A of size 1e-7")


@exercise.check("policy loss")
def normalize_equal_advantages(kernel):
    """normalize_advantages=True with all advantages equal: they become 0 (std 0 + 1e-8),
    so "pg" is 0, not NaN."""
    batch = minibatch(47)
    batch["advantages"] = torch.full((M,), 2.5, dtype=F64)
    ((_, parts),) = ppo_calls(kernel, batch, [{"normalize_advantages": True}])
    lib.exactly_zero(parts["pg"], '"pg" with equal advantages, normalized')


@exercise.check("policy loss", points=2)
def policy_gradient(kernel):
    """d loss / d new_logp matches float64 autograd (0 where the ratio is clipped)."""
    batch = minibatch(48)
    lib.gradients_match(kernel, kernel.get(PPO), args_of(batch),
                        lambda *a, **k: ref_ppo(*a, **k)[0], [0], f"the loss of {PPO}(...)",
                        output_path=[0], names=["new_logp"])  # fmt: skip


# --- value loss & total -------------------------------------------------------------------


@exercise.check("value loss & total", points=2, hidden=False)
def value_loss(kernel):
    """ "v" without value clipping: 0.5 * mean((new_values - returns)²)."""
    part_matches(kernel, minibatch(50), "v", [{}])


@exercise.check("value loss & total", points=2)
def clipped_value_loss(kernel):
    """value_clip=0.2: 0.5 * mean(max((V - R)², (V_old + clamp(V - V_old, ±0.2) - R)²))."""
    part_matches(kernel, minibatch(51), "v", [{"value_clip": 0.2}])


@exercise.check("value loss & total")
def value_clip_takes_the_larger_error(kernel):
    """value_clip=0.2 where each clipped prediction is farther from the return than the new
    value: "v" is 0.5 * mean of the clipped errors (the max picks them)."""
    batch = minibatch(58)
    v = batch["new_values"]
    batch["old_values"] = v - 1.0
    batch["returns"] = v + 0.1 * lib.randn(M, seed=59, dtype=F64).abs()
    ((_, parts),) = ppo_calls(kernel, batch, [{"value_clip": 0.2}])
    want = 0.5 * ((v - 0.8 - batch["returns"]) ** 2).mean()  # V_old + 0.2 = V - 0.8
    checks.close(parts["v"], want, '"v" with value_clip=0.2 where the clipped errors are larger')


@exercise.check("value loss & total")
def value_clip_zero(kernel):
    """value_clip=0.0 (falsy) is honoured: the clipped prediction is V_old itself."""
    part_matches(kernel, minibatch(52), "v", [{"value_clip": 0.0}])


@exercise.check("value loss & total")
def entropy_mean(kernel):
    """ "entropy": the mean of the entropy argument."""
    part_matches(kernel, minibatch(53), "entropy", [{}])


@exercise.check("value loss & total", points=2)
def total_combines_the_parts(kernel):
    """loss = pg - ent_coef * entropy + vf_coef * v, from the notebook's own parts (defaults,
    and vf_coef=1.0, ent_coef=0.05)."""
    settings: list[dict] = [{}, {"vf_coef": 1.0, "ent_coef": 0.05}]
    answers = ppo_calls(kernel, minibatch(54), settings)
    for (total, parts), kw in zip(answers, settings, strict=True):
        vf, ent = kw.get("vf_coef", 0.5), kw.get("ent_coef", 0.01)
        want = parts["pg"] - ent * parts["entropy"] + vf * parts["v"]
        checks.close(total, want, f"the loss of {described(PPO, kw)} vs its own parts")


@exercise.check("value loss & total")
def vf_coef_zero(kernel):
    """vf_coef=0.0 (falsy) is honoured: loss = pg - 0.01 * entropy (own parts)."""
    ((total, parts),) = ppo_calls(kernel, minibatch(55), [{"vf_coef": 0.0}])
    checks.close(total, parts["pg"] - 0.01 * parts["entropy"],
                 "the loss with vf_coef=0.0 vs pg - 0.01 * entropy")  # fmt: skip


@exercise.check("value loss & total")
def ent_coef_zero(kernel):
    """ent_coef=0.0 (falsy) is honoured: loss = pg + 0.5 * v (own parts)."""
    ((total, parts),) = ppo_calls(kernel, minibatch(56), [{"ent_coef": 0.0}])
    checks.close(
        total, parts["pg"] + 0.5 * parts["v"], "the loss with ent_coef=0.0 vs pg + 0.5 * v"
    )


@exercise.check("value loss & total", points=2)
def value_gradient(kernel):
    """d loss / d new_values with value_clip=0.2 matches float64 autograd."""
    batch = minibatch(57)
    lib.gradients_match(kernel, kernel.get(PPO), args_of(batch),
                        lambda *a, **k: ref_ppo(*a, **k)[0], [3], f"the loss of {PPO}(...)",
                        kwargs={"value_clip": 0.2}, output_path=[0],
                        names=["new_values"])  # fmt: skip


# --- masks --------------------------------------------------------------------------------


def padded(seed: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(B, L) = (4, 6) token-level inputs and a ragged mask; the masked-out entries hold
    other numbers of the same size (padding)."""
    batch = minibatch(seed, shape=(4, 6))
    lengths = torch.tensor([6, 2, 4, 5])  # 17 of 24 kept
    mask = torch.arange(6)[None, :] < lengths[:, None]
    return batch, mask


@exercise.check("masks", points=2, hidden=False)
def masked_means(kernel):
    """mask (ragged, (4, 6)): "pg", "v", "entropy" and "clipfrac" are means over the kept
    entries only."""
    batch, mask = padded(60)
    ((_, parts),) = ppo_calls(kernel, batch, [{"mask": mask}])
    want = ref_ppo(*args_of(batch), mask=mask)[1]
    for key in KEYS:
        checks.close(parts[key], want[key], f'"{key}" with a mask (17 of 24 kept)')


@exercise.check("masks")
def masked_clipped_value_loss(kernel):
    """Integration: value_clip=0.2 with a mask: "v" over the kept entries."""
    batch, mask = padded(62)
    part_matches(kernel, batch, "v", [{"value_clip": 0.2, "mask": mask}])


@exercise.check("masks", points=2)
def masked_normalization(kernel):
    """Integration: normalize_advantages=True with a mask: mean and std over the kept
    entries only."""
    batch, mask = padded(63)
    part_matches(kernel, batch, "pg", [{"normalize_advantages": True, "mask": mask}])


@exercise.check("masks")
def masked_gradient(kernel):
    """With a mask, d loss / d new_logp is 0 at the masked-out entries and matches autograd."""
    batch, mask = padded(64)
    lib.gradients_match(kernel, kernel.get(PPO), args_of(batch),
                        lambda *a, **k: ref_ppo(*a, **k)[0], [0], f"the loss of {PPO}(..., mask)",
                        kwargs={"mask": mask}, output_path=[0], names=["new_logp"])  # fmt: skip


# --- edge cases ---------------------------------------------------------------------------


@exercise.check("edge cases")
def gae_leaves_inputs_unchanged(kernel):
    """gae leaves its five inputs unchanged (no boundary, a termination, a truncation)."""
    names = ("rewards", "values", "next_values", "terminated", "truncated")
    for inputs in (rollout(70), with_boundary(71, "terminated", 3),
                   with_boundary(72, "truncated", 5)):  # fmt: skip
        unchanged(kernel, GAE, dict(zip(names, inputs, strict=True)), {})


@exercise.check("edge cases")
def ppo_loss_leaves_inputs_unchanged(kernel):
    """ppo_loss leaves its inputs unchanged: defaults, normalized advantages, value clipping,
    a mask."""
    batch, mask = padded(73)
    for kw in ({}, {"normalize_advantages": True}, {"value_clip": 0.2}, {"mask": mask}):
        unchanged(kernel, PPO, batch, kw)


@exercise.check("edge cases")
def gae_non_contiguous(kernel):
    """Non-contiguous (T, N) rollout tensors (flags included) give the same advantages."""
    inputs = rollout(74)
    gae_matches(kernel, tuple(lib.noncontiguous(x) for x in inputs), [{}],
                "for non-contiguous inputs")  # fmt: skip


@exercise.check("edge cases")
def ppo_loss_non_contiguous(kernel):
    """Non-contiguous (4, 6) loss inputs give the same parts."""
    batch = minibatch(75, shape=(4, 6))
    odd = {k: lib.noncontiguous(v) for k, v in batch.items()}
    ((_, parts),) = ppo_calls(kernel, odd, [{}])
    want = ref_ppo(*args_of(batch))[1]
    for key in ("pg", "v"):
        checks.close(parts[key], want[key], f'"{key}" for non-contiguous inputs')


@exercise.check("edge cases", points=2)
def gae_large_values_float64(kernel):
    """Values near 1e6 with rewards of a few units (float64): float64-accurate advantages."""
    rewards, values, next_values, terminated, truncated = rollout(76)
    inputs = (rewards, values + 1e6, next_values + 1e6, terminated, truncated)
    gae_matches(kernel, inputs, [{}], "for values near 1e6")


@exercise.check("edge cases", points=2)
def normalize_large_advantages_float64(kernel):
    """normalize_advantages=True with advantages moved to 1e6 (unit spread, float64): the
    same "pg" as the notebook's own for the unmoved ones (normalising removes the mean; no
    one-pass E[A²] - E[A]²)."""
    batch = minibatch(78)
    moved = {**batch, "advantages": 1e6 + batch["advantages"]}
    kw = {"normalize_advantages": True}
    ((_, near_zero),) = ppo_calls(kernel, batch, [kw])
    ((_, far),) = ppo_calls(kernel, moved, [kw])
    checks.same(far["pg"], near_zero["pg"], '"pg" for A + 1e6 vs for A (normalize_advantages=True)')


@exercise.check("edge cases")
def long_float32_rollout(kernel):
    """T = 2048 float32 steps, γ = 0.999, λ = 0.99: within rtol 1e-5, atol 1e-4 of the
    float64 computation (float32 rounding adds up over a long rollout)."""
    rewards, values, next_values, terminated, truncated = rollout(77, t=2048, n=2, dtype=F32)
    kw = {"gamma": 0.999, "lam": 0.99}
    gae_matches(kernel, (rewards, values, next_values, terminated, truncated), [kw],
                "for T = 2048 in float32", rtol=1e-5, atol=1e-4)  # fmt: skip


# --- from scratch -------------------------------------------------------------------------


def run_both(kernel) -> None:
    """One call of each function with default arguments, so a stub answers first."""
    kernel.get(GAE)(*rollout(80, t=3, n=2))
    kernel.get(PPO)(*args_of(minibatch(81, shape=(4,))))


@exercise.check("from scratch", points=2)
def no_rl_library(kernel):
    """The notebook imports no RL library (torchrl, Stable-Baselines3, ...), and no watched
    machinery ran."""
    lib.no_builtin(kernel, exercise, lambda: run_both(kernel))
    require_no_library(kernel.sources, LIBRARIES, "an RL library")

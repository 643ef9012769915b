"""Policy-gradient math: group advantages of the four backends, the PG loss, and k3 KL."""

from __future__ import annotations

import math

import pytest
import torch

from comlrl_lightning.losses import (
    actor_critic_advantages,
    explained_variance,
    group_advantages,
    k3_kl,
    policy_gradient_loss,
    value_loss,
)

R = torch.tensor([[1.0, 2.0, 4.0, 5.0]])
STD = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (4 - 3) ** 2 + (5 - 3) ** 2) / 4)  # population std = sqrt(2.5)


@pytest.mark.parametrize(
    "baseline, expected",
    [
        ("mean", [-2.0, -1.0, 1.0, 2.0]),
        ("raw", [1.0, 2.0, 4.0, 5.0]),
        ("max", [-4.0, -3.0, -1.0, 0.0]),
        # leave-one-out: R_g - mean of the others, e.g. 1 - (2 + 4 + 5) / 3
        ("rloo", [1 - 11 / 3, 2 - 10 / 3, 4 - 8 / 3, 5 - 7 / 3]),
    ],
)
def test_advantage_formulas(baseline, expected):
    torch.testing.assert_close(group_advantages(R, baseline, normalize=False), torch.tensor([expected]))
    scaled = [value / STD for value in expected]
    torch.testing.assert_close(group_advantages(R, baseline, normalize=True), torch.tensor([scaled]))


def test_backends_stay_different_with_normalization():
    results = [group_advantages(R, b, normalize=True) for b in ("mean", "raw", "max", "rloo")]
    for i in range(len(results)):
        for j in range(i + 1, len(results)):
            assert not torch.allclose(results[i], results[j])


def test_rloo_with_one_sample_falls_back_to_mean_and_constant_groups_do_not_divide_by_zero():
    torch.testing.assert_close(group_advantages(torch.tensor([[3.0]]), "rloo"), torch.tensor([[0.0]]))
    flat = group_advantages(torch.tensor([[2.0, 2.0, 2.0]]), "mean", normalize=True)
    assert torch.isfinite(flat).all() and torch.equal(flat, torch.zeros(1, 3))
    with pytest.raises(ValueError, match="baseline must be one of"):
        group_advantages(R, "median")


def test_group_advantages_take_each_group_along_the_last_axis_and_normalize_by_default():
    returns = torch.tensor([[[0.0, 1.0], [2.0, 6.0], [5.0, 5.0]]])  # [agents 1, items 3, G 2], as MAGRPO's
    torch.testing.assert_close(group_advantages(returns), torch.tensor([[[-1.0, 1.0], [-1.0, 1.0], [0.0, 0.0]]]))
    torch.testing.assert_close(group_advantages(torch.tensor([0.0, 1.0])), torch.tensor([-1.0, 1.0]))  # one group
    rows = torch.tensor([[0.0, 1.0, 2.0], [3.0, 3.0, 6.0]])
    torch.testing.assert_close(
        group_advantages(rows, "rloo", normalize=False), torch.tensor([[-1.5, 0.0, 1.5], [-1.5, -1.5, 3.0]])
    )
    torch.testing.assert_close(
        group_advantages(rows, "max", normalize=False), torch.tensor([[-2.0, -1.0, 0.0], [-3.0, -3.0, 0.0]])
    )
    torch.testing.assert_close(
        group_advantages(rows, "mean", normalize=False), torch.tensor([[-1.0, 0.0, 1.0], [-1.0, -1.0, 2.0]])
    )
    batch = rows.unsqueeze(0).expand(2, 2, 3)  # [agents 2, items 2, G 3]: the groups are still the last axis
    for baseline in ("max", "rloo"):
        torch.testing.assert_close(
            group_advantages(batch, baseline, normalize=False),
            group_advantages(rows, baseline, normalize=False).expand(2, 2, 3),
        )
    # one sample per group: nothing to normalize by (a raw return is kept, not divided by eps)
    torch.testing.assert_close(group_advantages(torch.tensor([[3.0], [-2.0]]), "raw"), torch.tensor([[3.0], [-2.0]]))


def test_policy_gradient_loss_and_gradient():
    logprobs = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    advantages = torch.tensor([1.0, -0.5, 2.0], requires_grad=True)
    loss = policy_gradient_loss(logprobs, advantages)
    assert loss.item() == pytest.approx(-(1.0 * -1.0 + -0.5 * -2.0 + 2.0 * -0.5) / 3)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, -advantages.detach() / 3)
    assert advantages.grad is None  # advantages are constants


def test_k3_kl_matches_a_direct_computation():
    policy = torch.tensor([[-1.0, -2.0, -0.3], [-0.7, -0.1, -5.0]])
    reference = torch.tensor([[-1.5, -1.0, -0.3], [-0.2, -0.4, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    expected = []
    for row in range(2):
        total = 0.0
        for t in range(3):
            if mask[row, t]:
                r = reference[row, t].item() - policy[row, t].item()
                total += math.exp(r) - r - 1
        expected.append(total)
    torch.testing.assert_close(k3_kl(policy, reference, mask), torch.tensor(expected))
    assert (k3_kl(policy, reference, mask) >= 0).all()
    assert k3_kl(policy, policy, mask).abs().max() == 0


# ---------------------------------------------------------------------------------------------
# Actor-critic pieces


def test_actor_critic_advantages_are_return_minus_value_then_standardised():
    returns = torch.tensor([1.0, 2.0, 4.0, 5.0])
    values = torch.tensor([0.5, 2.5, 3.0, 3.0])
    raw = [0.5, -0.5, 1.0, 2.0]  # R - V
    torch.testing.assert_close(actor_critic_advantages(returns, values, normalize=False), torch.tensor(raw))
    mean = sum(raw) / 4
    std = math.sqrt(sum((a - mean) ** 2 for a in raw) / 4)
    expected = torch.tensor([(a - mean) / std for a in raw])
    torch.testing.assert_close(actor_critic_advantages(returns, values), expected)
    # the critic's value is a constant for the actor
    values.requires_grad_(True)
    assert not actor_critic_advantages(returns, values).requires_grad
    # a single sample is not standardised (nothing to compare it with)
    torch.testing.assert_close(actor_critic_advantages(torch.tensor([3.0]), torch.tensor([1.0])), torch.tensor([2.0]))


def test_value_loss_unclipped_and_clipped_by_hand():
    values = torch.tensor([1.0, 0.0, 2.0], requires_grad=True)
    returns = torch.tensor([0.0, 1.0, 2.5])
    torch.testing.assert_close(value_loss(values, returns), torch.tensor((1.0 + 1.0 + 0.25) / 3))
    old = torch.tensor([0.5, 0.5, 2.0])
    # V_old + clip(V - V_old, -0.2, 0.2): [0.7, 0.3, 2.0]; squared errors [0.49, 0.49, 0.25] against [1, 1, 0.25]
    # -> max: [1, 1, 0.25]; with old values far away the clipped term wins:
    torch.testing.assert_close(value_loss(values, returns, old, 0.2), torch.tensor((1.0 + 1.0 + 0.25) / 3))
    far = torch.tensor([-1.0, 3.0, 0.0])
    # clipped: [-0.8, 2.8, 0.2] -> errors [0.64, 3.24, 5.29]; unclipped [1, 1, 0.25] -> max [1, 3.24, 5.29]
    loss = value_loss(values, returns, far, 0.2)
    torch.testing.assert_close(loss, torch.tensor((1.0 + 3.24 + 5.29) / 3))
    loss.backward()
    # only the first element's gradient flows (the clipped terms are flat in V): 2 (V - R) / 3
    torch.testing.assert_close(values.grad, torch.tensor([2 * 1.0 / 3, 0.0, 0.0]))


def test_explained_variance():
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0])
    torch.testing.assert_close(explained_variance(returns, returns), torch.tensor(1.0))
    torch.testing.assert_close(explained_variance(torch.full((4,), 2.5), returns), torch.tensor(0.0))
    # residuals [0.5, -0.5, 0.5, -0.5]: Var 0.25 against Var(R) 1.25
    torch.testing.assert_close(
        explained_variance(returns - torch.tensor([0.5, -0.5, 0.5, -0.5]), returns), torch.tensor(0.8)
    )
    assert math.isnan(explained_variance(returns, torch.ones(4)).item())


def test_value_loss_clips_only_with_both_old_values_and_a_clip_range_and_small_return_variances_count():
    values, returns, far = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]), torch.tensor([5.0, 5.0])
    unclipped = torch.tensor((1.0 + 4.0) / 2)
    torch.testing.assert_close(value_loss(values, returns, far, None), unclipped)
    torch.testing.assert_close(value_loss(values, returns, None, 0.2), unclipped)
    # returns with a variance under 1 (0.25) still give a value, not nan
    torch.testing.assert_close(
        explained_variance(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0])), torch.tensor(1.0)
    )

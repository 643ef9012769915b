"""Policy-gradient math: group advantages of the four backends, the PG loss, and k3 KL."""

from __future__ import annotations

import math

import pytest
import torch

from comlrl_lightning.losses import group_advantages, k3_kl, policy_gradient_loss

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

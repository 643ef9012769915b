"""The critics of MAAC and IAC on their own: one step on their loss, their placement, their heads' seeds."""

from __future__ import annotations

import pytest
import torch

from comlrl_lightning import MAGRPOModule
from comlrl_lightning.critics import IndividualCritics, SharedCritic, ValueHead
from comlrl_lightning.modules.optim import adamw
from tests.conftest import tiny_team

PROMPTS = [["topic: ab\nwriter:", "topic: ab\nmatcher:"], ["topic: cde\nwriter:", "topic: cde\nmatcher:"]]
TEXTS = [[["aei", "xk", "ou"], ["bb", "eee", "q"]], [["ok", "no", "ae"], ["zz", "i", "uo"]]]  # [agent][item][g]
RETURNS = torch.tensor([[0.3, -0.2, 0.9], [0.1, 0.4, -0.7]])  # [items, G]


def _team():
    """The tiny team (loaded) and the sources its critics are built from."""
    module = MAGRPOModule(team=tiny_team())
    return module.team, module.agent_sources


@pytest.mark.parametrize(
    "critic",
    [
        lambda: SharedCritic(critic_type="v"),
        lambda: SharedCritic(critic_type="q", critic_value_head_hidden_dim=8),
        lambda: IndividualCritics(critic_type="q"),
        lambda: IndividualCritics(critic_type="v", use_separate_critic=False),
    ],
    ids=["maac-v", "maac-q", "iac-separate-q", "iac-head-v"],
)
def test_one_step_on_the_critic_loss_lowers_every_critics_squared_error(critic):
    """One AdamW step of the critic's own parameter groups on :meth:`Critic.loss` lowers each
    critic's ``mean (V - R)^2``, written out here (a flipped sign of the loss raises it)."""
    team, sources = _team()
    made = critic()
    made.build(team, sources, seed=0)
    returns = torch.stack([RETURNS] * team.num_agents)

    def errors():
        with torch.no_grad():
            return ((made.values(team, PROMPTS, TEXTS) - returns) ** 2).mean(dim=(1, 2))

    before = errors()
    optimizer = adamw(made.parameter_groups([1e-4] * team.num_agents))
    made.loss(made.values(team, PROMPTS, TEXTS), returns).backward()
    optimizer.step()
    after = errors()
    assert (after < before).all(), (before, after)


def test_place_puts_each_critic_on_its_device_and_by_default_beside_its_agent():
    """Observed on the CPU with the ``meta`` device: the networks are built on the CPU, so a
    placement that was skipped, or given to the wrong critic, shows."""
    team, sources = _team()
    separate = IndividualCritics(devices=["meta", "cpu"])
    separate.build(team, sources)
    separate.place(team)
    assert [next(model.parameters()).device.type for model in separate.models] == ["meta", "cpu"]
    shared = SharedCritic(devices="meta")
    shared.build(team, sources)
    shared.place(team)
    assert {p.device.type for p in shared.parameters()} == {"meta"}
    team.agents[1].to("meta")
    heads = IndividualCritics(use_separate_critic=False)
    heads.build(team, sources)
    heads.place(team)
    assert [next(head.parameters()).device.type for head in heads.heads] == ["cpu", "meta"]


def test_a_value_heads_weights_come_from_its_seed_alone():
    torch.manual_seed(1)
    first = ValueHead(16, 4, seed=3)
    torch.manual_seed(2)  # whatever the global generator's state
    again, other = ValueHead(16, 4, seed=3), ValueHead(16, 4, seed=4)
    for a, b in zip(first.parameters(), again.parameters()):
        assert torch.equal(a, b)
    assert not torch.equal(first.layers[0].weight, other.layers[0].weight)
    assert all(torch.count_nonzero(layer.bias) == 0 for layer in first.layers if isinstance(layer, torch.nn.Linear))
    assert first(torch.zeros(5, 16)).shape == (5,)

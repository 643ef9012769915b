"""MADPOModule's step: it raises the joint margin of its batch; non-finite losses are reported and skipped,
never replaced by a constant."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from comlrl_lightning import MADPOModule, MemoryOptions
from tests.conftest import tiny_team
from tests.helpers.update_direction import one_update


class NaNOnFirstBatch(MADPOModule):
    def margins(self, batch):
        margins = super().margins(batch)
        return margins * float("nan") if self.global_step == 0 else margins


def test_a_non_finite_loss_skips_the_update_and_is_reported(tiny_run, recwarn):
    _, datamodule, trainer = tiny_run(trainer=dict(max_epochs=1, limit_train_batches=1))
    from tests.conftest import TINY_MODEL

    module = NaNOnFirstBatch(**TINY_MODEL)
    before = {k: v.clone() for k, v in module.team.state_dict().items()}
    trainer.fit(module, datamodule)
    after = module.team.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # no update from a NaN loss
    assert any("non-finite loss" in str(w.message) for w in recwarn)
    assert trainer.callback_metrics["train/skipped_nonfinite_steps"].item() == 1.0


def _direct_logprob(agent, prompt_ids, completion_ids) -> torch.Tensor:
    """``log pi(completion | prompt)`` from one unpadded forward and a plain log-softmax (none of the
    library's scoring), summed over the completion's tokens."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    logprobs = torch.log_softmax(agent(input_ids=ids).logits[0, :-1].float(), dim=-1)
    picked = logprobs[torch.arange(ids.shape[1] - 1), ids[0, 1:]]
    return picked[len(prompt_ids) - 1 :].sum()


@torch.no_grad()
def _direct_margins(team, pairs) -> torch.Tensor:
    """``[B, N]`` margins ``log pi_i(w_i) - log pi_i(l_i)`` as the default ``score_last_token=False``
    defines them on completions without a pad: every completion token but the last is scored."""
    return torch.stack(
        [
            torch.stack(
                [
                    _direct_logprob(team.agents[i], pair.prompt_ids[i], pair.winner_ids[i][:-1])
                    - _direct_logprob(team.agents[i], pair.prompt_ids[i], pair.loser_ids[i][:-1])
                    for i in range(team.num_agents)
                ]
            )
            for pair in pairs
        ]
    )


def test_one_update_raises_the_joint_margin_of_its_batch_and_every_agents_margin(tmp_path):
    """The direction of the update, measured without the library's scoring: after one optimizer
    step on a fixed batch of pairs, every pair's joint margin (winner over loser, summed over the
    agents) is higher, and so is each agent's mean margin (every agent is trained)."""
    from comlrl_lightning.rounds.pairs import PreferencePair
    from tests.conftest import TINY_MODEL

    module = MADPOModule(**TINY_MODEL)
    tokenizer = module.team.tokenizers[0]
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # no EOS (= pad) inside
    pairs = [
        PreferencePair(
            prompts=["p"] * 2,
            winner_completions=[winner] * 2,
            loser_completions=[loser] * 2,
            winner_reward=1.0,
            loser_reward=0.0,
            candidate_reward_mean=0.5,
            prompt_ids=[encode(f"topic: {topic}\nrole {agent}:") for agent in range(2)],
            winner_ids=[encode(winner + "e" * agent) for agent in range(2)],
            loser_ids=[encode(loser + "k" * agent) for agent in range(2)],
        )
        for topic, winner, loser in [("abc", "aeiou", "xkcd"), ("zz", "banana", "qq"), ("qwer", "owl", "rstvw")]
    ]
    before = _direct_margins(module.team, pairs)
    one_update(module, tmp_path, batch=module.collate_pairs(pairs))
    after = _direct_margins(module.team, pairs)
    # measured: the joint margins rise by 4 to 10 nats at this learning rate, each agent's by 3 to 4
    assert (after.sum(dim=-1) > before.sum(dim=-1)).all(), (before.sum(dim=-1), after.sum(dim=-1))
    assert (after.mean(dim=0) > before.mean(dim=0)).all(), (before.mean(dim=0), after.mean(dim=0))


def test_policy_gradient_steps_skip_non_finite_losses_too(tmp_path, recwarn):
    from lightning.pytorch import Trainer

    from comlrl_lightning import MAGRPOModule, TaskDataModule, TaskOptions
    from tests.conftest import TINY_MODEL

    class NaNReturns(MAGRPOModule):
        def joint_returns(self, items, prompts, texts):
            return super().joint_returns(items, prompts, texts) * float("nan")

    module = NaNReturns(**TINY_MODEL, num_generations=2)
    before = {k: v.clone() for k, v in module.team.state_dict().items()}
    Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=2,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
    ).fit(module, TaskDataModule(task=TaskOptions(train_dataset="embedded"), train_batch_size=4, num_train_epochs=1))
    assert module.skipped_steps == 2
    assert all(torch.equal(before[k], v) for k, v in module.team.state_dict().items())


@pytest.mark.parametrize("lora, every", [(False, 1), (True, 1), (False, 2)])
@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_gradient_checkpointing_recomputes_packed_and_trains_the_same_weights(tiny_run, monkeypatch, lora, every):
    from comlrl_lightning.team import activation_checkpointing as checkpointing
    from comlrl_lightning.team.activation_checkpointing import is_checkpointing

    recomputed = []
    original = checkpointing._checkpoint_inside
    monkeypatch.setattr(checkpointing, "_checkpoint_inside", lambda *args: recomputed.append(1) or original(*args))
    weights = []
    for enabled in (False, True):
        torch.manual_seed(0)  # the same initial LoRA adapters
        memory = MemoryOptions(gradient_checkpointing=enabled, checkpoint_every_n_layers=every)
        team = tiny_team(memory=memory, lora=LoraConfig(r=4, lora_alpha=16) if lora else None)
        module, datamodule, trainer = tiny_run(model=dict(team=team), trainer=dict(max_epochs=1, limit_train_batches=2))
        trainer.fit(module, datamodule)
        assert all(is_checkpointing(agent) == enabled for agent in module.team.agents)
        weights.append(module.team.state_dict())
    layers = module.team.agents[0].config.num_hidden_layers
    # 2 steps x 2 agents (a LoRA team: one pass of both) x every (every-th) layer, recomputed with the
    # packed attention (and the agents' adapters)
    passes = 1 if lora else 2
    assert len(recomputed) == 2 * passes * (layers // every) * (2 if lora else 1)
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, rtol=1e-5, atol=1e-6, msg=name)


def _lora_gradients(module, loss):
    module.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in module.team.named_parameters() if p.grad is not None}


def _pairs(tokenizer, agents: int) -> list:
    """Four pairs of ``agents`` agents with prompts, winners and losers of several lengths."""
    from comlrl_lightning.rounds.pairs import PreferencePair

    return [
        PreferencePair(
            prompts=["p"] * agents,
            winner_completions=["w"] * agents,
            loser_completions=["l"] * agents,
            winner_reward=1.0,
            loser_reward=0.0,
            candidate_reward_mean=0.5,
            prompt_ids=[tokenizer.encode(f"topic: {topic}\nrole {agent}:") for agent in range(agents)],
            winner_ids=[[5 + agent, 9, 11, tokenizer.eos_token_id][: 2 + k % 3] for agent in range(agents)],
            loser_ids=[[7, 8 + agent, tokenizer.eos_token_id][: 1 + (k + agent) % 3] for agent in range(agents)],
        )
        for k, topic in enumerate(["abc", "zz", "abc", "qwer"])
    ]


def _saved_bytes(function, *args):
    """``(function(*args), bytes of the tensors autograd keeps for the backward outside any checkpoint)``."""
    saved = []

    def pack(tensor):
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = function(*args)
    return result, sum(saved)


@pytest.mark.parametrize("fused", [None, False])
def test_recomputed_agents_have_the_margins_and_gradients_of_held_graphs_and_keep_no_activations(fused):
    from comlrl_lightning.losses import madpo_loss
    from tests.conftest import TINY_MODEL

    results = []
    for hold in (True, False):
        torch.manual_seed(0)
        memory = MemoryOptions(hold_agent_graphs=hold, fused_lm_head=fused)
        module = MADPOModule(**{**TINY_MODEL, "team": tiny_team(num_agents=3, memory=memory)})
        module.configure_model()
        assert module.recomputes_agents() is not hold
        batch = module.collate_pairs(_pairs(module.team.tokenizers[0], 3))
        margins, saved = _saved_bytes(module.margins, batch)
        module.zero_grad(set_to_none=True)
        madpo_loss(margins, module.dpo_beta).backward()
        gradients = {name: p.grad.clone() for name, p in module.team.named_parameters() if p.grad is not None}
        results.append((margins.detach(), gradients, saved))
    (held, held_gradients, held_saved), (margins, gradients, saved) = results
    assert torch.equal(margins, held)
    assert gradients.keys() == held_gradients.keys() and len(gradients) == len(list(module.team.parameters()))
    for name, value in held_gradients.items():
        assert torch.equal(gradients[name], value), name
    # held graphs keep every agent's activations; recomputed agents keep none of them until backward
    assert saved < held_saved / 20, (saved, held_saved)


def test_no_recomputation_where_it_saves_nothing():
    from tests.conftest import TINY_MODEL

    checkpointed = MADPOModule(**{**TINY_MODEL, "team": tiny_team(memory=MemoryOptions(gradient_checkpointing=True))})
    one_pass = MADPOModule(**{**TINY_MODEL, "team": tiny_team(lora=LoraConfig(r=4))})
    assert not checkpointed.recomputes_agents() and not one_pass.recomputes_agents()
    with torch.no_grad():
        assert not MADPOModule(**TINY_MODEL).recomputes_agents()
    assert MADPOModule(**TINY_MODEL).recomputes_agents()


def test_a_lora_team_in_one_pass_has_the_margins_and_gradients_of_one_pass_per_agent():
    from comlrl_lightning.losses import madpo_loss
    from tests.conftest import TINY_MODEL

    torch.manual_seed(0)
    module = MADPOModule(**{**TINY_MODEL, "team": tiny_team(num_agents=3, lora=LoraConfig(r=4, lora_alpha=16))})
    module.configure_model()
    assert module.team.one_pass and module.team.one_pass_adapters() == ["agent_0", "agent_1", "agent_2"]
    with torch.no_grad():  # distinct adapters, B away from its zero start
        for agent in module.team.agents:
            for parameter in agent.trainable_parameters():
                parameter.add_(0.1 * torch.randn_like(parameter))
    batch = module.collate_pairs(_pairs(module.team.tokenizers[0], 3))
    margins = module.margins(batch)
    gradients = _lora_gradients(module, madpo_loss(margins, module.dpo_beta))
    module.team.one_pass = False
    expected = module.margins(batch)
    expected_gradients = _lora_gradients(module, madpo_loss(expected, module.dpo_beta))
    torch.testing.assert_close(margins, expected, rtol=1e-5, atol=1e-5)
    assert gradients.keys() == expected_gradients.keys() and len(gradients) == 3 * 2 * 2  # agents x layers x (A, B)
    for name, value in expected_gradients.items():
        torch.testing.assert_close(gradients[name], value, rtol=1e-4, atol=1e-6, msg=name)
    assert not MADPOModule(**{**TINY_MODEL, "team": tiny_team(lora=LoraConfig(r=4), lora_one_pass=False)}).team.one_pass


def _trajectory_pair(tokenizer, seed):
    """A 2-agent pair whose winner has 2 turns and whose loser stopped after 1."""
    from comlrl_lightning.rounds.trajectory_pairs import SideTurns, TrajectoryPair

    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    sides = {}
    for side, turns in (("w", 2), ("l", 1)):
        prompts = [[f"topic {agent}", f"topic {agent} then {side}{seed}"][:turns] for agent in range(2)]
        texts = [[f"{side}{agent}{turn}{seed}xy" for turn in range(turns)] for agent in range(2)]
        sides[side] = SideTurns(
            prompts=prompts,
            completions=texts,
            rewards=[0.0] * turns,
            prompt_ids=[[encode(p) for p in agent] for agent in prompts],
            ids=[[encode(c) for c in agent] for agent in texts],
        )
    return TrajectoryPair(
        prompts=[p[0] for p in sides["w"].prompts],
        winner_completions=[c[0] for c in sides["w"].completions],
        loser_completions=[c[0] for c in sides["l"].completions],
        winner_reward=1.0,
        loser_reward=0.0,
        candidate_reward_mean=0.5,
        winner_turns=sides["w"],
        loser_turns=sides["l"],
    )


def test_multi_turn_margins_and_gradients_equal_summing_each_agents_turns_directly():
    """A batch of trajectory pairs: each agent's margin is the sum of its winner's turns' log-probs
    minus its loser's, scored one turn at a time, and the loss's gradients are those of that sum."""
    from comlrl_lightning.losses import madpo_loss
    from comlrl_lightning.team.team import pack_sequences
    from tests.conftest import TINY_MODEL

    torch.manual_seed(0)
    module = MADPOModule(**TINY_MODEL)
    module.configure_model()
    pairs = [_trajectory_pair(module.team.tokenizers[0], seed) for seed in range(3)]
    margins = module.margins(module.collate_pairs(pairs))
    module.zero_grad(set_to_none=True)
    madpo_loss(margins, module.dpo_beta).backward()
    gradients = {name: p.grad.clone() for name, p in module.team.named_parameters() if p.grad is not None}

    def turn_logprob(agent, prompt, completion):
        scored = module.team.scored_length(agent, completion, module.score_last_token)
        row = pack_sequences([prompt], [completion], [scored], module.team.tokenizers[agent].pad_token_id)
        return module.team.score([row], unit="sequence", agents=[agent])[0][0]

    direct = torch.stack(
        [
            torch.stack(
                [
                    sum(turn_logprob(agent, p, c) for p, c in pair.turn_rows(agent, "winner"))
                    - sum(turn_logprob(agent, p, c) for p, c in pair.turn_rows(agent, "loser"))
                    for agent in range(2)
                ]
            )
            for pair in pairs
        ]
    )
    torch.testing.assert_close(margins.detach(), direct.detach(), rtol=1e-5, atol=1e-5)
    module.zero_grad(set_to_none=True)
    madpo_loss(direct, module.dpo_beta).backward()
    for name, parameter in module.team.named_parameters():
        if parameter.grad is not None:
            torch.testing.assert_close(gradients[name], parameter.grad, rtol=1e-4, atol=1e-6)
    assert len(gradients) == len([p for p in module.team.parameters() if p.grad is not None])

"""MADPOModule: reference-free multi-agent DPO on the sum of the agents' log-prob margins."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torchmetrics import MeanMetric

from comlrl_lightning.losses import madpo_loss, trajectory_margins
from comlrl_lightning.modules.base import NOT_HYPERPARAMETERS, TeamModule
from comlrl_lightning.rounds.pairs import PreferencePair
from comlrl_lightning.rounds.trajectory_pairs import TrajectoryPair, trajectory_rows
from comlrl_lightning.team.team import Graphs, pack_sequences
from comlrl_lightning.validation import positive


class MADPOModule(TeamModule):
    """Multi-Agent DPO: ``loss = mean_p -log sigmoid(beta * sum_i Delta_i(p))``.

    ``Delta_i(p)`` is agent ``i``'s log-prob margin (winner minus loser completion, summed over
    tokens, no reference model). Each agent scores its ``[winners; losers]`` in one batched forward
    with grad (a LoRA team: every agent's in one forward of its shared base), and one backward
    trains all agents: the gradient w.r.t. agent ``i`` equals the reference's per-agent loss with
    the other agents' margins detached. Only one agent's activations are alive at a time, as in
    the reference's agent-by-agent backward: each agent's forward runs again in the backward
    (:meth:`recomputes_agents`), unless ``team.memory.hold_agent_graphs`` keeps every graph.

    Args:
        dpo_beta: beta of the loss (> 0).
        score_last_token: ``False`` (parity with the reference): cut each completion at the first
            pad id and leave its last token unscored; ``True``: score the whole completion, EOS
            included, cut at the first pad id (kept when pad == eos, as the reference's full-completion
            scoring), so pads and anything after them are never scored. A centralized team always
            scores its joint completion whole this way.
        **kwargs: team, optimizer and sampling options of :class:`TeamModule`.
    """

    def __init__(self, dpo_beta: float = 0.1, score_last_token: bool = False, **kwargs: Any) -> None:
        positive("dpo_beta", dpo_beta)
        super().__init__(**kwargs)
        self.dpo_beta = float(dpo_beta)
        self.score_last_token = score_last_token
        self.save_hyperparameters(ignore=NOT_HYPERPARAMETERS)
        self.preference_accuracy = MeanMetric()

    # ------------------------------------------------------------------------------------------
    # Batches

    def collate_pairs(self, pairs: List[PreferencePair]) -> Dict[str, Any]:
        """Pack a list of pairs into per-agent ``[winners; losers]`` tensors (see ``pack_sequences``);
        pairs of multi-turn trajectories into one row per turn (:meth:`collate_trajectories`)."""
        if any(isinstance(pair, TrajectoryPair) for pair in pairs):
            return self.collate_trajectories(pairs)
        agents = []
        for i in range(self.team.num_agents):
            tokenizer = self.team.tokenizers[i]
            prompts = [pair.prompt_ids[i] for pair in pairs] * 2
            completions = [pair.winner_ids[i] for pair in pairs] + [pair.loser_ids[i] for pair in pairs]
            scored = [self.scored_length(i, c) for c in completions]
            agents.append(pack_sequences(prompts, completions, scored, tokenizer.pad_token_id))
        return {
            "agents": agents,
            "candidate_reward_mean": torch.tensor([pair.candidate_reward_mean for pair in pairs], dtype=torch.float32),
        }

    def collate_trajectories(self, pairs: List[PreferencePair]) -> Dict[str, Any]:
        """Per agent, one row per turn of every winner and loser trajectory, and ``owners``: the
        sequence (``p`` for pair ``p``'s winner, ``B + p`` for its loser) each row belongs to."""
        agents, owners = [], []
        for i in range(self.team.num_agents):
            prompts, completions, rows = trajectory_rows(pairs, i)
            scored = [self.scored_length(i, c) for c in completions]
            agents.append(pack_sequences(prompts, completions, scored, self.team.tokenizers[i].pad_token_id))
            owners.append(torch.tensor(rows, dtype=torch.long))
        return {
            "agents": agents,
            "owners": owners,
            "candidate_reward_mean": torch.tensor([pair.candidate_reward_mean for pair in pairs], dtype=torch.float32),
            "candidate_turn_reward_means": padded_turn_means(pairs),
        }

    def scored_length(self, agent: int, completion: List[int]) -> int:
        """Completion tokens scored: a centralized team's joint completion whole, through its EOS
        (cut at the first pad, kept when pad == eos, as the reference); otherwise ``score_last_token``'s rule."""
        if self.collaboration.centralized:
            return self.team.joint_scored_length(agent, completion)
        return self.team.scored_length(agent, completion, self.score_last_token)

    def margins(self, batch: Dict[str, Any]) -> torch.Tensor:
        """``[B, N]`` per-pair, per-agent log-prob margins (with grad), every agent's winners and
        losers scored by :meth:`~comlrl_lightning.team.Team.score` (a LoRA team's in one pass), each
        agent's graph recomputed in the backward where :meth:`recomputes_agents` says.
        Multi-turn batches sum each trajectory's turns (:func:`~comlrl_lightning.losses.trajectory_margins`)."""
        size = batch["candidate_reward_mean"].shape[0]
        graphs: Graphs = "recompute" if self.recomputes_agents() else "held"
        logprobs = self.team.score(batch["agents"], unit="sequence", graphs=graphs)
        if "owners" in batch:
            margins = [trajectory_margins(rows, owners, size) for rows, owners in zip(logprobs, batch["owners"])]
            return torch.stack(margins, dim=-1)
        return torch.stack([agent[:size] - agent[size:] for agent in logprobs], dim=-1)

    def recomputes_agents(self) -> bool:
        """Whether each agent's scoring forward runs again in the backward instead of keeping its
        activations until the joint loss's one backward (the default with grad on and 2+ agents).

        Not where it would not save memory or cannot: ``team.memory.hold_agent_graphs`` (speed
        chosen), activation checkpointing (the graphs hold only layer inputs already), a LoRA team's
        one pass (one forward for all agents), agents sharded across processes.
        """
        memory, team = self.team_options.memory, self.team
        if memory.hold_agent_graphs or memory.gradient_checkpointing or not torch.is_grad_enabled():
            return False
        return team.num_agents > 1 and not team.plan.one_pass and not team.synced

    # ------------------------------------------------------------------------------------------
    # Training

    def training_step(self, batch: Dict[str, Any], batch_idx: int) -> Optional[torch.Tensor]:
        size = batch["candidate_reward_mean"].shape[0]
        margins = self.margins(batch)
        loss = madpo_loss(margins, self.dpo_beta)
        if self.skip_nonfinite(loss):
            return None
        joint = margins.detach().sum(dim=-1)
        self.preference_accuracy.update((joint > 0).float())
        reward_mean = batch["candidate_reward_mean"].mean()
        metrics = {
            "train/loss": loss.detach(),
            "train/joint_margin": joint.mean(),
            "turn_1/reward_mean": reward_mean,
            "turn_1/expected_return": reward_mean,
        }
        if "candidate_turn_reward_means" in batch:  # multi-turn: turn t's own reward, the return beside
            metrics.update(turn_reward_metrics(batch["candidate_turn_reward_means"]))
        metrics.update({f"train/agent_{i}/margin": margins[:, i].detach().mean() for i in range(margins.shape[1])})
        self.log_dict(metrics, batch_size=size, prog_bar=False)
        self.log("train/loss_step", loss.detach(), batch_size=size, prog_bar=True, logger=False)
        self.log("train/preference_accuracy", self.preference_accuracy, on_step=False, on_epoch=True, batch_size=size)
        return loss


def padded_turn_means(pairs: List[PreferencePair]) -> torch.Tensor:
    """``[B, H]``: each pair's per-turn candidate reward means (``candidate_turn_reward_means``; a
    single-turn pair's one turn is its ``candidate_reward_mean``), ``NaN`` past a pair's last turn."""
    rows = [getattr(pair, "candidate_turn_reward_means", None) or [pair.candidate_reward_mean] for pair in pairs]
    means = torch.full((len(rows), max(len(row) for row in rows)), float("nan"))
    for p, row in enumerate(rows):
        means[p, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return means


def turn_reward_metrics(means: torch.Tensor) -> Dict[str, torch.Tensor]:
    """``turn_<t>/reward_mean``: the mean of column ``t - 1`` of ``means`` (``[B, H]``, ``NaN`` where a
    pair's item had no trajectory reaching that turn) over the pairs that have it."""
    metrics = {}
    for turn in range(means.shape[1]):
        column = means[:, turn]
        reached = column[~torch.isnan(column)]
        if reached.numel():
            metrics[f"turn_{turn + 1}/reward_mean"] = reached.mean()
    return metrics

"""IterativePreferenceDataModule: rounds of collect -> round file -> replay -> train."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

from .collection import ITERATIVE_PAIR_SELECTIONS, build_pairs_against, merge_results, pair_from_record, sample_candidates
from .comparators import (
    ApiComparator,
    Comparator,
    CurrentComparator,
    CurrentCopyComparator,
    HistoryComparator,
    ModelComparator,
    build_centralized_comparator,
    validate_comparator_options,
)
from .data import PreferenceDataModule
from .devices import DeviceSpec, resolve_devices
from .distributed import barrier, gather_objects, gather_results, rank_and_world, shard
from .options import at_least
from .replay import ReplayBuffer, validate_replay_options
from .rng import RandomStream, derived_seed
from .snapshots import PolicySnapshots



class IterativePreferenceDataModule(PreferenceDataModule):
    """Iterative (online) preference data: ``num_iterations`` rounds of ``num_train_epochs`` epochs.

    At the first epoch of every round the current team samples ``preference_num_candidates``
    completions per agent and item, a comparator samples ``comparator_num_candidates``, and
    candidate ``j`` of each side is compared with candidate ``j`` of the other (either side may win,
    ties are dropped). The round's pairs go to ``<preference_replay_dir>/iteration_NNNN.json``
    (atomically, also when empty), and the replay buffer picks the round's training pairs. The
    round is derived from ``trainer.current_epoch``; the round's pairs, the replay index and the
    snapshot index are in each checkpoint, and every random stream (the comparator's too) is
    derived from ``(seed, round, rank)``, so a resumed run continues exactly; raising
    ``num_iterations`` and resuming extends a finished run.

    Args:
        num_iterations: rounds (>= 1); the CLI sets ``trainer.max_epochs = num_iterations * num_train_epochs``.
        preference_replay_mode: ``current`` (this round's pairs), ``nearest_k`` (last k non-empty rounds),
            ``all_history``, or ``lambda_decay`` (round weights ``(1-lambda) lambda^age``, normalised).
        preference_replay_k: window of ``nearest_k``.
        preference_replay_lambda: lambda of ``lambda_decay``, in [0, 1].
        preference_replay_sample_size: pairs drawn per round for the historical modes
            (default: this round's pair count, else the newest non-empty round's).
        preference_replay_dir: folder of the round files (default ``<default_root_dir>/preference_replay``).
            Files already there are never imported; only a checkpoint restores replay history.
        policy_checkpoint_dir: keep every round-start policy snapshot here (never pruned). Without
            it, the history comparator keeps its snapshots in ``<default_root_dir>/policy_snapshots``
            and deletes those no later round (or a resume from the previous round) can use.
        comparator_policy: ``current``, ``current_copy``, ``model``, ``history`` or ``api`` (a remote model).
        comparator_generation_mode: ``decentralized`` (each comparator agent answers its own prompt) or
            ``centralized`` (one source writes every role in one completion; unparseable ones are dropped).
        comparator_model_name: comparator model for every agent (policy ``model``).
        comparator_agents: one comparator model per agent (policy ``model``).
        comparator_devices: devices of copied/loaded comparators (``auto``/``None``: the agents').
        comparator_num_candidates: K' (default K).
        comparator_history_k: lag of the history comparator in rounds (default 1).
        comparator_centralized_agent_index: agent slot (model, tokenizer, device) of the centralized comparator.
        comparator_centralized_adapter: import path of a centralized adapter (class, factory or object with
            ``build_prompt(item, prompts)`` and ``parse_completion(text, item, num_agents)``); default: tags.
        comparator_api_url: endpoint of the ``api`` comparator (required there).
        comparator_api_format: ``generic``, ``openai`` (chat), ``anthropic`` (messages) or ``openai_responses``.
        comparator_api_model: model name sent in the request body.
        comparator_api_max_n_per_request: cap on ``n`` per OpenAI chat request (default K'; 1 for DeepSeek).
        comparator_api_timeout: seconds per HTTP operation; a request that times out is retried.
        comparator_api_headers: extra HTTP headers (never a credential: they are saved with the config).
        comparator_api_key_env: NAME of the environment variable holding the key, read at request time
            (there is deliberately no option for the key itself).
        comparator_api_key_header: header carrying the key (``x-api-key`` for anthropic by default).
        comparator_api_key_prefix: text before the key in that header (empty: the bare key).
        comparator_api_response_field: dotted path of the completions in a ``generic`` response.
        comparator_api_extra_body: merged over the request body (``null`` values remove provider-format fields).
        comparator_api_concurrency: requests in flight at once, across items and candidates.
        comparator_api_max_retries: retries per request on connection errors, timeouts, 408, 429 and 5xx.
        **kwargs: the options of :class:`PreferenceDataModule`; here ``pair_selection`` may also be
            ``comparator_reward`` (the default: highest comparator score first).
    """

    def __init__(
        self,
        num_iterations: int = 6,
        preference_replay_mode: str = "current",
        preference_replay_k: Optional[int] = None,
        preference_replay_lambda: Optional[float] = None,
        preference_replay_sample_size: Optional[int] = None,
        preference_replay_dir: Optional[str] = None,
        policy_checkpoint_dir: Optional[str] = None,
        comparator_policy: str = "current",
        comparator_generation_mode: str = "decentralized",
        comparator_model_name: Optional[str] = None,
        comparator_agents: Optional[List[str]] = None,
        comparator_devices: DeviceSpec = None,
        comparator_num_candidates: Optional[int] = None,
        comparator_history_k: Optional[int] = None,
        comparator_centralized_agent_index: int = 0,
        comparator_centralized_adapter: Optional[str] = None,
        comparator_api_url: Optional[str] = None,
        comparator_api_format: str = "generic",
        comparator_api_model: Optional[str] = None,
        comparator_api_max_n_per_request: Optional[int] = None,
        comparator_api_timeout: float = 120.0,
        comparator_api_headers: Optional[Dict[str, str]] = None,
        comparator_api_key_env: Optional[str] = None,
        comparator_api_key_header: str = "Authorization",
        comparator_api_key_prefix: str = "Bearer",
        comparator_api_response_field: str = "completions",
        comparator_api_extra_body: Optional[Dict[str, Any]] = None,
        comparator_api_concurrency: int = 8,
        comparator_api_max_retries: int = 4,
        num_train_epochs: int = 1,
        preference_num_candidates: int = 20,
        preference_pairs_per_sample: Optional[int] = 4,
        pair_selection: str = "comparator_reward",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            num_train_epochs=num_train_epochs,
            preference_num_candidates=preference_num_candidates,
            preference_pairs_per_sample=preference_pairs_per_sample,
            pair_selection=pair_selection,
            **kwargs,
        )
        at_least("num_iterations", num_iterations, 1)
        self.replay_mode = validate_replay_options(
            preference_replay_mode, preference_replay_k, preference_replay_lambda, preference_replay_sample_size
        )
        self.comparator_options = validate_comparator_options(
            comparator_policy,
            comparator_generation_mode,
            comparator_num_candidates,
            comparator_history_k,
            comparator_model_name,
            comparator_agents,
            comparator_devices,
            num_agents=self.num_agents,
            centralized_agent_index=comparator_centralized_agent_index,
            centralized_adapter=comparator_centralized_adapter,
            url=comparator_api_url,
            format=comparator_api_format,
            model=comparator_api_model,
            max_n_per_request=comparator_api_max_n_per_request,
            timeout=comparator_api_timeout,
            headers=comparator_api_headers,
            key_env=comparator_api_key_env,
            key_header=comparator_api_key_header,
            key_prefix=comparator_api_key_prefix,
            response_field=comparator_api_response_field,
            extra_body=comparator_api_extra_body,
            concurrency=comparator_api_concurrency,
            max_retries=comparator_api_max_retries,
        )
        self.comparator_policy = self.comparator_options.policy
        self.comparator_history_k = self.comparator_options.history_k
        self.num_iterations = num_iterations
        self.replay_options = (preference_replay_k, preference_replay_lambda, preference_replay_sample_size)
        self.preference_replay_dir, self.policy_checkpoint_dir = preference_replay_dir, policy_checkpoint_dir
        self.comparator_sources = comparator_agents or ([comparator_model_name] if comparator_model_name else [])
        self.comparator_devices = comparator_devices
        self.comparator_num_candidates = comparator_num_candidates
        # one stream shared by the comparator's parts, re-seeded from (seed, round, rank) every round
        self.comparator_stream = RandomStream(self.seed)
        self.built_round: Optional[int] = None
        self.replay: Optional[ReplayBuffer] = None
        self.snapshots: Optional[PolicySnapshots] = None
        self.comparator: Optional[Comparator] = None

    @classmethod
    def allowed_pair_selections(cls):
        return ITERATIVE_PAIR_SELECTIONS

    @property
    def total_epochs(self) -> int:
        return self.num_iterations * self.num_train_epochs

    # ------------------------------------------------------------------------------------------
    # Lightning hooks

    def setup(self, stage: str) -> None:
        already = self.task is not None
        super().setup(stage)
        if already:
            return
        # train_dataloader() must run every epoch: it decides whether a new round starts.
        self.trainer.reload_dataloaders_every_n_epochs = 1
        root = Path(self.trainer.default_root_dir)
        replay_dir = Path(self.preference_replay_dir) if self.preference_replay_dir else root / "preference_replay"
        self.replay = ReplayBuffer(replay_dir.absolute(), self.replay_mode, *self.replay_options)
        if self.comparator_policy == "history" or self.policy_checkpoint_dir:
            directory = Path(self.policy_checkpoint_dir) if self.policy_checkpoint_dir else root / "policy_snapshots"
            self.snapshots = PolicySnapshots(directory.absolute(), keep_all=self.policy_checkpoint_dir is not None)
        self.comparator = self._make_comparator()

    def _make_comparator(self) -> Comparator:
        module = self.trainer.lightning_module

        def actors():
            return module.team

        count = module.num_agents
        agent_devices = [str(module.team.device_of(i)) for i in range(count)]
        devices = resolve_devices(self.comparator_devices, count, "comparator_devices", agent_devices)
        options = self.comparator_options
        if options.generation_mode == "centralized":
            return build_centralized_comparator(
                self.comparator_policy, actors, self.comparator_stream, options.centralized_agent_index,
                options.adapter, devices, self.comparator_sources, self.snapshots, self.comparator_history_k,
                options.api,
            )
        if self.comparator_policy == "api":
            return ApiComparator(actors, self.comparator_stream, options.api)
        if self.comparator_policy == "current_copy":
            return CurrentCopyComparator(actors, self.comparator_stream, devices)
        if self.comparator_policy == "model":
            sources = resolve_devices(self.comparator_sources, count, "comparator_agents", [])
            return ModelComparator(actors, self.comparator_stream, sources, devices)
        if self.comparator_policy == "history":
            return HistoryComparator(actors, self.comparator_stream, self.snapshots, self.comparator_history_k)
        return CurrentComparator(actors, self.comparator_stream)

    def train_dataloader(self) -> DataLoader:
        module = self.trainer.lightning_module
        round_index = self.trainer.current_epoch // self.num_train_epochs
        if round_index != self.built_round:
            self.build_round(round_index, module)
        if not self.pairs:
            rank_zero_warn(f"no replay preference pairs for iteration {round_index + 1}; the round trains nothing.")
        return self.round_loader(module)

    def teardown(self, stage: str) -> None:
        # The reference also snapshots the policy after the last round when asked to keep snapshots.
        finished = self.trainer is not None and self.trainer.current_epoch >= self.total_epochs
        if stage == "fit" and finished and self.policy_checkpoint_dir and self.trainer.is_global_zero:
            self.snapshots.save(self.num_iterations, self.trainer.lightning_module.team)

    # ------------------------------------------------------------------------------------------
    # One round

    def build_round(self, round_index: int, module) -> None:
        """Collect the round's pairs, write its round file and draw its training pairs.

        Each process collects its shard of the items (streams derived from ``(seed, round, rank)``);
        the pairs are gathered in item order on every rank; rank 0 alone writes the round file and
        the snapshots; every rank then draws the same replay sample from ``(seed, round)``.
        """
        started = time.perf_counter()
        team = module.team
        rank, world = rank_and_world(self.trainer)
        items = shard(self.train_items, rank, world)
        stream = RandomStream.derive(self.seed, "collect", round_index, rank)
        self.comparator_stream.reseed(derived_seed(self.seed, "comparator", round_index, rank))
        if self.snapshots is not None:
            if self.trainer.is_global_zero:
                self.snapshots.save(round_index, team)
            barrier(self.trainer)
        num_comparator = self.comparator_num_candidates or self.preference_num_candidates
        self.comparator.start_round(round_index)
        total = 2 * len(items) * team.num_agents
        done = 0

        def progress(count: int) -> None:
            nonlocal done
            done += count
            rank_zero_info(f"round {round_index + 1}: sampled {done}/{total} agent prompts")

        def collect_shard():
            with module.generation_context():
                current = sample_candidates(
                    team, self.task, items, self.preference_num_candidates, module.generation_settings, stream, progress
                )
                comparator = self.comparator.sample(items, current.prompts, num_comparator, module.generation_settings)
                progress(len(items) * team.num_agents)
            self.comparator.end_round()
            return build_pairs_against(
                current, comparator, module.collection_oracle(self.task), items, self.pair_selection,
                self.preference_pairs_per_sample, stream,
            )

        result = merge_results(gather_results(collect_shard, world), world)
        records = [pair.to_record() for pair in result.pairs]
        path = self.replay.write_round(round_index + 1, records, publish=self.trainer.is_global_zero)
        barrier(self.trainer)  # the round file is in place before any rank reads it
        if self.replay_mode == "current":
            training = result.pairs
        else:
            replay_rng = RandomStream.derive(self.seed, "replay", round_index).python
            training = [pair_from_record(r, team) for r in self.replay.sample(len(result.pairs), replay_rng)]
        if self.snapshots is not None and self.comparator_policy == "history" and self.trainer.is_global_zero:
            # keep what the next round needs, plus one round more so a resume from the previous round works
            self.snapshots.prune(max(round_index + 1 - self.comparator_history_k, 0) - 1)
        self.last_collection, self.pairs, self.built_round = result, training, round_index
        comparator_metrics: Dict[str, float] = {}
        for part in gather_objects(self.comparator.metrics(), world):
            for key, value in part.items():
                comparator_metrics[key] = comparator_metrics.get(key, 0.0) + value
        module.log_metrics_now({
            "iter/current_iteration": float(round_index + 1),
            "iter/current_preference_pairs": float(len(result.pairs)),
            "iter/total_preference_pairs": float(self.replay.total_pairs),
            "iter/train_preference_pairs": float(len(training)),
            "collect/candidate_reward_mean": result.reward_mean,
            **comparator_metrics,
        })
        rank_zero_info(
            f"round {round_index + 1}/{self.num_iterations}: {len(result.pairs)} pairs ({path.name}), "
            f"{len(training)} for training, candidate reward mean {result.reward_mean:.4f}, "
            f"{time.perf_counter() - started:.1f}s"
        )

    # ------------------------------------------------------------------------------------------
    # Checkpointed state

    def state_dict(self) -> Dict[str, Any]:
        state = super().state_dict()
        state.update(
            built_round=self.built_round,
            replay=self.replay.state_dict() if self.replay is not None else None,
            snapshots=self.snapshots.state_dict() if self.snapshots is not None else None,
        )
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.built_round = state["built_round"]
        if state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"])
        if state.get("snapshots") is not None and self.snapshots is not None:
            self.snapshots.load_state_dict(state["snapshots"])
            if self.comparator_policy == "history" and self.built_round is not None:
                self.snapshots.require(max(self.built_round + 1 - self.comparator_history_k, 0))


__all__ = ["IterativePreferenceDataModule"]

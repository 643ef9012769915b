"""The seed's config dataclasses: the field names, defaults and validation of ``comlrl.trainers.preference``.

``MADPOConfig``, ``MARLHFConfig``, ``MADPOIterConfig`` and ``MARLHFIterConfig`` take exactly the
reference's (CoMLRL's) fields with its defaults and check them in ``__post_init__`` in its order,
with its messages (each names the field); a rule a module, data module or part also enforces is
that part's own check function (``check_pair_selection``, ``check_num_generations``,
``check_lambda``), called here with the reference's field name. Names the reference accepts for
one value (for example ``preference_replay_mode="lambda"`` for ``"lambda_decay"``) are normalised
to the one name the rest of this library uses, so code written for the reference runs unchanged.
How every field becomes an option of the Lightning modules is :mod:`comlrl_lightning.trainers.mapping`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from comlrl_lightning.critics import CRITIC_TYPES
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.losses import ADVANTAGE_BASELINES
from comlrl_lightning.modules.magrpo import GROUP_BASELINES, RL_ALGORITHMS, check_num_generations
from comlrl_lightning.rounds.pairs import ITERATIVE_PAIR_SELECTIONS, PAIR_SELECTIONS, check_pair_selection
from comlrl_lightning.rounds.replay import check_lambda
from comlrl_lightning.runtime.devices import resolve_devices
from comlrl_lightning.validation import OptionError, at_least, check_field_types, positive, require

DeviceField = Optional[Union[str, Sequence[str]]]

ALIASES: Dict[str, Dict[str, Tuple[str, ...]]] = {
    "preference_replay_mode": {
        "current": ("current", "latest", "new"),
        "nearest_k": ("nearest_k", "recent_k", "last_k", "k"),
        "all_history": ("all_history",),
        "lambda_decay": ("lambda", "lambda_decay", "td_lambda", "td-lambda"),
    },
    "comparator_policy": {
        "current": ("current", "self", "online"),
        "current_copy": ("current_copy", "copy", "online_copy", "current-offload", "current_offload"),
        "model": ("model", "external", "comparator", "reference", "ref"),
        "history": ("history", "checkpoint", "previous", "previous_iteration"),
        "api": ("api", "http", "endpoint"),
    },
    "comparator_generation_mode": {
        "decentralized": ("decentralized", "decentralised", "multi_agent", "multi-agent"),
        "centralized": ("centralized", "centralised", "single_agent", "single-agent"),
    },
    "preference_scoring_reward": {
        "task": ("task", "oracle", "environment", "env"),
        "reward_model": ("reward_model", "model", "learned"),
    },
    "comparator_api_format": {
        "generic": ("generic",),
        "openai": ("openai", "openai_chat", "chat"),
        "anthropic": ("anthropic", "anthropic_messages", "messages"),
        "openai_responses": ("openai_responses", "responses", "codex"),
    },
    "rl_algorithm": {
        **{name: (name,) for name in RL_ALGORITHMS},
        "mareinforce": ("mareinforce", "mareforce"),
    },
    "parallel_training": {"none": ("none", "null"), "mp": ("mp",)},
}
"""Every name the reference accepts per field, grouped by the one name used here."""


def normalise(field: str, value: Optional[str], default: str) -> str:
    """The one name of ``value`` (stripped, lower-cased; ``None`` is ``default``), else the reference's error."""
    text = str(value if value is not None else default).strip().lower()
    for name, spellings in ALIASES[field].items():
        if text in spellings:
            return name
    raise OptionError(f"{field} must be one of: {', '.join(ALIASES[field])}.")


def _at_least(config: Any, name: str, minimum: int, nullable: bool = False) -> None:
    at_least(name, getattr(config, name), minimum, allow_none=nullable)


def _positive(config: Any, name: str, nullable: bool = False) -> None:
    positive(name, getattr(config, name), allow_none=nullable)


@dataclass
class MADPOConfig:
    """MADPO: collect pairs once with the team, then DPO on the sum of the agents' log-prob margins."""

    num_train_epochs: int = 20
    agent_learning_rate: float = 5.0e-6
    logging_steps: int = 50
    num_agents: int = 2
    collaboration_mode: str = "decentralized"
    parallel_training: str = "none"
    agent_devices: DeviceField = None
    max_new_tokens: int = GenerationSettings.max_new_tokens
    temperature: float = GenerationSettings.temperature
    top_p: float = GenerationSettings.top_p
    top_k: Optional[int] = GenerationSettings.top_k
    num_turns: int = 1
    discount: float = 1.0
    joint_mode: str = "aligned"
    early_termination_threshold: Optional[float] = None
    external_prompt_passthrough: bool = False
    eval_interval: int = 16
    eval_num_samples: int = 4
    eval_batch_size: int = 1
    rollout_buffer_size: int = 2
    train_batch_size: Optional[int] = None
    advantage_normalization: bool = True
    advantage_mode: str = "mean"
    reference_kl_enabled: bool = False
    reference_kl_coef: float = 0.1
    reference_devices: DeviceField = None
    preference_num_candidates: int = 80
    preference_pairs_per_sample: Optional[int] = 16
    pair_selection: str = "reward_gap"
    dpo_beta: float = 0.1
    use_environment_step: bool = True
    environment_steps_per_pair: int = 2

    def __post_init__(self) -> None:
        check_field_types(self)  # first: the rules below compare and convert the values
        require(
            self.collaboration_mode in ("decentralized", "centralized"),
            "collaboration_mode must be decentralized or centralized.",
        )
        if self.collaboration_mode == "centralized":
            require(
                getattr(self, "comparator_centralized_agent_index", 0) == 0,
                "Centralized collaboration has only actor index 0.",
            )
            if hasattr(self, "comparator_generation_mode"):
                self.comparator_generation_mode = "centralized"
        for name in ("num_train_epochs", "num_agents", "rollout_buffer_size"):
            _at_least(self, name, 1)
        _at_least(self, "eval_interval", 0)
        _at_least(self, "eval_num_samples", 0)
        for name in ("eval_batch_size", "num_turns", "logging_steps"):
            _at_least(self, name, 1)
        if self.train_batch_size is None:
            self.train_batch_size = self.rollout_buffer_size
        _at_least(self, "train_batch_size", 1)
        self.parallel_training = normalise("parallel_training", self.parallel_training or "none", "none")
        require(
            not (self.parallel_training == "mp" and self.agent_devices is None),
            "parallel_training='mp' requires explicit agent_devices.",
        )
        require(self.reference_kl_coef >= 0, "reference_kl_coef must be >= 0.")
        if self.reference_kl_enabled and self.reference_devices is not None:
            actors = 1 if self.collaboration_mode == "centralized" else self.num_agents
            resolve_devices(self.reference_devices, actors, "reference_devices", [])
        self._check_turns()
        _at_least(self, "preference_num_candidates", 2)
        _at_least(self, "preference_pairs_per_sample", 1, nullable=True)
        _positive(self, "dpo_beta")  # MADPOModule's rule
        _at_least(self, "environment_steps_per_pair", 1)
        # the data module's rules
        self.pair_selection = check_pair_selection(
            self.pair_selection, self.preference_pairs_per_sample, self._pair_selections()
        )
        require(
            str(self.joint_mode).strip().lower() in ("align", "aligned"),
            "MADPO preference generation currently supports aligned joint_mode only.",
        )
        require(
            self.advantage_mode in ADVANTAGE_BASELINES,
            f"advantage_mode must be one of: {', '.join(ADVANTAGE_BASELINES)}.",
        )

    def _pair_selections(self) -> Tuple[str, ...]:
        return PAIR_SELECTIONS

    def _check_turns(self) -> None:
        """MADPO: ``num_turns > 1`` trains on joint trajectories, with a decentralized team."""
        require(
            self.num_turns == 1 or self.collaboration_mode == "decentralized",
            "num_turns > 1 needs collaboration_mode='decentralized': a centralized team is single-turn only.",
        )


@dataclass
class MARLHFConfig(MADPOConfig):
    """MARLHF: pairs, a joint Bradley-Terry reward model, then multi-agent RL on the learned reward."""

    rl_algorithm: str = "magrpo"
    num_generations: int = 4

    def _check_turns(self) -> None:
        require(
            self.num_turns == 1,
            "MARLHF currently supports num_turns=1 only (multi-turn preference training is MADPO's).",
        )

    reward_model_name: Optional[str] = None
    reward_model_device: Optional[str] = "cuda:0"
    reward_learning_rate: float = 1.0e-5
    reward_num_train_epochs: int = 1
    reward_train_batch_size: int = 1
    reward_max_length: Optional[int] = None
    reward_freeze_backbone: bool = False
    critic_model_name: Optional[str] = None
    critic_learning_rate: Optional[float] = None
    critic_devices: DeviceField = None
    use_separate_critic: bool = True
    critic_type: str = "v"
    value_loss_coef: float = 0.6
    value_clip_range: Optional[float] = 0.2
    critic_value_head_hidden_dim: Optional[int] = None
    value_head_hidden_dim: Optional[int] = None

    def __post_init__(self) -> None:
        algorithm = normalise("rl_algorithm", self.rl_algorithm, "magrpo")
        super().__post_init__()
        self.rl_algorithm = algorithm
        check_num_generations(algorithm, self.num_generations)  # MARLHFModule's rule
        _positive(self, "reward_learning_rate")
        _at_least(self, "reward_num_train_epochs", 1)
        _at_least(self, "reward_train_batch_size", 1)
        _at_least(self, "reward_max_length", 1, nullable=True)
        if self.reward_model_device is not None:
            self.reward_model_device = str(self.reward_model_device)
        _positive(self, "critic_learning_rate", nullable=True)
        self.critic_type = str(self.critic_type or "v").strip().lower()
        require(self.critic_type in CRITIC_TYPES, f"critic_type must be one of: {', '.join(CRITIC_TYPES)}.")
        _positive(self, "value_loss_coef")
        _positive(self, "value_clip_range", nullable=True)
        # As the reference: the group-baseline algorithms decide the advantage mode.
        self.advantage_mode = GROUP_BASELINES.get(algorithm, self.advantage_mode)


@dataclass
class _IterativeFields(MADPOConfig):
    """Rounds, replay and comparator fields shared by the iterative configs (each also derives from
    :class:`MADPOConfig` or :class:`MARLHFConfig`, whose fields and checks these build on)."""

    num_iterations: int = 6
    preference_replay_mode: str = "current"
    preference_replay_k: Optional[int] = None
    preference_replay_lambda: Optional[float] = None
    preference_replay_sample_size: Optional[int] = None
    preference_replay_dir: Optional[str] = None
    log_reward_distribution: bool = False
    policy_checkpoint_dir: Optional[str] = None
    comparator_policy: str = "current"
    comparator_generation_mode: str = "decentralized"
    comparator_centralized_agent_index: int = 0
    comparator_model_name: Optional[str] = None
    comparator_agents: Optional[Sequence[str]] = None
    comparator_devices: DeviceField = None
    comparator_num_candidates: Optional[int] = None
    comparator_history_k: Optional[int] = None
    comparator_api_url: Optional[str] = None
    comparator_api_format: str = "generic"
    comparator_api_model: Optional[str] = None
    comparator_api_max_n_per_request: Optional[int] = None
    comparator_api_timeout: float = 120.0
    comparator_api_headers: Optional[Dict[str, str]] = None
    comparator_api_key: Optional[str] = None
    comparator_api_key_env: Optional[str] = None
    comparator_api_key_header: str = "Authorization"
    comparator_api_key_prefix: str = "Bearer"
    comparator_api_response_field: str = "completions"
    comparator_api_extra_body: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, "num_iterations", 1)
        self.preference_replay_mode = normalise("preference_replay_mode", self.preference_replay_mode, "current")
        _check_replay(self)
        self.comparator_policy = normalise("comparator_policy", self.comparator_policy, "current")
        self.comparator_generation_mode = normalise(
            "comparator_generation_mode", self.comparator_generation_mode, "decentralized"
        )
        require(
            self.num_turns == 1 or self.comparator_generation_mode != "centralized",
            "num_turns > 1 needs comparator_generation_mode='decentralized': centralized comparator generation "
            "is single-turn only.",
        )
        if self.comparator_generation_mode == "centralized":
            _at_least(self, "comparator_centralized_agent_index", 0)
            require(
                self.comparator_centralized_agent_index < self.num_agents,
                "comparator_centralized_agent_index must be smaller than num_agents.",
            )
        _at_least(self, "comparator_num_candidates", 1, nullable=True)
        _at_least(self, "comparator_api_max_n_per_request", 1, nullable=True)
        _check_comparator(self)
        self.comparator_api_format = normalise("comparator_api_format", self.comparator_api_format, "generic")
        # A key is a secret: never a config value (it would be in dumps, checkpoints and logs).
        require(
            self.comparator_api_key is None,
            "comparator_api_key: a key is never a config value here (it would end up in config dumps, "
            "checkpoints and logs); put it in an environment variable and name that in comparator_api_key_env.",
        )

    def _pair_selections(self) -> Tuple[str, ...]:
        return ITERATIVE_PAIR_SELECTIONS


def _check_replay(config: _IterativeFields) -> None:
    """The reference's rules for the replay arguments of each mode."""
    mode, k = config.preference_replay_mode, config.preference_replay_k
    only_lambda = "preference_replay_lambda is only valid when preference_replay_mode='lambda_decay'."
    only_k = "preference_replay_k is only valid when preference_replay_mode='nearest_k'."
    if mode == "current":
        require(k in (None, 1), "preference_replay_k must be null or 1 when preference_replay_mode='current'.")
        require(config.preference_replay_lambda is None, only_lambda)
        require(
            config.preference_replay_sample_size is None,
            "preference_replay_sample_size is only valid when preference_replay_mode is "
            "'nearest_k', 'all_history', or 'lambda_decay'.",
        )
        return
    if mode == "nearest_k":
        require(k is not None, "preference_replay_k is required when preference_replay_mode='nearest_k'.")
        _at_least(config, "preference_replay_k", 1)
    else:
        require(k is None, only_k)
    if mode == "lambda_decay":
        if config.preference_replay_lambda is None:
            raise OptionError("preference_replay_lambda is required when preference_replay_mode='lambda_decay'.")
        check_lambda("preference_replay_lambda", config.preference_replay_lambda)  # LambdaDecayReplay's rule
        config.preference_replay_lambda = float(config.preference_replay_lambda)
    else:
        require(config.preference_replay_lambda is None, only_lambda)
    _at_least(config, "preference_replay_sample_size", 1, nullable=True)


def _check_comparator(config: _IterativeFields) -> None:
    """The reference's rules for the fields each comparator policy may use."""
    policy = config.comparator_policy
    has_model = config.comparator_model_name is not None or config.comparator_agents is not None
    only_history = "comparator_history_k is only valid when comparator_policy='history'."
    only_model = "comparator_model_name and comparator_agents are only valid when comparator_policy='model'."
    if policy == "model":
        require(has_model, "comparator_model_name or comparator_agents is required when comparator_policy='model'.")
        require(config.comparator_history_k is None, only_history)
    elif policy == "history":
        config.comparator_history_k = 1 if config.comparator_history_k is None else config.comparator_history_k
        _at_least(config, "comparator_history_k", 1)
        require(not has_model, only_model)
    else:
        require(config.comparator_history_k is None, only_history)
        require(policy == "api" or not has_model, only_model)
    require(
        policy != "api" or bool(config.comparator_api_url),
        "comparator_api_url is required when comparator_policy='api'.",
    )


@dataclass
class MADPOIterConfig(_IterativeFields, MADPOConfig):
    """Iterative MADPO: rounds of collect against a comparator -> round file -> replay -> train."""

    num_train_epochs: int = 1
    preference_num_candidates: int = 20
    preference_pairs_per_sample: Optional[int] = 4
    pair_selection: str = "comparator_reward"


@dataclass
class MARLHFIterConfig(_IterativeFields, MARLHFConfig):
    """Iterative MARLHF: per round, pairs against a comparator, a fresh reward model, then RL on it."""

    num_train_epochs: int = 2
    preference_num_candidates: int = 20
    preference_pairs_per_sample: Optional[int] = 4
    pair_selection: str = "comparator_reward"
    reward_num_train_epochs: int = 2
    preference_scoring_reward: str = "task"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.preference_scoring_reward = normalise("preference_scoring_reward", self.preference_scoring_reward, "task")

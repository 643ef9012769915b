"""Critics of the actor-critic backends: one shared critic (MAAC) or one per agent (IAC).

A critic is a part chosen on the policy-gradient module (``model.init_args.critic``) with its own
options; ``rl_algorithm: maac`` defaults to :class:`SharedCritic`, ``iac`` to
:class:`IndividualCritics`. It is an ``nn.Module`` owned by the module, so its networks are moved,
saved in every checkpoint, synchronised by DDP and optimised (as parameter groups of the module's
one optimizer) like the agents, and they persist across MARLHF rounds. Networks are built in
:meth:`Critic.build` (called from the module's ``configure_model``), never when the config is
parsed.

Critic inputs follow the reference: an agent's prompt (``critic_type: v``) or prompt and completion
(``q``) for IAC; for MAAC the joint view ``[Agent i] prompt_i`` (blank-line separated), plus
``[Joint Action]`` and ``[Agent i action]`` sections with ``q``. Values come from a scalar head on
the last non-padding hidden state of a backbone whose LM head is never computed.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Literal, Optional, Sequence, Union, cast, get_args

import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from torch import nn

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.joint_reward import hidden_size_of, last_token_states
from comlrl_lightning.losses import value_loss
from comlrl_lightning.runtime.devices import DeviceSpec, resolve_devices
from comlrl_lightning.runtime.rng import derived_seed
from comlrl_lightning.team.loading import ModelSource, load_model, load_tokenizer
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import at_least, positive, require

if TYPE_CHECKING:
    from transformers import PreTrainedModel

CriticType = Literal["v", "q"]
CRITIC_TYPES = get_args(CriticType)


class ValueHead(nn.Module):
    """``Linear(h, 1)``, or ``Linear(h, hidden) -> tanh -> Linear(hidden, 1)``; weights N(0, 0.02), bias 0.

    The weights are drawn from ``seed`` (never the global generator), so a run repeats exactly.
    """

    def __init__(self, input_dim: int, hidden_dim: Optional[int] = None, seed: int = 0) -> None:
        super().__init__()
        layers: List[nn.Module] = [nn.Linear(input_dim, hidden_dim), nn.Tanh()] if hidden_dim else []
        layers.append(nn.Linear(hidden_dim or input_dim, 1))
        self.layers = nn.Sequential(*layers)
        generator = torch.Generator().manual_seed(seed)
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                nn.init.normal_(layer.weight, mean=0.0, std=0.02, generator=generator)
                nn.init.zeros_(layer.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.layers(hidden).squeeze(-1)


def encode_texts(tokenizer, texts: Sequence[str], device: torch.device) -> Dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``position_ids`` of ``texts``."""
    encoded = [tokenizer(text, add_special_tokens=True)["input_ids"] or [tokenizer.pad_token_id] for text in texts]
    width = max(len(ids) for ids in encoded)
    input_ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, : len(ids)], attention_mask[row, : len(ids)] = torch.as_tensor(ids), 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": attention_mask.to(device),
        "position_ids": position_ids.to(device),
    }


class ValueModel(nn.Module):
    """A causal-LM backbone without its LM head and a :class:`ValueHead`; texts in, ``[B]`` values out.

    Args:
        source: backbone (hub id, local path, ``"embedded"``, or a causal-LM object, copied).
        tokenizer: its tokenizer (loaded from ``source`` when ``None``).
        head_hidden_dim: hidden width of the head (``None``: one linear layer).
        seed: seed of the head's initial weights.
        loading: ``dtype`` / ``attn_implementation`` for a loaded backbone (the team's).
    """

    def __init__(
        self,
        source: ModelSource,
        tokenizer=None,
        head_hidden_dim: Optional[int] = None,
        seed: int = 0,
        loading: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        loaded = load_model(copy.deepcopy(source) if isinstance(source, nn.Module) else source, **(loading or {}))
        causal = cast("PreTrainedModel", loaded)  # a causal LM (a model object given is one too)
        self.backbone = causal.base_model
        self.head = ValueHead(hidden_size_of(causal.config), head_hidden_dim, seed)
        self.head.to(dtype=next(self.backbone.parameters()).dtype)
        if tokenizer is None:
            if not isinstance(source, str):
                raise ConfigurationError("ValueModel: a model object as the source needs its tokenizer.")
            tokenizer = load_tokenizer(source)
        self.tokenizer = tokenizer

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        batch = encode_texts(self.tokenizer, texts, next(self.parameters()).device)
        hidden = self.backbone(**batch, use_cache=False).last_hidden_state
        return self.head(last_token_states(hidden, batch["attention_mask"])).float()


def maac_critic_text(prompts: Sequence[str], completions: Optional[Sequence[str]] = None) -> str:
    """The shared critic's view of a joint state (``completions`` given: of a joint action too)."""
    text = "\n\n".join(f"[Agent {i}] {prompt}" for i, prompt in enumerate(prompts))
    if completions is None:
        return text
    actions = ["[Joint Action]"] + [f"[Agent {i} action]\n{completion}" for i, completion in enumerate(completions)]
    return text + "\n\n" + "\n\n".join(actions)


def _keep_source(critic: nn.Module, model_name: Union[ModelSource, Sequence[ModelSource], None]) -> None:
    """Keep the critic's model source as a plain attribute: a model object given from Python is a
    template copied by :meth:`Critic.build`, not a submodule (it would look built and be checkpointed)."""
    object.__setattr__(critic, "model_name", model_name)


class Critic(nn.Module):
    """What the policy-gradient module asks of a critic.

    Args:
        critic_type: ``v`` (value of the prompt) or ``q`` (value of prompt and completion).
        learning_rate: AdamW learning rate of the critic's own parameters (``None``: the agent's).
        value_loss_coef: weight of the critic loss in the module's loss (> 0).
    """

    algorithm: ClassVar[str]
    """The ``rl_algorithm`` this critic belongs to."""

    def __init__(
        self,
        critic_type: CriticType = "v",
        learning_rate: Optional[PositiveFloat] = None,
        value_loss_coef: PositiveFloat = 0.6,
    ) -> None:
        super().__init__()
        require(critic_type in CRITIC_TYPES, f"critic_type must be one of: {', '.join(CRITIC_TYPES)}.")
        positive("learning_rate", learning_rate, allow_none=True)
        positive("value_loss_coef", value_loss_coef)
        self.critic_type, self.value_loss_coef = critic_type, float(value_loss_coef)
        # a plain float: the command line's PositiveFloat in the optimizer's state would make checkpoints
        # unreadable with weights_only=True
        self.learning_rate = None if learning_rate is None else float(learning_rate)

    @property
    def has_networks(self) -> bool:
        """Whether :meth:`build` has run (the module builds a critic once)."""
        return any(True for _ in self.parameters())

    def build(self, team: Team, sources: Sequence[ModelSource], seed: int = 0) -> None:
        """Create the networks for ``team`` (agents built from ``sources``; heads drawn from ``seed``); called once."""
        raise NotImplementedError

    def values(
        self, team: Team, prompts: Sequence[Sequence[str]], texts: Sequence[Sequence[Sequence[str]]]
    ) -> torch.Tensor:
        """``[N, items, G]`` values (with grad) of sample ``g`` of every agent; ``texts[agent][item][g]``."""
        raise NotImplementedError

    def loss(self, values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        """The critic loss (before ``value_loss_coef``); ``values`` and ``returns`` are ``[N, items, G]``."""
        raise NotImplementedError

    def parameter_groups(self, agent_rates: Sequence[float]) -> List[dict]:
        """Optimizer groups of the critic's own parameters (a value head on an actor included); the
        optimizer's own weight decay applies, as to the agents' groups."""
        raise NotImplementedError

    def place(self, team: Team) -> None:
        """Move the networks to their devices (after the strategy placed the module)."""


def _group(name: str, module: nn.Module, rate: float) -> dict:
    return {"params": [p for p in module.parameters() if p.requires_grad], "lr": rate, "name": name}


class SharedCritic(Critic):
    """MAAC: one critic for the team, on the joint view of every agent's prompt (and action with ``q``).

    Args:
        model_name: backbone (default: agent 0's model).
        critic_type: ``v`` (V of the joint prompt) or ``q`` (Q of the joint prompt and joint action).
        learning_rate: the critic's learning rate (``None``: agent 0's).
        value_loss_coef: weight of the critic loss (> 0).
        critic_value_head_hidden_dim: hidden width of the value head (``None``: one linear layer;
            the reference ignores this option for MAAC).
        devices: the critic's device (``None``: agent 0's); one process only.
    """

    algorithm = "maac"
    model_name: Optional[ModelSource]  # a plain attribute (_keep_source)

    def __init__(
        self,
        model_name: Optional[str] = None,
        critic_type: CriticType = "v",
        learning_rate: Optional[PositiveFloat] = None,
        value_loss_coef: PositiveFloat = 0.6,
        critic_value_head_hidden_dim: Optional[PositiveInt] = None,
        devices: Optional[str] = None,
    ) -> None:
        super().__init__(critic_type, learning_rate, value_loss_coef)
        at_least("critic_value_head_hidden_dim", critic_value_head_hidden_dim, 1, allow_none=True)
        self.head_hidden_dim, self.devices = critic_value_head_hidden_dim, devices
        _keep_source(self, model_name)
        self.model: Optional[ValueModel] = None

    def build(self, team: Team, sources: Sequence[ModelSource], seed: int = 0) -> None:
        source = self.model_name or sources[0]
        tokenizer = None if isinstance(source, str) else team.tokenizers[0]
        self.model = ValueModel(
            source, tokenizer, self.head_hidden_dim, derived_seed(seed, "critic_head"), team.loading
        )

    def place(self, team: Team) -> None:
        if self.model is None:
            raise RuntimeError("SharedCritic.place: build the critic first.")
        self.model.to(self.devices or team.device_of(0))

    def values(self, team, prompts, texts):
        items, group = len(prompts), len(texts[0][0])
        if self.critic_type == "v":
            values = self.model([maac_critic_text(p) for p in prompts]).view(items, 1).expand(items, group)
        else:
            joint = [
                maac_critic_text(prompts[k], [agent[k][g] for agent in texts])
                for k in range(items)
                for g in range(group)
            ]
            values = self.model(joint).view(items, group)
        return values.unsqueeze(0).expand(len(texts), items, group)

    def loss(self, values, returns):
        # the critic regresses on every agent's (KL-shaped) return, as the reference's per-agent updates
        return torch.stack([value_loss(values[i], returns[i]) for i in range(returns.shape[0])]).mean()

    def parameter_groups(self, agent_rates):
        return [_group("critic", self.model, self.learning_rate or agent_rates[0])]


class IndividualCritics(Critic):
    """IAC: a critic per agent, a separate model or a value head on the agent's own model.

    Args:
        model_name: backbone of every separate critic, or a list of one per agent (default: each
            agent's own model).
        critic_type: ``v`` (V of the agent's prompt) or ``q`` (Q of its prompt and completion).
        learning_rate: the critics' learning rate (``None``: each agent's).
        value_loss_coef: weight of the critic loss (> 0).
        use_separate_critic: a separate critic model per agent (``True``), or a value head on the
            agent's own model, trained through its backbone (``False``: the memory of one head).
        value_clip_range: clip the value head's change around its value at rollout time (value
            head only, as in the reference; ``None``: off).
        critic_value_head_hidden_dim: hidden width of a separate critic's head.
        value_head_hidden_dim: hidden width of the value head on an agent.
        devices: devices of the separate critics: one, or a list of 1 or N (``None``: the agents').
    """

    algorithm = "iac"
    model_name: Union[ModelSource, List[ModelSource], None]  # a plain attribute (_keep_source)

    def __init__(
        self,
        model_name: Union[str, List[str], None] = None,
        critic_type: CriticType = "v",
        learning_rate: Optional[PositiveFloat] = None,
        value_loss_coef: PositiveFloat = 0.6,
        use_separate_critic: bool = True,
        value_clip_range: Optional[PositiveFloat] = 0.2,
        critic_value_head_hidden_dim: Optional[PositiveInt] = None,
        value_head_hidden_dim: Optional[PositiveInt] = None,
        devices: DeviceSpec = None,
    ) -> None:
        super().__init__(critic_type, learning_rate, value_loss_coef)
        positive("value_clip_range", value_clip_range, allow_none=True)
        at_least("critic_value_head_hidden_dim", critic_value_head_hidden_dim, 1, allow_none=True)
        at_least("value_head_hidden_dim", value_head_hidden_dim, 1, allow_none=True)
        if not use_separate_critic:
            for name, value in (
                ("model_name", model_name),
                ("critic_value_head_hidden_dim", critic_value_head_hidden_dim),
                ("devices", devices),
            ):
                require(
                    value is None,
                    f"{name} belongs to a separate critic; with use_separate_critic: false leave it null.",
                )
        else:
            require(
                value_head_hidden_dim is None,
                "value_head_hidden_dim sizes the value head on an agent; it needs use_separate_critic: false.",
            )
        self.use_separate_critic, self.value_clip_range = use_separate_critic, value_clip_range
        _keep_source(self, model_name)
        self.critic_head_hidden_dim, self.value_head_hidden_dim, self.devices = (
            critic_value_head_hidden_dim,
            value_head_hidden_dim,
            devices,
        )
        self.models = nn.ModuleList()
        self.heads = nn.ModuleList()

    def build(self, team: Team, sources: Sequence[ModelSource], seed: int = 0) -> None:
        if isinstance(self.model_name, (list, tuple)):
            require(
                len(self.model_name) == team.num_agents,
                f"critics length ({len(self.model_name)}) must match num_agents ({team.num_agents}).",
            )
        for i in range(team.num_agents):
            head_seed = derived_seed(seed, "critic_head", i)  # distinct from every other stream of the run
            if self.use_separate_critic:
                given = self.model_name[i] if isinstance(self.model_name, (list, tuple)) else self.model_name
                source = given or sources[i]
                tokenizer = None if isinstance(source, str) else team.tokenizers[i]
                self.models.append(ValueModel(source, tokenizer, self.critic_head_hidden_dim, head_seed, team.loading))
            else:
                head = ValueHead(hidden_size_of(team.agents[i].config), self.value_head_hidden_dim, head_seed)
                self.heads.append(head.to(dtype=next(team.agents[i].parameters()).dtype))

    def place(self, team: Team) -> None:
        defaults = [str(team.device_of(i)) for i in range(team.num_agents)]
        for network, device in zip(
            self.models or self.heads, resolve_devices(self.devices, team.num_agents, "devices", defaults)
        ):
            network.to(device)

    def _inputs(self, prompts, texts, agent: int) -> List[str]:
        if self.critic_type == "v":
            return [p[agent] for p in prompts]
        return [prompts[k][agent] + text for k, row in enumerate(texts[agent]) for text in row]

    def _agent_values(self, team: Team, agent: int, inputs: List[str]) -> torch.Tensor:
        if self.use_separate_critic:
            return self.models[agent](inputs)
        model = team.agents[agent]
        batch = encode_texts(team.tokenizers[agent], inputs, team.device_of(agent))
        output = model(**batch, use_cache=False, output_hidden_states=True, logits_to_keep=1)
        return self.heads[agent](last_token_states(output.hidden_states[-1], batch["attention_mask"])).float()

    def values(self, team, prompts, texts):
        items, group = len(prompts), len(texts[0][0])
        rows = []
        for agent in range(team.num_agents):
            values = self._agent_values(team, agent, self._inputs(prompts, texts, agent))
            rows.append(
                values.view(items, 1).expand(items, group) if self.critic_type == "v" else values.view(items, group)
            )
        return torch.stack([row.to(rows[0].device) for row in rows])

    def loss(self, values, returns):
        clip = None if self.use_separate_critic else self.value_clip_range
        # one update per fresh rollout: the values at rollout time are these values (see the MARLHF documentation)
        return sum(
            value_loss(values[i], returns[i], values[i].detach() if clip else None, clip)
            for i in range(returns.shape[0])
        )

    def parameter_groups(self, agent_rates):
        networks = self.models if self.use_separate_critic else self.heads
        return [
            _group(f"critic_{i}", network, self.learning_rate or agent_rates[i]) for i, network in enumerate(networks)
        ]


__all__ = ["Critic", "IndividualCritics", "SharedCritic", "ValueHead", "ValueModel", "maac_critic_text"]

"""The joint Bradley–Terry reward model of MARLHF: one scalar for a whole joint response."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, cast

import torch
from jsonargparse.typing import PositiveFloat, PositiveInt
from torch import nn

from comlrl_lightning.errors import ConfigurationError
from comlrl_lightning.losses import bradley_terry_loss
from comlrl_lightning.team.loading import ModelSource, load_model, load_tokenizer
from comlrl_lightning.validation import at_least, positive

if TYPE_CHECKING:
    from transformers import PreTrainedModel

JOINT_HEADER = "Joint multi-agent response"
SEPARATOR = "\n\n"


Span = Tuple[int, int]
"""A character range ``[start, end)`` of a text."""


def joint_segments(prompts: Sequence[str], completions: Sequence[str]) -> Tuple[str, List[Tuple[str, Span]]]:
    """:func:`joint_text` with the ``(kind, (start, end))`` character span of every prompt and response
    body in it (``kind`` is ``"prompt"`` or ``"response"``; labels and separators are in no span)."""
    text, segments = JOINT_HEADER, []
    for index in range(max(len(prompts), len(completions))):
        for kind, texts in (("prompt", prompts), ("response", completions)):
            body = texts[index] if index < len(texts) else ""
            text += f"{SEPARATOR}Agent {index + 1} {kind}:\n"
            segments.append((kind, (len(text), len(text) + len(body))))
            text += body
    return text, segments


def joint_text(prompts: Sequence[str], completions: Sequence[str]) -> str:
    """The reward model's input (as the reference's): header, then each agent's prompt and response (1-based)."""
    return joint_segments(prompts, completions)[0]


def tokens_inside(offsets: Sequence[Span], spans: Sequence[Span]) -> List[List[int]]:
    """Per span, the indices of the tokens lying wholly inside it: ``start <= token_start < token_end <= end``.

    Tokens without characters (special tokens) and tokens that straddle a span's edge belong to no span.
    """
    members: List[List[int]] = [[] for _ in spans]
    for token, (token_start, token_end) in enumerate(offsets):
        for index, (start, end) in enumerate(spans):
            if start <= token_start < token_end <= end:
                members[index].append(token)
                break
    return members


def tokens_to_cut(lengths: Sequence[int], kinds: Sequence[str], excess: int) -> List[int]:
    """How many tokens each segment loses so that ``excess`` tokens go, prompts before responses.

    One token at a time from the segment of the current kind with the most tokens left (the first
    such on ties): first among prompts, and only when every prompt is empty, among responses.
    Returns fewer than ``excess`` in total when every segment is emptied.
    """
    left = list(lengths)
    for kind in ("prompt", "response"):
        while excess > 0:
            candidates = [i for i, k in enumerate(kinds) if k == kind and left[i] > 0]
            if not candidates:
                break
            left[max(candidates, key=lambda i: left[i])] -= 1
            excess -= 1
    return [before - after for before, after in zip(lengths, left)]


def encode_joint(tokenizer, prompts: Sequence[str], completions: Sequence[str], max_length: Optional[int]) -> List[int]:
    """Token ids of :func:`joint_text`, tokenized whole (as the reference), cut to ``max_length``.

    Without a cut the ids are exactly ``tokenizer(joint_text(...))["input_ids"]``. Over budget,
    tokens of the whole-text tokenization are removed by the character segment they fall in:
    prompts lose tokens from their start (the end of a prompt sits next to its response), the
    longest first; only when every prompt is empty do responses lose tokens from their end; as a
    last resort the ids are cut at ``max_length``. Header, labels, separators, special tokens and
    tokens straddling a body's edge are never removed before that. (The reference instead cuts the
    end of the joint text, i.e. the last agents' responses first.) Cutting needs a fast tokenizer
    (character offsets).
    """
    text, segments = joint_segments(prompts, completions)
    if max_length is None:
        return tokenizer(text)["input_ids"]
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigurationError(
            "reward_model.max_length needs a fast (Rust) tokenizer: cutting uses character offsets."
        )
    encoded = tokenizer(text, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    if len(ids) <= max_length:
        return ids
    members = tokens_inside(encoded["offset_mapping"], [span for _, span in segments])
    cuts = tokens_to_cut([len(m) for m in members], [kind for kind, _ in segments], len(ids) - max_length)
    dropped = set()
    for (kind, _), indices, count in zip(segments, members, cuts):
        dropped.update(indices[:count] if kind == "prompt" else indices[len(indices) - count :])
    return [token for index, token in enumerate(ids) if index not in dropped][:max_length]


def hidden_size_of(config) -> int:
    for name in ("hidden_size", "n_embd", "d_model"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    raise ConfigurationError("Could not infer reward model hidden size.")


def last_token_states(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, H]``: the hidden state at each row's last position whose mask is 1 (any padding side)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.long() * positions).argmax(dim=-1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


@dataclass(frozen=True)
class RewardModelOptions:
    """A joint reward model and its optimizer: the ``reward_model`` of
    :class:`~comlrl_lightning.RewardModelModule` (and, with its fit's epochs and batch size, of
    :class:`~comlrl_lightning.MARLHFModule`, :class:`RewardModelFit`).

    Args:
        model_name: backbone (hub id, local path or ``"embedded"``); ``None``: the team's agent 0
            model in MARLHF, the embedded model for ``RewardModelModule``.
        learning_rate: AdamW learning rate (> 0).
        max_length: token budget of a joint text (prompts are shortened before responses);
            ``None``: the whole text.
        freeze_backbone: train only the scalar head.
    """

    model_name: Optional[str] = None
    learning_rate: PositiveFloat = 1e-5
    max_length: Optional[PositiveInt] = None
    freeze_backbone: bool = False

    def __post_init__(self) -> None:
        positive("reward_model.learning_rate", self.learning_rate)
        at_least("reward_model.max_length", self.max_length, 1, allow_none=True)
        # plain numbers: the command line's PositiveFloat in an optimizer's state would make its
        # checkpoints unreadable with weights_only=True
        object.__setattr__(self, "learning_rate", float(self.learning_rate))
        if self.max_length is not None:
            object.__setattr__(self, "max_length", int(self.max_length))


@dataclass(frozen=True)
class RewardModelFit(RewardModelOptions):
    """A reward model its team module fits itself, on every round's pairs (MARLHF): the options of
    :class:`RewardModelOptions` and the fit's own loop.

    Args:
        num_train_epochs: Bradley–Terry epochs per fit (>= 1).
        train_batch_size: pairs per reward-model step (>= 1).
        micro_batch_size: pairs per forward and backward inside a step, their gradients summed
            into the step's (the same update as one pass over ``train_batch_size`` pairs, up to
            float rounding, with the activations of ``micro_batch_size`` pairs alive at a time);
            ``None``: the whole step at once. A full backbone's activations grow with pairs times
            joint-text length: on a 135M model with prompts of hundreds of tokens, 8 pairs at once
            take over 20 GB on CPU.
    """

    num_train_epochs: PositiveInt = 1
    train_batch_size: PositiveInt = 1
    micro_batch_size: Optional[PositiveInt] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("reward_model.num_train_epochs", self.num_train_epochs, 1)
        at_least("reward_model.train_batch_size", self.train_batch_size, 1)
        at_least("reward_model.micro_batch_size", self.micro_batch_size, 1, allow_none=True)


class JointRewardModel(nn.Module):
    """A causal-LM backbone without its LM head plus a scalar head on the last non-padding token.

    Args:
        source: backbone (hub id, local path, ``"embedded"``, or a causal-LM object, copied).
        freeze_backbone: train only the head.
        loading: ``dtype`` / ``attn_implementation`` for a loaded backbone (the team's, as the
            reference loads its reward model with the actors' ``model_config``).
    """

    def __init__(
        self, source: ModelSource, freeze_backbone: bool = False, loading: Optional[Dict[str, Any]] = None
    ) -> None:
        super().__init__()
        loaded = load_model(copy.deepcopy(source) if isinstance(source, nn.Module) else source, **(loading or {}))
        causal = cast("PreTrainedModel", loaded)  # a causal LM (a model object given is one too)
        self.backbone = causal.base_model  # the transformer without the LM head: no vocabulary logits
        self.head = nn.Linear(hidden_size_of(causal.config), 1)
        self.head.to(dtype=next(self.backbone.parameters()).dtype)
        self.backbone.requires_grad_(not freeze_backbone)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[B]`` scores; works with left or right padding (pools the last position whose mask is 1)."""
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        return self.head(last_token_states(hidden, attention_mask)).squeeze(-1).float()


class RewardScorer:
    """A :class:`JointRewardModel` with its tokenizer: texts in, scores out."""

    def __init__(self, model: JointRewardModel, tokenizer, max_length: Optional[int] = None) -> None:
        if max_length is not None and not getattr(tokenizer, "is_fast", False):
            # fail at setup rather than at the first joint text over budget
            raise ConfigurationError(
                "reward_model.max_length needs a fast (Rust) tokenizer: cutting uses character offsets."
            )
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length

    @classmethod
    def from_source(
        cls,
        source: ModelSource,
        tokenizer=None,
        max_length: Optional[int] = None,
        freeze_backbone: bool = False,
        loading: Optional[Dict[str, Any]] = None,
    ) -> "RewardScorer":
        if tokenizer is None:
            if not isinstance(source, str):
                raise ConfigurationError("reward_model.model_name must be provided when agent models are objects.")
            tokenizer = load_tokenizer(source)
        return cls(JointRewardModel(source, freeze_backbone, loading), tokenizer, max_length)

    def batch(self, prompts: Sequence[Sequence[str]], completions: Sequence[Sequence[str]]) -> Dict[str, torch.Tensor]:
        """Right-padded ids and mask of the joint texts of ``len(prompts)`` joint responses."""
        encoded = [encode_joint(self.tokenizer, p, c, self.max_length) for p, c in zip(prompts, completions)]
        width = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(encoded), width), self.tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, : len(ids)] = torch.as_tensor(ids)
            attention_mask[row, : len(ids)] = 1
        device = next(self.model.parameters()).device
        return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}

    def predicted_rewards(self, prompts: Sequence[Sequence[str]], completions: Sequence[Sequence[str]]) -> torch.Tensor:
        """The model's reward of each joint answer ``completions[j]`` to ``prompts[j]`` (``[J]``)."""
        return self.model(**self.batch(prompts, completions))

    def pair_loss(self, pairs: Sequence) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Bradley–Terry loss of a batch of pairs, with the chosen and rejected scores."""
        prompts = [pair.prompts for pair in pairs] * 2
        completions = [pair.winner_completions for pair in pairs] + [pair.loser_completions for pair in pairs]
        scores = self.predicted_rewards(prompts, completions)
        chosen, rejected = scores[: len(pairs)], scores[len(pairs) :]
        return bradley_terry_loss(chosen, rejected), chosen, rejected

    def accumulate_pair_loss(
        self, pairs: Sequence, micro_batch_size: Optional[int] = None
    ) -> Tuple[float, torch.Tensor, torch.Tensor]:
        """Backward of the Bradley–Terry loss of ``pairs``, in micro-batches of ``micro_batch_size``
        pairs (``None``: one); returns the loss and the detached chosen and rejected scores.

        The loss is a mean over pairs, so ``grad mean_B l = sum_c (|c| / |B|) grad mean_c l`` over
        the micro-batches ``c``: each one's loss is weighted by its share of ``pairs`` before its
        backward, and the gradients sum to the whole batch's.
        """
        size = micro_batch_size or len(pairs)
        total, chosen, rejected = 0.0, [], []
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            loss, chunk_chosen, chunk_rejected = self.pair_loss(chunk)
            (loss * (len(chunk) / len(pairs))).backward()
            total += loss.item() * len(chunk)
            chosen.append(chunk_chosen.detach())
            rejected.append(chunk_rejected.detach())
        return total / len(pairs), torch.cat(chosen), torch.cat(rejected)


class RewardModelOracle:
    """Scores joint responses with a fitted reward model (raw = processed = the model's score).

    Used for collection by iterative MARLHF with ``preference_scoring_reward="reward_model"``.
    """

    def __init__(self, scorer: RewardScorer) -> None:
        self.scorer = scorer

    @torch.no_grad()
    def rewards(
        self, candidates: Sequence[Sequence[str]], prompts: Sequence[str], item
    ) -> Tuple[List[float], List[float]]:
        count = min(len(texts) for texts in candidates)
        if count == 0:
            return [], []
        joint = [[texts[j] for texts in candidates] for j in range(count)]
        values = self.scorer.predicted_rewards([list(prompts)] * count, joint).tolist()
        return values, list(values)

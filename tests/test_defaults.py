"""The embedded defaults: the cache folder and what chose it, the embedded model built once per
cache, and the toy task's items and reward."""

from __future__ import annotations

import pytest

from comlrl_lightning import defaults
from comlrl_lightning.defaults import (
    CACHE_VARIABLE,
    build_char_tokenizer,
    cache_root,
    cache_root_option,
    embedded_model_path,
    toy_items,
    vowel_fraction,
    vowel_length_reward,
)
from comlrl_lightning.errors import ConfigurationError


def test_the_cache_folder_is_the_option_else_the_variable_else_the_home_default(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "from-variable"))
    assert cache_root(tmp_path / "given") == tmp_path / "given" and cache_root_option(tmp_path) == "cache_dir"
    assert cache_root() == tmp_path / "from-variable" and cache_root_option() == CACHE_VARIABLE
    monkeypatch.delenv(CACHE_VARIABLE)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "comlrl_lightning"
    assert cache_root_option() == "the default cache folder"


def test_the_embedded_model_is_built_once_per_cache_and_seed(tmp_path, monkeypatch):
    builds = []
    build = defaults.build_tiny_model
    monkeypatch.setattr(defaults, "build_tiny_model", lambda *a, **k: builds.append(k["seed"]) or build(*a, **k))
    path = embedded_model_path(cache_dir=tmp_path)
    assert path.parent == tmp_path and {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in path.iterdir()
    }
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert embedded_model_path(cache_dir=tmp_path) == path  # found, not built again
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    other = embedded_model_path(seed=1, cache_dir=tmp_path)
    assert other != path and (other / "model.safetensors").read_bytes() != (path / "model.safetensors").read_bytes()
    assert builds == [0, 1]  # the second call for seed 0 found its folder complete
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".embedded-")]  # no staging folder left


def test_the_character_tokenizer_round_trips_the_toy_alphabet():
    tokenizer = build_char_tokenizer()
    text = "topic: abc\nwriter: hi, ok!"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert len(tokenizer.encode(text)) == len(text)  # one token a character


def test_toy_items_are_drawn_from_their_seed():
    items = toy_items(5, seed=3)
    assert items == toy_items(5, seed=3) and items != toy_items(5, seed=4)
    assert toy_items(3, seed=3) == items[:3]
    assert all(set(item) == {"prompt"} and 3 <= len(item["prompt"]) <= 6 for item in items)


def test_the_toy_reward_is_the_writers_vowel_share_less_the_relative_length_gap():
    assert vowel_fraction("") == 0.0 and vowel_fraction("ab") == 0.5 and vowel_fraction("aei") == 1.0
    rewards = vowel_length_reward(["aa", "ab", "", "bcd"], ["xx", "abcd", "", "b"])
    assert rewards == pytest.approx([1.0, 0.5 - 2 / 4, 0.0, 0.0 - 2 / 3])
    assert vowel_length_reward.reward_range == (-1.0, 1.0)
    assert vowel_length_reward(["bbbb"], ["bbbbbbbb"]) == [-0.5]  # the gap is relative to the longer text


def test_a_cache_folder_that_is_a_file_is_named_with_the_option_that_chose_it(tmp_path, monkeypatch):
    (tmp_path / "plain").write_text("")
    with pytest.raises(ConfigurationError, match=r"^cache_dir names .*/plain, which is \(or lies under\) a file"):
        embedded_model_path(cache_dir=tmp_path / "plain")
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "plain"))
    with pytest.raises(ConfigurationError, match=rf"^{CACHE_VARIABLE} names .*/plain, which is"):
        embedded_model_path()

"""The shipped configs: a base per algorithm, and overlays that compose with their base.

``comlrl-lightning fit --config configs/madpo_iter.yaml --config configs/overlays/vllm.yaml``: an
overlay holds only what it changes, and every key it sets reaches the parsed config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
import yaml

from tests.helpers.configs import OVERLAYS, base_of, merged, run_arguments


def leaves(value: Any, path: Tuple = ()) -> Iterator[Tuple[Tuple, Any]]:
    """Every scalar (or empty container) of a YAML value with its path of keys and list positions."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, path + (key,))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from leaves(item, path + (index,))
    else:
        yield path, value


def at(value: Any, path: Tuple) -> Any:
    """The item of ``value`` at ``path``; ``KeyError`` where there is none."""
    for step in path:
        if isinstance(value, list) and isinstance(step, int) and step < len(value):
            value = value[step]
        elif isinstance(value, dict) and step in value:
            value = value[step]
        else:
            raise KeyError(path)
    return value


def test_the_overlays_are_found_and_each_names_an_existing_base():
    assert {"vllm", "fsdp", "centralized", "api_openai"} <= {path.stem for path in OVERLAYS}
    for overlay in OVERLAYS:
        assert base_of(overlay).exists(), f"{overlay.name}: its base {base_of(overlay).name} is not shipped"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda path: path.stem)
def test_an_overlay_repeats_nothing_its_base_says(overlay):
    """An overlay holds its change only: no value equal to the base's at the same place."""
    base = yaml.safe_load(base_of(overlay).read_text(encoding="utf-8"))
    repeated = []
    for path, value in leaves(yaml.safe_load(overlay.read_text(encoding="utf-8"))):
        try:
            same = at(base, path) == value
        except KeyError:
            same = False
        repeated += [".".join(map(str, path))] if same else []
    assert not repeated, f"{overlay.name} repeats its base's {repeated}"


def test_merged_replaces_an_object_of_another_class_whole_and_merges_the_rest():
    base = {"a": {"class_path": "X", "init_args": {"k": 1}}, "b": {"c": 1, "d": [1, 2]}, "e": 3}
    overlay = {"a": {"class_path": "Y", "init_args": {"m": 2}}, "b": {"d": [3]}, "e": None}
    assert merged(base, overlay) == {
        "a": {"class_path": "Y", "init_args": {"m": 2}},
        "b": {"c": 1, "d": [3]},
        "e": None,
    }
    same_class = {"a": {"class_path": "X", "init_args": {"n": 2}}}
    assert merged(base, same_class)["a"] == {"class_path": "X", "init_args": {"k": 1, "n": 2}}


def printed_config(arguments: List[str], capsys) -> Dict[str, Any]:
    """The config the CLI parses from ``arguments`` (``fit --print_config``), as YAML."""
    from comlrl_lightning.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *arguments, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.slow  # parses whole configs: about a second each
def test_every_overlay_composes_with_its_base_and_its_keys_take_effect(capsys):
    bases: Dict[Path, Dict[str, Any]] = {}
    for overlay in OVERLAYS:
        base = base_of(overlay)
        if base not in bases:
            bases[base] = printed_config(["--config", f"configs/{base.name}"], capsys)
        parsed = printed_config(run_arguments(overlay), capsys)
        given = list(leaves(yaml.safe_load(overlay.read_text(encoding="utf-8"))))
        lost = [".".join(map(str, path)) for path, value in given if at(parsed, path) != value]
        assert not lost, f"{overlay.name} over {base.name}: not in the parsed config: {lost}"
        assert parsed != bases[base], f"{overlay.name} changes nothing of {base.name}"

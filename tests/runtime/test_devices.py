"""Device options: ``None``/``auto`` keep the given default, a string is every agent's, a list is one
device for all or one per agent."""

from __future__ import annotations

import pytest

from comlrl_lightning.runtime.devices import resolve_devices
from comlrl_lightning.validation import OptionError


def test_auto_and_none_keep_the_default_and_a_string_is_every_agents():
    assert resolve_devices(None, 2, "agent_devices", ["cpu", "cuda:1"]) == ["cpu", "cuda:1"]
    assert resolve_devices("auto", 2, "agent_devices", ("cpu", "cuda:1")) == ["cpu", "cuda:1"]
    assert resolve_devices("cuda:0", 3, "agent_devices", []) == ["cuda:0"] * 3


def test_a_list_is_one_device_for_all_or_one_per_agent_and_any_other_length_is_named():
    assert resolve_devices(["cuda:0"], 3, "agent_devices", []) == ["cuda:0"] * 3
    assert resolve_devices(["a", "b", "c"], 3, "agent_devices", []) == ["a", "b", "c"]
    with pytest.raises(OptionError, match=r"^comparator.devices length \(2\) must be 1 or 3\.$"):
        resolve_devices(["a", "b"], 3, "comparator.devices", [])

"""Fixtures of the generation tests."""

from __future__ import annotations

import pytest

from comlrl_lightning.generation.vllm import VLLMGenerator


@pytest.fixture
def vllm_generators():
    """Makes generators (``make()``, ``make(Checking)``, ``make(max_model_len=...)``) and closes each when
    the test ends: one generator at a time may hold an engine in a process."""
    made = []

    def make(kind=None, **options):
        made.append((kind or VLLMGenerator)(**options))
        return made[-1]

    yield make
    for generator in made:
        generator.close()

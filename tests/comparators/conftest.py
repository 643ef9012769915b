"""Fixtures of the comparator tests: a team of two embedded agents (``team``; a file may have its own),
and the API comparator tests' fake key in its environment variable (``api_key``; test_api.py, test_api_client.py,
test_api_formats.py and test_response_body.py use it: ``pytestmark = pytest.mark.usefixtures("api_key")``)."""

from __future__ import annotations

import pytest

from comlrl_lightning import Team
from tests.helpers.api_comparator import KEY, KEY_ENV


@pytest.fixture(scope="module")
def team():
    return Team(["embedded", "embedded"])


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)

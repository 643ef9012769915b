"""Fixtures of the API comparator tests (test_api.py, test_api_client.py, test_api_formats.py,
test_response_body.py): a team of two embedded agents, and the fake key in its environment variable
(``pytestmark = pytest.mark.usefixtures("api_key")``)."""

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

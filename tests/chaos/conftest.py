"""Fixtures of the chaos tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Chaos


@pytest.fixture
def site(tmp_path: Any, redis_url: str) -> Iterator[Callable[..., Chaos]]:
    """`site(**settings)`: a chaos site (its own settings module, workers spawned as
    processes) with `scenarios.PROCESS_SETTINGS` and `settings`; closed after the test."""
    from django.db import connection

    with contextlib.ExitStack() as stack:

        def open_site(**overrides: Any) -> Chaos:
            return stack.enter_context(scenarios.chaos_site(
                tmp_path, redis_url, str(connection.settings_dict["NAME"]),
                **{**scenarios.PROCESS_SETTINGS, **overrides}))

        yield open_site

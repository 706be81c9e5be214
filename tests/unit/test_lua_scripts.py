"""The Lua scripts' headers and shared parts, read from their files (no Redis needed).

Every script's first line says whether it is cluster-safe and why; a script that says
"yes" takes every key it touches through KEYS and never builds a key name from ARGV
(Redis Cluster routes a script by its declared keys). A piece of code two scripts share
lives once, in lua/parts/, and `scripts.source` puts it in at load time.
"""

from __future__ import annotations

import re

import pytest

from django_taskrunner.store import scripts

SCRIPTS = sorted(path.stem for path in scripts.SCRIPT_DIR.glob("*.lua"))
PARTS = sorted(path.name for path in scripts.PART_DIR.glob("*.lua"))
HEADER = re.compile(r"\A-- Cluster-safe: (yes|no)\b[:,]? +\w")

# A command and the argument that is its key: redis.call('GET', key) / pcall(redis.call,
# 'XINFO', 'GROUPS', key). TIME has no key; PUBLISH's channel is not a key.
CALL = re.compile(r"redis\.p?call(?:\(|,)\s*'(\w+)'\s*,\s*(?:'(GROUPS|CONSUMERS|STREAM)'\s*,\s*)?"
                  r"([^,)\n]+)")
KEYLESS = {"TIME", "PUBLISH"}


def code_of(text: str) -> str:
    """The script without its comments."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def keys_built_from_argv(text: str) -> list[str]:
    """The key arguments of the script's commands that come from ARGV or are put together
    (`..`), directly or through a variable assigned so."""
    code = code_of(text)
    built = []
    for command, _sub, key in CALL.findall(code):
        key = key.strip()
        if command in KEYLESS or key.startswith("KEYS["):
            continue
        sources = [key]
        if re.fullmatch(r"[A-Za-z_]\w*", key):
            sources = re.findall(rf"\b{key}\s*=(?!=)\s*([^\n]+)", code)
        if any("ARGV" in source or ".." in source for source in sources):
            built.append(key)
    return built


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_says_on_its_first_line_whether_it_is_cluster_safe_and_why(name):
    assert HEADER.match((scripts.SCRIPT_DIR / f"{name}.lua").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_that_says_it_is_cluster_safe_builds_no_key_name_from_argv(name):
    text = scripts.source(name)
    if HEADER.match(text).group(1) == "yes":
        assert keys_built_from_argv(text) == []


def test_the_key_check_sees_a_key_built_from_argv():
    # Guards the test above: fair_feed.lua builds its lists' names, and says "no".
    assert set(keys_built_from_argv(scripts.source("fair_feed"))) == {"list"}
    assert keys_built_from_argv("local k = ARGV[1] .. ':x'\nredis.call('GET', k)") == ["k"]
    assert keys_built_from_argv("redis.call('DEL', ARGV[2])") == ["ARGV[2]"]
    assert keys_built_from_argv("local k = KEYS[2]\nredis.call('GET', k)") == []
    assert keys_built_from_argv("redis.call('PUBLISH', ARGV[3], ARGV[1])") == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_loaded_script_has_every_include_resolved(name):
    assert "-- include:" not in scripts.source(name)


def test_each_shared_part_is_included_by_two_scripts_and_put_in_verbatim():
    for part in PARTS:
        users = [name for name in SCRIPTS
                 if f"-- include: {part}" in (scripts.SCRIPT_DIR / f"{name}.lua").read_text()]
        assert len(users) >= 2, part
        for name in users:
            assert scripts.part(part).rstrip("\n") in scripts.source(name)


def test_the_twins_share_their_pieces_through_the_parts():
    # The loops of the purges and the waiting line of the limits, once each.
    assert PARTS == ["free_keys.lua", "waiting_line.lua"]
    for name in ("purge_stream", "purge_delayed"):
        assert "local function free_keys" not in _file(name)
        assert "free_keys(gone, count, arg, key)" in _file(name)
    for name in ("rate_acquire", "concurrency_acquire"):
        assert "'ZCOUNT', KEYS[2]" not in _file(name)
        assert "wait_in_line(" in _file(name)


def test_the_compact_source_of_an_including_script_holds_the_part_without_comments():
    compact = scripts.compact_source("purge_stream")
    assert "local function free_keys" in compact
    assert "--" not in compact


def _file(name: str) -> str:
    return (scripts.SCRIPT_DIR / f"{name}.lua").read_text(encoding="utf-8")

"""The Lua scripts' headers and shared parts, read from their files (no Redis needed).

Every script's first line says whether it is cluster-safe and why: "yes" when every key
it touches is in one hash slot (Redis Cluster runs a script on the node of its declared
keys; a key of another slot may live on another node, or move there in a resharding).
A script that says "yes" takes its keys through KEYS, or builds a name from an ARGV
prefix that its header shows tagged as its KEYS are; its header names one hash tag. One
that says "no" names the two (or more) it spans. The cluster tests
(tests/cluster/test_lua_slots.py) run the claims on a real cluster. A piece of code two
scripts share lives once, in lua/parts/, and `scripts.source` puts it in at load time.
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
TAG = re.compile(r"\{<\w+>\}")


def header_of(text: str) -> str:
    """The script's leading comment: the claim, what it does, its KEYS and ARGV."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def claim_of(name: str) -> str:
    """"yes", "no", or "yes with" / "yes without" (safe as the store calls it on a cluster)."""
    first = _file(name).splitlines()[0]
    found = re.match(r"-- Cluster-safe: (yes with(?:out)?|yes|no)\b", first)
    assert found, first
    return found.group(1)


def tags_of(name: str) -> set[str]:
    """The hash tags (`{<queue>}`, `{<id>}` ...) the script's header names."""
    return set(TAG.findall(header_of(_file(name))))


def argv_prefixes(text: str) -> set[str]:
    """The ARGV arguments a key name is built from (`ARGV[n] .. x`), directly or through a
    variable assigned so."""
    code = code_of(text)
    built = set()
    for command, _sub, key in CALL.findall(code):
        key = key.strip()
        if command in KEYLESS:
            continue
        sources = [key]
        if re.fullmatch(r"[A-Za-z_]\w*", key):
            sources = re.findall(rf"\b{key}\s*=(?!=)\s*([^\n]+)", code)
        for source in sources:
            built.update(re.findall(r"ARGV\[\d+\](?=\s*\.\.)", source))
    return built


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
def test_a_script_that_says_it_is_cluster_safe_names_one_hash_tag(name):
    # "yes": every key in one slot, so the header names at most one tag ({<queue>}, ...).
    if claim_of(name) == "yes":
        assert len(tags_of(name)) <= 1, tags_of(name)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_that_says_it_is_not_cluster_safe_names_the_slots_it_spans(name):
    # "no" is a claim too: a script whose keys share one tag is safe and says so.
    if claim_of(name) == "no":
        assert len(tags_of(name)) >= 2, tags_of(name)


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_cluster_safe_script_builds_key_names_only_from_a_prefix_tagged_as_its_keys(name):
    # A name built from ARGV is in the KEYS' slot only if the prefix holds the same tag:
    # the header's line for that ARGV shows it (fair_feed.lua, promote_due.lua).
    text = scripts.source(name)
    if claim_of(name) != "yes":
        return
    header = header_of(_file(name))
    for argv in argv_prefixes(text):
        lines = [line for line in header.splitlines() if argv in line]
        assert any(TAG.search(line) for line in lines), (argv, lines)
        assert {tag for line in lines for tag in TAG.findall(line)} == tags_of(name)
    unexplained = [key for key in keys_built_from_argv(text)
                   if not any(argv in source for argv in argv_prefixes(text)
                              for source in [key, *re.findall(
                                  rf"\b{re.escape(key)}\s*=(?!=)\s*([^\n]+)", code_of(text))])]
    assert unexplained == []


def test_the_claim_checks_see_a_wrong_claim():
    # Guards the three tests above on the scripts that gave them cause.
    assert claim_of("record_add") == "no" and tags_of("record_add") == {"{<queue>}", "{<id>}"}
    assert claim_of("fair_feed") == "yes" and tags_of("fair_feed") == {"{<queue>}"}
    assert argv_prefixes(scripts.source("fair_feed")) == {"ARGV[2]"}
    assert argv_prefixes(scripts.source("promote_due")) == {"ARGV[3]"}
    assert claim_of("record_write") == "yes with"


def test_the_key_check_sees_a_key_built_from_argv():
    # Guards the tests above: fair_feed.lua builds its lists' names from ARGV[2].
    assert set(keys_built_from_argv(scripts.source("fair_feed"))) == {"list"}
    assert keys_built_from_argv("local k = ARGV[1] .. ':x'\nredis.call('GET', k)") == ["k"]
    assert keys_built_from_argv("redis.call('DEL', ARGV[2])") == ["ARGV[2]"]
    assert keys_built_from_argv("local k = KEYS[2]\nredis.call('GET', k)") == []
    assert keys_built_from_argv("redis.call('PUBLISH', ARGV[3], ARGV[1])") == []
    assert argv_prefixes("local k = ARGV[1] .. ':x'\nredis.call('GET', k)") == {"ARGV[1]"}
    assert argv_prefixes("redis.call('DEL', ARGV[2])") == set()


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
    # The loops of the purges, the waiting line of the limits, the moves' reply, the
    # server's time, whether a group was delivered an entry, and the record-writing rules
    # (what is final, waking the waiters, a new record, the finished index), once.
    assert PARTS == ["delivered.lua", "finished_index.lua", "free_keys.lua",
                     "moved_entry.lua", "new_record.lua", "now_ms.lua", "record_final.lua",
                     "waiting_line.lua"]
    for name in ("enqueue", "record_or_entry"):
        assert "'last-delivered-id'" not in _file(name)
        assert "-- include: delivered.lua" in _file(name)
    for name in SCRIPTS:  # the server's time in ms, read one way (a rate limit's start
        # member needs TIME's two parts as well)
        assert ("'TIME'" in _file(name)) == (name == "rate_acquire"), name
    for name in ("promote_due", "fair_feed"):  # the reply the records' stream ids come from
        assert "message['tok']" not in _file(name)
        assert "add_moved(reply, " in _file(name)
    for name in ("record_write", "record_cancel", "record_new", "record_sid", "record_watch"):
        assert "succeeded = true" not in _file(name)
        assert "-- include: record_final.lua" in _file(name)
    for name in ("record_write", "record_cancel"):
        assert "'RPUSH'" not in _file(name)
        assert "wake_waiters(" in _file(name)
    for name in ("record_add", "record_new", "enqueue"):
        assert "fields[#fields + 1] = 'sid'" not in _file(name)
        assert "write_new_record(" in _file(name)
    for name in ("record_write", "record_index"):
        assert "ZREMRANGEBYRANK" not in _file(name)
        assert "tend_index(" in _file(name)
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


def test_the_final_statuses_of_the_scripts_are_the_store_s():
    from django_taskrunner.store.records import FINAL_STATUSES
    table = re.search(r"local final = \{([^}]*)\}", scripts.part("record_final.lua")).group(1)
    assert set(re.findall(r"(\w+) = true", table)) == FINAL_STATUSES


@pytest.mark.parametrize("path", sorted([*scripts.SCRIPT_DIR.glob("*.lua"),
                                         *scripts.PART_DIR.glob("*.lua")]),
                         ids=lambda path: path.name)
def test_no_lua_line_is_over_100_characters(path):
    """The Python's limit (ruff's line length) holds for the scripts too."""
    long = [number for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > 100]
    assert long == [], f"{path.name}: lines {long} are over 100 characters"

"""Reading lock keys back for the admin: parsing, page positions, time left, patterns."""

from __future__ import annotations

import pytest

from django_taskrunner.models import UniqueLock
from django_taskrunner.store import keys
from tests.django.admin_helpers import page_module

_locks = page_module(UniqueLock)  # the unique-locks page's module
HeldLock, Position, parse_key, pattern = (_locks.HeldLock, _locks.Position, _locks.parse_key,
                                          _locks.pattern)


def test_a_lock_key_gives_back_its_queue_task_and_key():
    key = keys.unique_key("p", "mail", "tests.testapp.tasks.unique_order", "a:b:c")
    assert parse_key("p", key) == ("mail", "tests.testapp.tasks.unique_order", "a:b:c")
    whole = keys.unique_key("p", "default", "tests.testapp.tasks.unique_whole", "")
    assert parse_key("p", whole) == ("default", "tests.testapp.tasks.unique_whole", "")


def test_an_unregistered_task_name_ends_at_the_first_colon():
    assert parse_key("p", "p:{q}:unique:gone.task:k:1") == ("q", "gone.task", "k:1")


@pytest.mark.parametrize("key", [
    "p:{q}:stream", "p:{q}:id:x}:unique:y", "other:{q}:unique:t:k", "p:{q}:unique:",
    "p:{q}:unique-mode:t:k", "p:{bad queue}:unique:t",
])
def test_keys_that_are_not_locks_of_the_prefix_are_refused(key):
    assert parse_key("p", key) is None


def test_patterns_match_the_prefix_literally():
    assert keys.unique_pattern("a*b") == "a\\*b:{*}:unique:*"
    assert pattern("p", "mail", "x?") == "p:{mail}:unique:*x\\?*"
    assert keys.unique_mode_key("p", "q", "p:{q}:unique:t:k") == "p:{q}:unique-mode:t:k"
    with pytest.raises(ValueError):
        keys.unique_mode_key("p", "q", "p:{r}:unique:t:k")


def test_positions_round_trip_and_bad_ones_mean_the_first_page():
    assert Position.parse(str(Position(1, 1234, 7))) == Position(1, 1234, 7)
    for text in (None, "", "1.2", "a.b.c", "1.2.3.4", "-1.0.0"):
        assert Position.parse(text) == Position()


@pytest.mark.parametrize("ttl_ms, shown", [
    (None, "no TTL"), (4_250, "4.2 s"), (42_000, "42 s"), (125_000, "2 min 05 s"),
    (3 * 3600_000 + 60_000, "3 h 01 min"), (3 * 86400_000, "3 d 0 h"),
])
def test_time_left_reads_well(ttl_ms, shown):
    lock = HeldLock("k", "q", "t", "", "h", "until_finished", True, ttl_ms)
    assert lock.time_left == shown

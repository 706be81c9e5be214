"""Each unique lock has a mode record next to it (for the admin's unique-locks page):
written in the same script as the lock, with its TTL, and gone with the lock, but never
with a newer holder's lock."""

from __future__ import annotations

import pytest

from django_taskrunner import TaskAlreadyDispatched, TaskMessage
from django_taskrunner.core import unique as locks
from django_taskrunner.store import Store, get_store, keys
from tests.internals import holder_value
from tests.testapp.tasks import unique_order

pytestmark = pytest.mark.django_db(transaction=True)


def mode_key_of(message: TaskMessage) -> str:
    return keys.unique_mode_key(get_store().prefix, message.queue, message.lock_key)


def recorded_mode(r, message: TaskMessage) -> bytes | None:
    """The mode in the record (its first line; the policy and the holder's place follow)."""
    value = r.get(mode_key_of(message))
    return None if value is None else value.split(b"\n", 1)[0]


def test_the_mode_record_sits_next_to_the_lock_with_its_ttl(r):
    message = unique_order.dispatch({"order": "m-1"}, unique_mode="until_executed",
                                    unique_for=30)

    assert mode_key_of(message) == message.lock_key.replace("}:unique:", "}:unique-mode:", 1)
    assert recorded_mode(r, message) == b"until_executed"
    assert 29_000 < r.pttl(mode_key_of(message)) <= 30_000
    # The value stays the holder (id and dispatch token)
    assert r.get(message.lock_key) == holder_value(message).encode()


def test_delayed_and_many_dispatches_record_the_mode_too(r):
    later = unique_order.dispatch_delayed({"order": "m-2"}, delay=600, unique_mode="while_locked")
    [many] = unique_order.dispatch_many([{"order": "m-3"}])

    assert recorded_mode(r, later) == b"while_locked"
    assert recorded_mode(r, many) == b"until_finished"


def test_a_refused_dispatch_writes_no_record(r):
    first = unique_order.dispatch({"order": "m-4"})
    r.delete(mode_key_of(first))
    with pytest.raises(TaskAlreadyDispatched):
        unique_order.dispatch({"order": "m-4"}, unique_mode="while_locked")
    assert not r.exists(mode_key_of(first))


def test_the_record_goes_when_the_worker_frees_the_lock(r, run_burst):
    message = unique_order.dispatch({"order": "m-5"})

    run_burst("--queue", "default")

    assert not r.exists(message.lock_key)
    assert not r.exists(mode_key_of(message))


def test_an_older_holders_release_leaves_the_newer_holders_record(r):
    old = unique_order.dispatch({"order": "m-6"}, unique_mode="until_finished")
    r.delete(old.lock_key, mode_key_of(old))  # as if its TTL ran out
    new = unique_order.dispatch({"order": "m-6"}, unique_mode="while_locked")

    locks.release(get_store(), old, locks.SUCCEEDED)

    assert r.get(new.lock_key) == holder_value(new).encode()
    assert recorded_mode(r, new) == b"while_locked"


def test_release_held_frees_only_the_holder_shown(r):
    message = unique_order.dispatch({"order": "m-7"})
    prefix = get_store().prefix

    holder = holder_value(message)

    store = Store(r, prefix)
    assert locks.release_held(store, "default", message.lock_key, "someone-else") == holder
    # The id alone is not the holder: another dispatch of the same id could have it
    assert locks.release_held(store, "default", message.lock_key, message.id) == holder
    assert r.exists(message.lock_key) and r.exists(mode_key_of(message))
    assert locks.release_held(store, "default", message.lock_key, holder) == 1
    assert not r.exists(message.lock_key) and not r.exists(mode_key_of(message))
    assert locks.release_held(store, "default", message.lock_key, holder) == 0

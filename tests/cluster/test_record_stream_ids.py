"""On Redis Cluster a dispatched task's record keeps its message's stream id too, by
every dispatch route, so the admin's task page opened by id alone reads that one entry
and searches nothing: the record lives in the id's slot, not the queue's, and is written
in the round trip after the XADD (or `enqueue.lua`), with the id the XADD gave.

A worker can fetch the message and write the record before that write lands: the
record then keeps the worker's status (never back to "queued"), its TTL and done list.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from django_taskrunner import TaskMessage, dispatch, dispatch_many, dispatch_on_commit, lookup
from django_taskrunner.core import outbox
from django_taskrunner.models import OutboxMessage, Task
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.records import RecordWrite
from tests.django.admin_helpers import logged_in, page_module
from tests.testapp import framework_tasks, tasks

pytestmark = pytest.mark.django_db(transaction=True)

DETAIL = "/admin/django_taskrunner/task/detail/"
NOOP = "tests.testapp.tasks.noop"


def assert_found_without_a_search(message: TaskMessage, stream: str = "default") -> None:
    """Its record names its entry, and the task page's facts read it, nothing searched."""
    record = lookup(message.id)
    assert record is not None and record.status == "queued"
    assert (record.stream_id, record.shard) == (message.stream_id, stream)
    facts = page_module(Task).gather(get_store().browse, stream, message_id=message.id)
    assert (facts.status, facts.stream_id, facts.searched) == ("queued", message.stream_id, 0)


def test_the_client_is_a_cluster_one():
    assert get_store().records.clustered


def test_every_dispatch_route_gives_the_record_its_stream_id(taskrunner_settings):
    taskrunner_settings(SHARDS={"hot": 2})
    plain = dispatch(NOOP, {"n": 1})
    unique = tasks.unique_records.dispatch({"n": 2})
    with_id = dispatch(NOOP, {"n": 3}, task_id="report-7")
    many = dispatch_many(NOOP, [{"n": n} for n in range(4, 7)])
    unique_many = dispatch_many(tasks.unique_order, [{"order": f"o-{n}"} for n in range(3)])
    urgent = dispatch(NOOP, {"n": 8}, priority=7)
    for message in (plain, unique, with_id, *many, *unique_many):
        assert_found_without_a_search(message)
    assert_found_without_a_search(urgent, keys.level_name("default", 7))

    spread = dispatch_many(NOOP, [{"n": n} for n in range(4)], queue="hot")  # one per shard
    assert {lookup(message.id).shard for message in spread} == {"hot#0", "hot#1"}
    for message in spread:
        assert_found_without_a_search(message, lookup(message.id).shard)


def test_a_task_moved_from_the_outbox_has_its_stream_id(r, prefix):
    with transaction.atomic():  # moved at commit
        committed = dispatch_on_commit(NOOP, {"n": 1})
    # A row an outage left behind, moved by a flush.
    left = TaskMessage(id="left-behind", task_name=NOOP, queue="default", payload={"n": 2},
                       dispatched_at_ms=1)
    OutboxMessage.objects.create(message_id=left.id, task_name=NOOP, queue="default",
                                 shard="", lock_ttl_ms=0, body=left.to_json(),
                                 created_at=timezone.now())
    assert outbox.flush_all() == 1

    for message_id in (committed.id, left.id):
        record = lookup(message_id)
        assert record.status == "queued" and record.stream_id
        [(stream_id, fields)] = r.xrange(keys.stream_key(prefix, "default"), record.stream_id,
                                         record.stream_id)
        assert json.loads(fields[keys.ENTRY_FIELD])["id"] == message_id
        facts = page_module(Task).gather(get_store().browse, "default", message_id=message_id)
        assert (facts.status, facts.searched) == ("queued", 0)


def test_a_tasks_backend_task_has_its_stream_id():
    result = framework_tasks.add.enqueue(2, 3)
    record = lookup(result.id)
    assert record.stream_id
    facts = page_module(Task).gather(get_store().browse, "default", message_id=result.id)
    assert (facts.status, facts.stream_id, facts.searched) == ("queued", record.stream_id, 0)


def test_the_task_page_by_id_reads_the_entry_without_a_search():
    message = dispatch(NOOP, {"n": 1})
    dispatch_many(NOOP, [{"n": n} for n in range(2, 300)])  # it is not the newest either
    root = logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106

    response = root.get(DETAIL, {"queue": "default", "id": message.id})

    assert response.status_code == 200
    facts = response.context["facts"]
    assert (facts.status, facts.stream_id, facts.searched) == ("queued", message.stream_id, 0)
    assert message.stream_id in response.content.decode()


# -- a worker's write landing first ------------------------------------------------------


def test_a_record_a_worker_wrote_running_first_is_completed_not_reset():
    store = get_store().records
    queued = RecordWrite("raced-1", (("s", "queued"), ("q", "default"), ("a", "1"),
                                     ("d", "1000"), ("lk", "the-lock"), ("h", "raced-1#t")), 600)
    store.write([RecordWrite("raced-1", (("s", "running"), ("q", "default"), ("a", "1"),
                                         ("w", "worker-1"), ("st", "2000"), ("sid", "5-1"),
                                         ("h", "raced-1#t")), 900)])

    store.save_new([(queued, "5-1")])

    record = lookup("raced-1")
    assert (record.status, record.worker, record.stream_id) == ("running", "worker-1", "5-1")
    assert store.load("raced-1")["lk"] == "the-lock"  # what only the dispatch knew
    assert store.client.ttl(keys.record_key(store.prefix, "raced-1")) > 600  # the worker's


def test_a_record_a_worker_finished_first_stays_finished_and_wakes_its_waiter():
    store = get_store().records
    store.watch("raced-2")  # no record yet: nothing is marked
    store.write([RecordWrite("raced-2", (("s", "running"), ("q", "default"), ("a", "1")),
                             900)])
    assert store.watch("raced-2")["s"] == "running"  # a waiter is waiting now
    store.write([RecordWrite("raced-2", (("s", "succeeded"), ("q", "default"), ("a", "1"),
                                         ("r", "4"), ("f", "3000")), 86400, final=True)])

    store.save_new([(RecordWrite("raced-2", (("s", "queued"), ("q", "default"), ("a", "1"),
                                             ("d", "1000")), 600), "6-1")])

    record = lookup("raced-2")
    assert (record.status, record.result, record.stream_id) == ("succeeded", 4, None)
    assert record.dispatched_at is not None  # the dispatch time the final write leaves out
    assert store.client.ttl(keys.record_key(store.prefix, "raced-2")) > 3600
    assert store.wait_done("raced-2", 0.1)  # its done list is still there


def test_the_record_of_an_earlier_dispatch_of_the_task_id_is_replaced():
    store = get_store().records
    store.write([RecordWrite("report", (("s", "succeeded"), ("q", "default"), ("a", "1"),
                                        ("r", "1"), ("h", "report#old")), 86400, final=True)])
    store.client.rpush(keys.record_done_key(store.prefix, "report"), "1")

    store.save_new([(RecordWrite("report", (("s", "queued"), ("q", "default"), ("a", "1"),
                                            ("h", "report#new")), 600), "7-1")])

    record = lookup("report")
    assert (record.status, record.result, record.stream_id) == ("queued", None, "7-1")
    assert not store.client.exists(keys.record_done_key(store.prefix, "report"))
    assert store.client.ttl(keys.record_key(store.prefix, "report")) <= 600


def test_a_delayed_record_gets_no_stream_id():
    store = get_store().records
    store.save_new([(RecordWrite("later", (("s", "delayed"), ("q", "default"), ("a", "1")),
                                 600), "delayed")])
    record = lookup("later")
    assert (record.status, record.stream_id) == ("delayed", None)

"""Periodic tasks fire each occurrence once: across two leaders, after a gap in which
no worker ran (once, not once per missed tick), from code and from PeriodicTask rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from django_taskrunner import InvalidTaskOptions, task
from django_taskrunner.models import PeriodicTask
from django_taskrunner.scheduling.periodic import PeriodicRunner
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.streams import Broker
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.internals import registered_names, unregister_task
from tests.testapp.tasks import runs_key

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = 60_000
T0 = 1_800_000_000_000  # a whole minute, in epoch ms


@pytest.fixture
def temporary_task():
    """Declare tasks for one test only."""
    names: list[str] = []

    def declare(name: str, **options):
        def record(ctx, payload):
            from django_taskrunner import get_redis

            get_redis().hincrby(runs_key(), f"{name}:{ctx.id}", 1)

        names.append(name)
        return task(name=name, takes_context=True, **options)(record)

    yield declare
    for name in names:
        unregister_task(name)


def fired(r, broker: Broker, queue: str = "default") -> list[dict]:
    return [json.loads(fields[b"m"]) for _, fields in r.xrange(broker.stream(queue))]


def test_an_interval_task_fires_once_per_occurrence(r, temporary_task):
    temporary_task("tests.every_minute", schedule=60)
    broker = get_store().streams
    runner = PeriodicRunner(broker, with_rows=False)

    runner.load(T0 + 5_000)  # first seen: nothing from before fires
    assert runner.run_due(T0 + 30_000) == T0 + MINUTE
    assert fired(r, broker) == []

    assert runner.run_due(T0 + MINUTE) == T0 + 2 * MINUTE
    assert runner.run_due(T0 + MINUTE + 10) == T0 + 2 * MINUTE  # same occurrence: no refire
    runner.run_due(T0 + 2 * MINUTE + 3)

    messages = fired(r, broker)
    assert [m["task"] for m in messages] == ["tests.every_minute"] * 2
    assert len({m["id"] for m in messages}) == 2


def test_missed_occurrences_fire_once_at_start_up_not_once_each(r, temporary_task):
    temporary_task("tests.every_minute", schedule=60)
    broker = get_store().streams
    PeriodicRunner(broker, with_rows=False).load(T0)  # a worker saw it at T0, then all stopped

    # Ten minutes later a worker starts again
    runner = PeriodicRunner(broker, with_rows=False)
    runner.load(T0 + 10 * MINUTE + 30_000)
    next_ms = runner.run_due(T0 + 10 * MINUTE + 30_000)

    assert len(fired(r, broker)) == 1  # the latest missed occurrence, once
    assert next_ms == T0 + 11 * MINUTE
    mark = r.hget(keys.periodic_key(broker.prefix, "default"), "task:tests.every_minute")
    assert int(mark) == T0 + 10 * MINUTE


def test_two_leaders_at_once_fire_an_occurrence_once(r, temporary_task):
    temporary_task("tests.every_minute", schedule=60)
    broker = get_store().streams
    first, second = PeriodicRunner(broker, with_rows=False), PeriodicRunner(broker, with_rows=False)
    first.load(T0)
    second.load(T0)

    first.run_due(T0 + MINUTE)
    second.run_due(T0 + MINUTE + 5)
    second.run_due(T0 + 2 * MINUTE)
    first.run_due(T0 + 2 * MINUTE + 1)

    assert len(fired(r, broker)) == 2


def test_a_cron_task_fires_on_its_times_in_the_site_time_zone(r, temporary_task, settings):
    settings.TIME_ZONE = "Asia/Kolkata"  # +05:30: a UTC-based parser would be off by 30 min
    temporary_task("tests.at_nine", cron="0 9 * * *", queue="other")
    broker = get_store().streams
    start = int(datetime(2030, 1, 1, 0, 0, tzinfo=UTC).timestamp() * 1000)
    nine_ist = int(datetime(2030, 1, 1, 3, 30, tzinfo=UTC).timestamp() * 1000)
    runner = PeriodicRunner(broker, with_rows=False)

    runner.load(start)
    assert runner.run_due(start) == nine_ist
    runner.run_due(nine_ist)

    assert [m["task"] for m in fired(r, broker, "other")] == ["tests.at_nine"]


def test_a_bad_cron_expression_fails_when_the_task_is_declared():
    with pytest.raises(InvalidTaskOptions, match="bad cron expression"):
        task(name="tests.bad_cron", cron="every monday")(lambda payload: None)
    with pytest.raises(InvalidTaskOptions, match="not both"):
        task(name="tests.both", cron="* * * * *", schedule=5)(lambda payload: None)
    assert "tests.bad_cron" not in registered_names()


def test_a_periodic_task_fires_once_per_occurrence_with_two_workers_and_a_hand_over(
        r, temporary_task):
    temporary_task("tests.every_second", schedule=1)

    def runs() -> dict[str, int]:
        """Runs of each occurrence that ran so far."""
        return {key: int(n) for key, n in
                ((k.decode(), v) for k, v in r.hgetall(runs_key()).items())
                if key.startswith("tests.every_second:")}

    with running_worker(consumer="a", lease=1) as a, running_worker(consumer="b", lease=1) as b:
        wait_for(lambda: leads(a) or leads(b), 10)
        wait_for(lambda: len(runs()) >= 2, 20)  # occurrences fired by the first leader
        leader, other = (a, b) if leads(a) else (b, a)
        fired_before = len(runs())
        leader.scheduling.stop()  # resigns: the other worker takes over mid-run
        wait_for(lambda: leads(other), 10)
        wait_for(lambda: len(runs()) >= fired_before + 2, 20)  # and by the second

    assert set(runs().values()) == {1}, runs()  # each occurrence ran once


def test_periodic_task_rows_fire_once_with_two_worker_processes(r, spawn_worker):
    row = PeriodicTask.objects.create(name="probe", task_name="tests.testapp.tasks.count_by_id",
                                      interval=1, payload={"hello": "world"})
    lease = {"TASKRUNNER_TEST_SETTINGS": '{"LEADER_LEASE": 1}'}
    spawn_worker("--consumer-name", "w1", **lease)
    spawn_worker("--consumer-name", "w2", **lease)

    def counts() -> dict[str, int]:
        return {k.decode(): int(v) for k, v in r.hgetall(runs_key()).items()}

    wait_for(lambda: len(counts()) >= 3, 20, 0.1)
    # a wrong second run of those occurrences would show by the time a later one has fired
    fired = len(counts())
    wait_for(lambda: len(counts()) > fired, 20, 0.1)
    assert set(counts().values()) == {1}
    row.refresh_from_db()
    assert row.last_run_at is not None and row.next_run_at > row.last_run_at


def test_periodic_task_rows_are_validated_by_clean():
    row = PeriodicTask(name="x", task_name="no.such.task", cron="61 * * * *", payload=None)
    with pytest.raises(ValidationError) as error:
        row.full_clean()
    assert set(error.value.message_dict) >= {"task_name", "cron"}

    both = PeriodicTask(name="y", task_name="tests.testapp.tasks.noop", cron="* * * * *",
                        interval=5)
    with pytest.raises(ValidationError, match="not both"):
        both.full_clean()

    good = PeriodicTask(name="z", task_name="tests.testapp.tasks.noop", cron="*/5 * * * *",
                        queue="emails", payload={"a": [1, 2]})
    good.full_clean()


@pytest.mark.parametrize("spoil", ["marks of another type", "a mark that is no number",
                                   "a stream of another type"])
def test_a_spoiled_key_skips_its_own_schedule_and_the_others_fire(r, temporary_task, spoil,
                                                                   caplog):
    temporary_task("tests.every_minute", schedule=60)  # queue default
    temporary_task("tests.spoiled_every_minute", schedule=60, queue="other")
    broker = get_store().streams
    marks = keys.periodic_key(broker.prefix, "other")
    if spoil == "marks of another type":
        r.set(marks, "not a hash")
    elif spoil == "a mark that is no number":
        r.hset(marks, "task:tests.spoiled_every_minute", "yesterday")
    else:
        r.set(broker.stream("other"), "not a stream")
    runner = PeriodicRunner(broker, with_rows=False)

    runner.load(T0 + 5_000)
    runner.run_due(T0 + MINUTE)
    runner.run_due(T0 + 2 * MINUTE)

    assert [m["task"] for m in fired(r, broker)] == ["tests.every_minute"] * 2
    assert caplog.text.count("periodic task 'task:tests.spoiled_every_minute' is skipped") == 1


def test_a_spoiled_periodic_key_does_not_stop_delayed_tasks(r, temporary_task):
    """The scheduler read every schedule's mark before moving due tasks: one marks key of
    another type failed that read, and no delayed task of any queue moved again."""
    from django_taskrunner import dispatch_delayed
    from tests.testapp.tasks import count_by_id

    temporary_task("tests.spoiled_every_minute", schedule=60, queue="other")
    r.set(keys.periodic_key(get_store().prefix, "other"), "not a hash")
    message = dispatch_delayed(count_by_id, {"n": 1}, delay=0.2)
    with running_worker("default", "other", lease=1):
        wait_for(lambda: r.hget(runs_key(), f"count_by_id:{message.id}") == b"1", 20)

"""Settings and wire fields added for reliability: defaults, checks, tolerant decoding."""

from __future__ import annotations

import json

from django_taskrunner import TaskMessage
from django_taskrunner.conf import get_settings, validate_settings
from django_taskrunner.runner import build_worker
from django_taskrunner.store import get_store
from django_taskrunner.worker.reclaim import dead_consumer_timeout
from django_taskrunner.worker.settings import worker_settings


def test_dead_consumer_timeout_defaults_to_an_hour_or_ten_reservation_timeouts(
    taskrunner_settings,
):
    assert get_settings().DEAD_CONSUMER_TIMEOUT is None
    assert dead_consumer_timeout(None, 30) == 3600
    assert dead_consumer_timeout(None, 900) == 9000
    assert dead_consumer_timeout(120, 900) == 120
    taskrunner_settings(RESERVATION_TIMEOUT=900)
    settings = worker_settings(["default"], concurrency=1, batch_size=1, block_ms=100,
                               shutdown_timeout=1)
    assert settings.dead_consumer_timeout == 9000
    assert build_worker(get_store().streams, settings).reclaimer.dead_consumer_ms == 9_000_000


def test_time_limit_grace_defaults_to_five_seconds():
    assert get_settings().TIME_LIMIT_GRACE == 5


def test_bad_reliability_settings_are_check_errors():
    assert validate_settings({"DEAD_CONSUMER_TIMEOUT": None}) == []
    assert validate_settings({"TIME_LIMIT_GRACE": 0}) == []
    for raw in ({"DEAD_CONSUMER_TIMEOUT": 0}, {"DEAD_CONSUMER_TIMEOUT": "1h"},
                {"TIME_LIMIT_GRACE": -1}, {"TIME_LIMIT_GRACE": None}):
        [error] = validate_settings(raw)
        assert error.id == "taskrunner.E002"


def wire(**fields: object) -> str:
    return json.dumps({"v": 1, "id": "a", "task": "t", "payload": None, **fields})


def test_the_reservation_timeout_travels_as_rt_in_milliseconds():
    message = TaskMessage(id="a", task_name="t", queue="q", payload=1,
                          reservation_timeout_ms=30000)
    assert json.loads(message.to_json())["rt"] == 30000
    assert TaskMessage.from_json(message.to_json()).reservation_timeout_ms == 30000
    assert "rt" not in json.loads(TaskMessage(id="a", task_name="t", queue="q",
                                              payload=1).to_json())


def test_a_bad_or_missing_rt_falls_back_to_the_workers_default():
    for bad in ("soon", -5, 0, True, None, [1]):
        assert TaskMessage.from_json(wire(rt=bad)).reservation_timeout_ms is None
    assert TaskMessage.from_json(wire()).reservation_timeout_ms is None
    assert TaskMessage.from_json(wire(rt=1500.7)).reservation_timeout_ms == 1500

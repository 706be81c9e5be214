"""The running set's attempts: the cancel event the task's context and the watchdog share."""

from __future__ import annotations

import threading

from django_taskrunner import Task, TaskMessage
from django_taskrunner.worker.running import RunningSet


def start_attempt():
    task = Task(fn=lambda payload: None, name="t")
    message = TaskMessage(id="m1", task_name="t", queue="default", payload=None)
    return RunningSet().start(task, message, 300.0)


def test_an_attempt_has_one_cancel_event_which_request_cancel_sets():
    attempt = start_attempt()
    seen_by_task = attempt.cancel
    assert attempt.cancel is seen_by_task and not seen_by_task.is_set()
    attempt.request_cancel()
    assert seen_by_task.is_set()


def test_threads_asking_for_the_cancel_event_at_once_get_the_same_one():
    attempt = start_attempt()
    seen: list[threading.Event] = []
    threads = [threading.Thread(target=lambda: seen.append(attempt.cancel)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(event) for event in seen}) == 1


def test_a_cancel_requested_before_anyone_asked_is_seen_later():
    attempt = start_attempt()
    attempt.request_cancel()
    assert attempt.cancel.is_set()

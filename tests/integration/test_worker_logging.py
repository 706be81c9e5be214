"""What the worker logs at each verbosity, and that it respects the project's LOGGING."""

from __future__ import annotations

import logging
import re

import pytest
from django.core.management import call_command

from django_taskrunner.management.commands.runtasks import configure_logging
from tests.testapp.tasks import always_fails, noop

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = re.compile(r"task=tests\.testapp\.tasks\.noop id=\d+-\d+@default queue=default "
                      r"attempt=1 duration=\d+\.\d{3}s outcome=succeeded")


def burst_output(spawn_worker, *args: str, **env: str) -> str:
    """The whole output of a real `runtasks --burst` process."""
    worker = spawn_worker("--burst", "--queue", "default", *args, **env)
    output = worker.communicate(timeout=60)[0].decode()
    assert worker.returncode == 0, output
    return output


def test_verbosity_0_prints_no_info_line_but_the_failure_with_its_traceback(spawn_worker):
    noop.dispatch({"n": 1})
    always_fails.dispatch({"n": 2})
    output = burst_output(spawn_worker, "-v", "0")
    assert " INFO " not in output and "started" not in output, output
    assert "outcome=" not in output
    assert "task failed for good: task=tests.testapp.tasks.always_fails" in output
    assert "Traceback (most recent call last)" in output
    assert "ValueError: boom {'n': 2}" in output


def test_verbosity_1_prints_the_worker_lines_and_no_task_lines(spawn_worker):
    noop.dispatch({"n": 1})
    output = burst_output(spawn_worker)
    assert "started: queues=default" in output
    assert "burst: every queue is empty, stopping" in output
    assert "outcome=" not in output, output


def test_verbosity_2_prints_one_line_per_finished_task(spawn_worker):
    for n in range(3):
        noop.dispatch({"n": n})
    always_fails.dispatch({"n": "x"})
    output = burst_output(spawn_worker, "-v", "2")
    assert len(FINISHED.findall(output)) == 3, output
    assert len(re.findall(r"tasks\.always_fails id=\S+ queue=default attempt=\d "
                          r"duration=\S+ outcome=retried error=ValueError", output)) == 2, output
    assert re.search(r"always_fails id=\S+ queue=default attempt=3 duration=\S+ "
                     r"outcome=failed error=ValueError", output), output


def test_a_level_set_in_logging_is_respected_and_log_level_overrides_it(spawn_worker):
    # The project's LOGGING sets django_taskrunner to WARNING: -v 1 keeps it
    noop.dispatch({"n": 1})
    quiet = burst_output(spawn_worker, TASKRUNNER_TEST_LOG_LEVEL="WARNING")
    assert "started" not in quiet, quiet
    # --log-level asks for more, for this run
    noop.dispatch({"n": 2})
    loud = burst_output(spawn_worker, "--log-level", "info",
                        TASKRUNNER_TEST_LOG_LEVEL="WARNING")
    assert "started: queues=default" in loud, loud
    # and -v 2 shows the task lines through the project's handler all the same
    noop.dispatch({"n": 3})
    tasks = burst_output(spawn_worker, "-v", "2", TASKRUNNER_TEST_LOG_LEVEL="WARNING")
    assert FINISHED.search(tasks) and "started" not in tasks, tasks


def records(caplog, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == name]


def test_caplog_sees_task_lines_with_their_fields_at_verbosity_2(caplog):
    message = noop.dispatch({"n": 1})
    call_command("runtasks", "--burst", "-v", "2")
    [line] = records(caplog, "django_taskrunner.tasks")
    assert line.levelno == logging.INFO
    assert (line.task_name, line.task_id, line.queue, line.outcome) == (
        "tests.testapp.tasks.noop", message.id, "default", "succeeded")
    assert line.duration >= 0


def test_no_task_line_at_verbosity_1(caplog):
    noop.dispatch({"n": 1})
    call_command("runtasks", "--burst")
    assert records(caplog, "django_taskrunner.tasks") == []
    assert any("started" in r.getMessage() for r in records(caplog, "django_taskrunner.worker"
                                                                     ".worker"))


def test_retries_warn_with_the_reason_and_the_failure_carries_its_exception(caplog):
    message = always_fails.dispatch({"n": 1})
    call_command("runtasks", "--burst", "-v", "0")
    retries = records(caplog, "django_taskrunner.worker.steps")
    assert [r.levelno for r in retries] == [logging.WARNING] * 2
    assert all(f"id={message.id} queue=default" in r.getMessage() for r in retries)
    assert "raised ValueError: boom {'n': 1}; retry 1 of 2" in retries[0].getMessage()
    assert retries[0].task_id == message.id
    [failed] = records(caplog, "django_taskrunner.worker.failures")
    assert failed.levelno == logging.ERROR
    assert failed.exc_info is not None and isinstance(failed.exc_info[1], ValueError)
    assert failed.exc_info[2] is not None  # the traceback, for log files and Sentry
    assert (failed.task_name, failed.task_id, failed.queue) == (
        "tests.testapp.tasks.always_fails", message.id, "default")


@pytest.fixture
def fresh_loggers():
    """The package's loggers without levels (as in a project without LOGGING for them)."""
    loggers = [logging.getLogger(name) for name in ("django_taskrunner",
                                                     "django_taskrunner.tasks")]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.NOTSET)
    yield loggers
    for logger, level in zip(loggers, saved, strict=True):
        logger.setLevel(level)


@pytest.mark.parametrize(("verbosity", "log_level", "package", "tasks"), [
    (0, None, logging.WARNING, logging.WARNING),
    (1, None, logging.INFO, logging.WARNING),
    (2, None, logging.INFO, logging.INFO),
    (3, None, logging.DEBUG, logging.INFO),
    (1, "DEBUG", logging.DEBUG, logging.DEBUG),
    (0, "ERROR", logging.ERROR, logging.ERROR),
])
def test_levels_per_option_without_logging(fresh_loggers, verbosity, log_level, package, tasks):
    package_logger, tasks_logger = fresh_loggers
    restore = configure_logging(verbosity, log_level)
    try:
        assert package_logger.getEffectiveLevel() == package
        assert tasks_logger.getEffectiveLevel() == tasks
    finally:
        restore()
    assert package_logger.level == tasks_logger.level == logging.NOTSET


def test_levels_set_in_logging_are_kept_at_verbosity_1(fresh_loggers):
    package_logger, tasks_logger = fresh_loggers
    package_logger.setLevel(logging.ERROR)
    tasks_logger.setLevel(logging.INFO)  # the project wants every task line
    restore = configure_logging(1, None)
    assert (package_logger.level, tasks_logger.level) == (logging.ERROR, logging.INFO)
    restore()
    assert (package_logger.level, tasks_logger.level) == (logging.ERROR, logging.INFO)

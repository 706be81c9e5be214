"""`runtasks --processes` and the child limits: bad values are a CommandError before
anything starts (no Redis connection, no child process)."""

from __future__ import annotations

import os

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "", "1025"])
def test_a_bad_process_count_is_refused(value: str) -> None:
    with pytest.raises(CommandError, match="--processes"):
        call_command("runtasks", "--processes", value, "--burst")


@pytest.mark.parametrize("option", ["--max-tasks-per-child", "--max-memory-per-child"])
@pytest.mark.parametrize("value", ["0", "-5", "lots"])
def test_a_bad_child_limit_is_refused(option: str, value: str) -> None:
    with pytest.raises(CommandError, match=option):
        call_command("runtasks", option, value, "--burst")


def test_auto_on_a_machine_whose_cpu_count_is_unknown_is_refused(monkeypatch) -> None:
    def unknown(pid: int) -> set[int]:
        raise OSError("no affinity here")

    monkeypatch.setattr(os, "sched_getaffinity", unknown, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    with pytest.raises(CommandError, match="number of CPUs of this machine is unknown"):
        call_command("runtasks", "--processes", "auto", "--burst")


def test_a_memory_limit_below_a_childs_start_up_size_is_refused() -> None:
    with pytest.raises(CommandError, match="below the size a worker process starts at"):
        call_command("runtasks", "--processes", "2", "--max-memory-per-child", "1", "--burst")


def test_the_processes_setting_is_refused_the_same_way(taskrunner_settings) -> None:
    taskrunner_settings(MAX_MEMORY_PER_CHILD=1)
    with pytest.raises(CommandError, match="below the size"):
        call_command("runtasks", "--burst")

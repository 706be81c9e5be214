"""`runtasks` refuses numbers it cannot use, as the settings they stand in for do."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize("args, words", [
    (["--concurrency", "nan"], "'nan' is not an integer"),
    (["--concurrency", "inf"], "'inf' is not an integer"),
    (["--batch-size", "1e400"], "'1e400' is not an integer"),
    (["--concurrency", "1000000"], "at most 1024"),
    (["--min-workers", "2000"], "at most 1024"),
    (["--max-workers", "99999999999999999999"], "at most 1024"),
    (["--batch-size", "10001"], "at most 10000"),
    (["--metrics-port", "70000"], "at most 65535"),
    (["--prefetch-ms", "-1"], "from 0 to 60000"),
    (["--prefetch-ms", "60001"], "from 0 to 60000"),
    (["--prefetch-ms", "2.5"], "'2.5' is not an integer"),
])
def test_runtasks_refuses_numbers_out_of_range(args, words):
    with pytest.raises(CommandError, match=words):
        call_command("runtasks", "--burst", *args)


def test_runtasks_passes_prefetch_ms_to_the_worker(taskrunner_settings):
    from django_taskrunner.management.commands.runtasks import Command

    taskrunner_settings(PREFETCH_MS=50)
    assert Command._worker_settings(["default"], {}).prefetch_ms == 50
    assert Command._worker_settings(["default"], {"prefetch_ms": 0}).prefetch_ms == 0

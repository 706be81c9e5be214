"""streaQ as its docs set it up: a `Worker` with its defaults (16 tasks side by side,
results kept 5 minutes, pickle), run with `streaq run ... --workers 1` (one process).
The task is `silent`: streaQ logs two INFO lines per task otherwise, where every other
system here logs warnings only."""

from __future__ import annotations

import os
from typing import Any

from benchlib.job import job as run_job
from streaq import Worker

worker = Worker(redis_url=os.environ["BENCH_REDIS_URL"], queue_name="bench")


@worker.task(name="bench.job", silent=True)
async def job(payload: dict[str, Any]) -> None:
    """The same job as every system's (one INCR, from a sync client), as an `async def`."""
    run_job(payload)

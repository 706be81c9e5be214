"""The bounds of names and numbers the package accepts, wherever they come from: a
setting, a task option, a `runtasks` argument, an admin form or a dispatch.

Their own module, below `checks` (which reports settings past them) and every other user,
so a task option or the worker does not import the system checks for a constant.
"""

from __future__ import annotations

import re

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")
# A year. A longer time setting is a mistake, and far longer ones overflow what Redis
# (milliseconds in a signed 64-bit integer) and thread timeouts accept.
MAX_SECONDS = 365 * 24 * 3600
PREFETCH_MS_MAX = 60_000  # a read grown to a minute of work is no longer a prefetch
# Thread pools and reads larger than these are typing mistakes, not configurations.
MAX_POOL = 1024
MAX_BATCH = 10_000
MAX_PROCESSES = 1024  # worker processes of one `runtasks`
MAX_TASKS_PER_CHILD = 1_000_000_000
MAX_MEMORY_MB = 1024 * 1024  # a terabyte: anything more is a typing mistake

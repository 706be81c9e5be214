"""The floor of bench/orm.py: the ORM job N times in one loop, nothing else.

`python -m benchlib.orm_loop N` sets Django up and runs `orm_job({"i": i})` for i in
0..N-1: no queue, no Redis, no connection hygiene.
"""

from __future__ import annotations

import sys

from benchlib.orm_job import model, orm_job


def main(n: int) -> None:
    model()  # Django set up before the first row, as a worker is before its first task
    for i in range(n):
        orm_job({"i": i})


if __name__ == "__main__":
    main(int(sys.argv[1]))

"""The policies one delivery goes through, as small steps the executor calls in order.

A step is a function `step(executor, run) -> bool`. True lets the next step run; False
means the step settled the delivery (recorded it, acked it, or requeued it) and the rest
is skipped. The executor's two lists (`BEFORE_RUN`, `AFTER_RUN` in `executor.py`) are the
whole order; a new policy (a rate limit, a cancellation) is one new module here and one
new line there.
"""

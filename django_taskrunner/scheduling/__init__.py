"""Time-driven work: the leader's scheduler, its election, and periodic tasks."""

"""The worker process: fetch, run and acknowledge messages, and the policies of a run."""

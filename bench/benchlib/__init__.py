"""Helpers of the benchmark scripts in bench/: processes, systems, the job, the report."""

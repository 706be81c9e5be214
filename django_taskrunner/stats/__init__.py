"""Figures about queues and workers: recording, storing, reading, health, metrics."""

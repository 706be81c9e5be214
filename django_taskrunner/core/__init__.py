"""The core: what a task is, and how it is queued.

Task options and the registry, the message, dispatch, unique locks, due times.
"""

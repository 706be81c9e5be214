"""Settings that cannot load in a child process of `runtasks --processes` (a stand-in for
an import error in a deploy): the supervisor must stop with an error, not spin."""

import multiprocessing

from tests.chaos.settings import *  # noqa: F403

if multiprocessing.parent_process() is not None:
    raise ImportError("these test settings refuse to load in a child process")

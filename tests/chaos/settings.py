"""Settings of `runtasks` processes started by the chaos suite: the test settings, with
TASKRUNNER overrides from the environment (JSON in TASKRUNNER_TEST_OVERRIDES)."""

import json
import os

from tests.settings import *  # noqa: F403

_overrides = json.loads(os.environ.get("TASKRUNNER_TEST_OVERRIDES") or "{}")
TASKRUNNER = {**TASKRUNNER, **_overrides}  # noqa: F405

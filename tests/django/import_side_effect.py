"""A module with an import-time side effect: the shim must never import it from a message.

It is outside every installed app and nothing imports it, so a forged message naming it
is the only way it could be imported.
"""

import os
from pathlib import Path

Path(os.environ["TASKRUNNER_TEST_SIDE_EFFECT_FILE"]).write_text("imported")

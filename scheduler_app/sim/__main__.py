"""``python -m scheduler_app.sim SCENARIO --out RESULT.json``: the simulator without Django."""

import sys

from .cli import main

sys.exit(main(sys.argv[1:]))

"""``python -m scheduler_app.agent``: the node agent without Django (see ``cli``)."""

import sys

from .cli import main

sys.exit(main())

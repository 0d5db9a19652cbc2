"""``python -m gpuq``: the same as the ``gpuq`` command."""

import sys

from .cli import main

sys.exit(main())

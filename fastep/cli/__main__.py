"""``python -m fastep.cli``: the ``fastep`` command."""
import sys

from . import main

sys.exit(main())

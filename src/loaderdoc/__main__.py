"""``python -m loaderdoc``."""

import sys

from loaderdoc.cli import main

sys.exit(main())

"""``python -m obsbus.report RUN_DIR [-o FILE]``."""

import sys

from obsbus.report import main

sys.exit(main())

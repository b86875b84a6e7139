"""Entry point of the desktop bundle: the same `gradviz` command as the installed one."""

import sys

from gradviz.cli import main

sys.exit(main())

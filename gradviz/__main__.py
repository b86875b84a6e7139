import sys

from gradviz.cli import main

sys.exit(main())

"""`python -m hugelab.cli ARGS`, the same as `hugelab ARGS`."""

import sys

from hugelab.cli.main import main

sys.exit(main())

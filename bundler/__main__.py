"""`python -m bundler` is the `bundler` console script."""

import sys

from bundler.cli import main

sys.exit(main())

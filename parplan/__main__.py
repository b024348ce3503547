"""``python -m parplan ...``: the same command line as the ``parplan`` script."""

from parplan.cli import main

raise SystemExit(main())

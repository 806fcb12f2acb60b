"""``python -m logbus`` is the ``logbus`` command."""

from .cli import main

raise SystemExit(main())

"""``python -m blockspec``: the same as the ``blockspec`` command."""

from .cli import main

raise SystemExit(main())

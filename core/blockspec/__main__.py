"""``python -m blockspec``: the same as the ``blockspec`` command."""

from blockspec.cli import main

raise SystemExit(main())

"""`python -m connectors ...`: see connectors/cli.py."""

from connectors.cli import main

raise SystemExit(main())

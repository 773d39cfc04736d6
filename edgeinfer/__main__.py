"""``python -m edgeinfer`` runs the command line."""
import sys

from edgeinfer.cli import main

sys.exit(main())

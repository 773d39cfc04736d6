#!/usr/bin/env python3
"""Fetch the real models the tests use into the models folder (idempotent).

    python scripts/fetch_models.py            # every model in the manifest
    python scripts/fetch_models.py gemma3-270m

The folder is ``$EDGEINFER_MODELS_DIR`` or the platformdirs default (see ``edgeinfer models``).
"""
from __future__ import annotations

import argparse
import sys

from edgeinfer.cli.output import print_error
from edgeinfer.cli.pull import RichReporter
from edgeinfer.errors import EdgeInferError
from edgeinfer.catalog import known_names
from edgeinfer.pull import pull_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to fetch (default: all known models)")
    args = parser.parse_args(argv)
    reporter = RichReporter()
    try:
        for name in args.names or known_names():
            pull_model(name, reporter=reporter)
    except (EdgeInferError, OSError) as exc:
        print_error(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

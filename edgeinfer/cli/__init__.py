"""``edgeinfer`` command line: run, chat, info, bench, pull, models, serve, quantize, convert,
perplexity, imatrix, devices, embed, rerank.

Every failure a user can cause (a bad path, an unknown model, a broken file, no network) ends as
one ``error: ...`` line on stderr and exit status 1; Ctrl-C exits with 130. Tracebacks are shown
only with ``--verbose`` or ``EDGEINFER_DEBUG=1``.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from edgeinfer.cli.args import build_parser, parse_command_line
from edgeinfer.cli.output import print_error, stderr
from edgeinfer.cli.wording import in_flags
from edgeinfer.errors import EdgeInferError

# command -> "module:function" in edgeinfer.cli; the function takes the parsed arguments and
# returns the exit code. Modules are imported on use, so `edgeinfer pull` does not load the
# model runtime.
COMMANDS = {
    "run": "run:main",
    "chat": "chat:main",
    "info": "info:main",
    "bench": "bench:main",
    "pull": "pull:main",
    "models": "pull:list_models",
    "serve": "serve:main",
    "quantize": "quantize:main",
    "convert": "convert:main",
    "perplexity": "perplexity:main",
    "imatrix": "imatrix:main",
    "devices": "devices:main",
    "embed": "embed:main",
    "rerank": "rerank:main",
}


def _debug(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "verbose", False)) or os.environ.get("EDGEINFER_DEBUG") == "1"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    return in_flags(exc) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``edgeinfer`` and ``python -m edgeinfer``; returns the exit code."""
    args = parse_command_line(build_parser(), argv)
    debug = _debug(args)
    try:
        module_name, func_name = COMMANDS[args.command].split(":")
        handler = getattr(importlib.import_module(f"edgeinfer.cli.{module_name}"), func_name)
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        stderr.print("interrupted")
        return 130
    except (EdgeInferError, OSError, ValueError) as exc:
        if debug:
            raise
        print_error(_describe(exc))
        return 1
    except Exception as exc:  # a bug: still one line, with a way to get the details
        if debug:
            raise
        print_error(f"internal error ({type(exc).__name__}: {exc}); "
                    "run with --verbose for the traceback")
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The one Jinja environment chat templates run in (edgeinfer/chat_template.py says why it is a
sandbox and what it hardens). A module of its own so that Jinja2, several MiB of a process, is
imported only by a process that renders a template: `edgeinfer run` on a plain prompt never does.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["SecurityError", "TemplateRaised", "TemplateSyntaxError", "make_environment"]

# Largest string/list that `*` may build and largest exponent `**` may use inside a template.
_MAX_REPEAT = 1 << 20
_MAX_EXPONENT = 1024


class TemplateRaised(Exception):
    """What `raise_exception(msg)` throws inside a template."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """HF transformers' `tojson`: no HTML escaping (unlike Jinja's) and non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, failing loudly on unsafe attributes and bounding `*` and `**`."""

    intercepted_binops = frozenset({"*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} "
                            f"object is not allowed")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > _MAX_EXPONENT:
            raise SecurityError(f"exponent {right} is too large")
        if operator == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        return super().call_binop(context, operator, left, right)


def _check_repeat(seq: Any, count: Any) -> None:
    if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
        if len(seq) * count > _MAX_REPEAT:
            raise SecurityError(f"repeating a sequence {count} times makes it too long")


def make_environment() -> jinja2.Environment:
    """The one Jinja environment chat templates run in."""
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env

"""The exception family of edgeinfer. The classes the native core raises are defined once, in the
core, and re-exported here so callers never import the private module; errors that only Python
code raises are subclasses of `EdgeInferError` defined below."""
from edgeinfer._core import ContextOverflowError, EdgeInferError, ModelFormatError, StateFileError

__all__ = ["EdgeInferError", "ModelFormatError", "ContextOverflowError", "StateFileError",
           "ChatTemplateError", "UnsatisfiableConstraintError"]


class ChatTemplateError(EdgeInferError):
    """A chat template could not be chosen, compiled or rendered (syntax error, an unsafe
    operation stopped by the sandbox, a `raise_exception` in the template, ...)."""


class UnsatisfiableConstraintError(EdgeInferError):
    """Constrained decoding found no text that fits: the schema asks for more distinct array items
    than it allows (uniqueItems), the search for them gave up, or the grammar reached a state its
    matcher cannot go on from (a limit such as llguidance's item count). The request's fault, not
    the engine's."""


def headline(message: str, default: str) -> str:
    """A library's error message without what it appends after the first line (llguidance: its
    parser state, which means nothing to the reader); `default` when there is none."""
    return (message.strip().splitlines() or [default])[0]

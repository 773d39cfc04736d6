"""Errors in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with real
status codes. The rule: a request that will fail the same way again is a 4xx (clients retry 5xx,
and re-sending a long prompt three times helps nobody); 5xx only for faults of the server."""
from __future__ import annotations

import logging
import re
import sys
import uuid
from typing import Any, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from edgeinfer.errors import ChatTemplateError, ContextOverflowError, UnsatisfiableConstraintError

log = logging.getLogger("edgeinfer.server")

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
INVALID_UNICODE = "invalid_unicode"   # the pydantic error kind of schemas.RequestBody's text check


class APIError(Exception):
    """An error to send to the client as it is."""

    def __init__(self, status: int, message: str, type: str = INVALID_REQUEST, param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type: str = INVALID_REQUEST, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def context_overflow(n_prompt: int, n_ctx: int) -> APIError:
    return APIError(400, f"This model's maximum context length is {n_ctx} tokens, but the prompt has "
                         f"{n_prompt} tokens (and at least 1 more is needed for the completion). "
                         f"Shorten the prompt or start the server with a larger --ctx-size.",
                    param="messages", code="context_length_exceeded")


def from_exception(exc: BaseException) -> APIError:
    """The APIError for an exception raised while serving a request. An unexpected one is logged
    in full under a fresh id and answered with that id only: its text may hold the prompt or
    internal reprs, which are not the client's to see."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ContextOverflowError):
        return APIError(400, str(exc), code="context_length_exceeded")
    if isinstance(exc, ChatTemplateError):
        return APIError(400, str(exc), param="messages", code="chat_template_error")
    if isinstance(exc, UnsatisfiableConstraintError):
        return APIError(400, str(exc), code="invalid_schema")
    error_id = uuid.uuid4().hex[:12]
    log.error("internal error %s", error_id, exc_info=(type(exc), exc, exc.__traceback__))
    return APIError(500, f"The server failed while handling the request (error id {error_id}; "
                         f"the server log has the details).", type=SERVER_ERROR, code="internal_error")


# Union members show up in an error's location ("str", "list[ContentPart]"); they mean nothing
# to a client, who sent a field, not a type.
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|none|list|dict)$|[\[\]()]")


def _field_name(loc: tuple) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(p for p in parts if not _UNION_MEMBER.search(p)) or None


# pydantic's type-error kinds -> the JSON type the field wanted, in OpenAI's words.
_EXPECTED = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
             "float_type": "a number", "float_parsing": "a number", "bool_type": "a boolean",
             "bool_parsing": "a boolean", "string_type": "a string", "list_type": "an array",
             "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object"}
_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


def json_type(value: Any) -> str:
    """What a decoded JSON value is, as a person would say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal" if value == value and abs(value) != float("inf") else "a non-finite number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, (list, tuple)) else "an object" if isinstance(value, dict) else "a value"


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validation_error(exc: RequestValidationError) -> APIError:
    """The first problem FastAPI found, named by its field (``messages.0.role``), in OpenAI's
    terms: ``invalid_type`` for a value of the wrong JSON type (booleans are not integers,
    strings are not booleans), ``invalid_value`` for one out of range or not allowed."""
    errors = exc.errors()
    if not errors:
        return APIError(400, "invalid request body", code="invalid_body")
    first = errors[0]
    kind = first.get("type", "")
    ctx = first.get("ctx") or {}
    if kind == "json_invalid":
        detail = ctx.get("error", "")
        return APIError(400, f"The request body is not valid JSON{': ' + detail if detail else ''}",
                        code="invalid_json")
    field = ctx.get("field") or _field_name(tuple(first.get("loc", ())))
    if field is None:
        if kind == "missing":
            return APIError(400, "The request body is missing; expected a JSON object.", code="invalid_body")
        return APIError(400, f"The request body must be a JSON object, not {json_type(first.get('input'))}.",
                        code="invalid_body")
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    value = first.get("input")
    if kind == "missing":
        return APIError(400, f"Missing required parameter: '{field}'.{more}", param=field, code="missing_field")
    if kind in _EXPECTED:
        # A union field fails once per member. Where an array or object member got inside the
        # value, the problem is inside it ("prompt": [1.5] is about prompt.0, not about prompt
        # not being a string): name the first such inner field. Then say every type it would
        # have taken.
        typed = [(e, _field_name(tuple(e.get("loc", ())))) for e in errors if e.get("type") in _EXPECTED]
        inner = next((name for _, name in typed if name and name.startswith(field + ".")), None)
        outer = field
        if inner is not None and ctx.get("field") is None:
            field = inner
            value = next(e.get("input") for e, name in typed if name == inner)
        same = [e for e, name in typed if name == field]
        expected = " or ".join(dict.fromkeys(_EXPECTED[e["type"]] for e in same))
        # (counted by field: a union's members each fail on the same one)
        others = len({_field_name(tuple(e.get("loc", ()))) for e in errors} - {field, outer})
        more = f" (and {others} more problem{'s' if others > 1 else ''})" if others else ""
        return APIError(400, f"Invalid type for '{field}': expected {expected}, but got "
                             f"{json_type(value)} instead.{more}", param=field, code="invalid_type")
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()), "?")
        return APIError(400, f"Invalid '{field}': expected a value {_BOUNDS[kind]} {bound}, but got "
                             f"{_shown(value)} instead.{more}", param=field, code="invalid_value")
    if kind == "finite_number":
        return APIError(400, f"Invalid '{field}': expected a finite number, but got {_shown(value)} instead.{more}",
                        param=field, code="invalid_value")
    if kind == "literal_error":
        return APIError(400, f"Invalid value for '{field}': expected {ctx.get('expected', 'another value')}, "
                             f"but got {_shown(value)} instead.{more}", param=field, code="invalid_value")
    if kind == INVALID_UNICODE:
        return APIError(400, f"Invalid value for '{field}': {first.get('msg')}.", param=field,
                        code="invalid_unicode")
    if kind == "invalid_field":   # a check across fields (schemas.field_error)
        return APIError(400, f"{first.get('msg')}.{more}", param=field, code="invalid_value")
    message = first.get("msg", "invalid").removeprefix("Value error, ")
    return APIError(400, f"Invalid value for '{field}': {message}{more}", param=field, code="invalid_value")


OLLAMA_PREFIX = "/api/"


def shaped(request: Request, error: APIError) -> JSONResponse:
    """The answer for `error`: OpenAI's error object, or Ollama's {"error": "..."} under /api/."""
    if request.url.path.startswith(OLLAMA_PREFIX):
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)
    return error.response()


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return shaped(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return shaped(request, validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {400: "invalid_body", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 404:
            message = f"Unknown endpoint {request.method} {request.url.path}"
        elif exc.status_code == 400:
            # FastAPI's only 400 of its own: a body that json.loads could not even start on
            # (bytes that are not UTF-8, nesting deeper than the parser's recursion limit, or an
            # integer longer than Python's int conversion allows).
            message = ("The request body could not be read: it must be UTF-8 encoded JSON, nested to a "
                       f"reasonable depth, its integers at most {sys.get_int_max_str_digits()} digits long.")
            code = "invalid_json"
        return shaped(request, APIError(exc.status_code, message, code=code, headers=exc.headers))

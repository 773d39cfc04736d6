"""Errors in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with real
status codes. The rule: a request that will fail the same way again is a 4xx (clients retry 5xx,
and re-sending a long prompt three times helps nobody); 5xx only for faults of the server."""
from __future__ import annotations

from typing import Any, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from edgeinfer.errors import ChatTemplateError, ContextOverflowError

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


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
    """The APIError for an exception raised while serving a request."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ContextOverflowError):
        return APIError(400, str(exc), code="context_length_exceeded")
    if isinstance(exc, ChatTemplateError):
        return APIError(400, str(exc), param="messages", code="chat_template_error")
    return APIError(500, f"internal error: {type(exc).__name__}: {exc}", type=SERVER_ERROR)


def _field_name(loc: tuple) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    # Union members show up in the location (e.g. "list[ContentPart]"); they mean nothing to a client.
    parts = [p for p in parts if not any(c in p for c in "[]()")]
    return ".".join(parts) or None


def validation_error(exc: RequestValidationError) -> APIError:
    """The first problem FastAPI found, named by its field (``messages.0.role``)."""
    errors = exc.errors()
    if not errors:
        return APIError(400, "invalid request body")
    first = errors[0]
    kind = first.get("type", "")
    if kind == "json_invalid":
        detail = first.get("ctx", {}).get("error", "")
        return APIError(400, f"The request body is not valid JSON{': ' + detail if detail else ''}",
                        code="invalid_json")
    field = _field_name(tuple(first.get("loc", ())))
    if field is None:
        if kind == "missing":
            return APIError(400, "The request body is missing; expected a JSON object.", code="invalid_body")
        return APIError(400, f"Invalid request body: {first.get('msg', '')}; expected a JSON object.",
                        code="invalid_body")
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return APIError(400, f"Invalid value for '{field}': {first.get('msg', 'invalid')}{more}",
                    param=field, code="invalid_value" if kind != "missing" else "missing_field")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 404:
            message = f"Unknown endpoint {request.method} {request.url.path}"
        return APIError(exc.status_code, message, code=code, headers=exc.headers).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return from_exception(exc).response()

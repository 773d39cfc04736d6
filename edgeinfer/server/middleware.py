"""ASGI middleware: the request-body size limit, JSON bodies whatever their Content-Type, the
API key check, a generic answer for unexpected exceptions, and counting answers by status.

Written against ASGI directly (not Starlette's BaseHTTPMiddleware) so that streamed responses and
client-disconnect notices pass through untouched.
"""
from __future__ import annotations

import hmac
import json
from typing import Any, Awaitable, Callable

from edgeinfer.server.errors import OLLAMA_PREFIX, error_body, from_exception

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Reachable without the API key: health, and the chat page's files (they hold no data; the page
# sends the key the user enters with its API requests).
OPEN_PATHS = frozenset({"/health", "/v1/health", "/"})
OPEN_PREFIXES = ("/ui/",)


async def send_json(scope: Scope, send: Send, status: int, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> None:
    if scope.get("path", "").startswith(OLLAMA_PREFIX) and isinstance(body.get("error"), dict):
        body = {"error": body["error"]["message"]}   # Ollama's error shape (errors.shaped)
    payload = json.dumps(body).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class BodyLimitMiddleware:
    """Refuses request bodies over `limit` bytes with 413, whether the client announces the size
    (Content-Length) or streams it (chunked: read up to the limit, then replayed to the app)."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def _too_large(self, scope: Scope, send: Send) -> None:
        await send_json(scope, send, 413, error_body(f"The request body is larger than the limit of {self.limit} bytes.",
                                              code="request_too_large"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = _header(scope, b"content-length")
        if length is not None:
            if not length.strip().isdigit() or int(length) > self.limit:
                return await self._too_large(scope, send)
            return await self.app(scope, receive, send)
        if _header(scope, b"transfer-encoding") is None:
            return await self.app(scope, receive, send)   # no body
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                return await self._too_large(scope, send)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class JsonBodyMiddleware:
    """Reads every request body as JSON whatever its Content-Type says (curl -d sends
    x-www-form-urlencoded, some apps text/plain); no endpoint takes forms."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST":
            kind = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if kind != "application/json":
                headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-type"]
                scope = dict(scope, headers=headers + [(b"content-type", b"application/json")])
        await self.app(scope, receive, send)


class ApiKeyMiddleware:
    """Requires `Authorization: Bearer KEY` or `X-Api-Key: KEY` everywhere but /health (and
    CORS preflight requests, which browsers send without credentials)."""

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.api_key = api_key.encode()

    def _authorized(self, scope: Scope) -> bool:
        given = _header(scope, b"x-api-key")
        auth = _header(scope, b"authorization")
        if given is None and auth is not None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        return given is not None and hmac.compare_digest(given.encode("latin-1"), self.api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        preflight = scope.get("method") == "OPTIONS" and _header(scope, b"access-control-request-method")
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["path"].startswith(OPEN_PREFIXES) \
                or preflight \
                or self._authorized(scope):
            return await self.app(scope, receive, send)
        await send_json(scope, send, 401, error_body("Invalid or missing API key. Send it as 'Authorization: Bearer "
                                              "<key>' or 'X-Api-Key: <key>'.", code="invalid_api_key"),
                        headers={"WWW-Authenticate": "Bearer"})


class StatusCountMiddleware:
    """Counts every HTTP answer by its status code (`record(status)`), whichever layer sent it."""

    def __init__(self, app: ASGIApp, record: Callable[[int], None]):
        self.app = app
        self.record = record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.record(message["status"])
            await send(message)

        await self.app(scope, receive, counting_send)


class UnexpectedErrorMiddleware:
    """Answers an exception no handler took with a generic 500 carrying an error id (the
    exception is logged in full under that id by `from_exception`), so neither a traceback nor
    an internal repr reaches the client, and the answer is counted like any other."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the last line of defence, logged with its id
            error = from_exception(exc)
            if started:   # too late for a status: the server closes the connection
                return
            await send_json(scope, send, error.status, error.body())

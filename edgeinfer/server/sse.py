"""Server-sent events: the wire format and the loop that streams one job.

Each event is ``data: <json>\\n\\n``; the stream ends with ``data: [DONE]\\n\\n``. An error after
the stream has started (the status line is already sent) travels as ``data: {"error": {...}}``
and ends the stream. Whatever ends the loop, including the client going away (Starlette then
cancels the response task), cancels the job, so the engine stops within one decode step.
"""
from __future__ import annotations

import json
from typing import Any, AsyncIterator

from edgeinfer.server.errors import from_exception
from edgeinfer.server.worker import Failed, Finished, GenerationJob, Piece

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MEDIA_TYPE = "text/event-stream"


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def stream_job(job: GenerationJob, responses: Any, include_usage: bool) -> AsyncIterator[bytes]:
    """The SSE bytes of `job`, shaped by `responses` (a ChatResponses or CompletionResponses).
    With `include_usage`, every chunk before the usage chunk says "usage": null, as OpenAI's do."""

    def chunk_event(chunk: dict[str, Any]) -> bytes:
        if include_usage:
            chunk.setdefault("usage", None)
        return sse(chunk)

    try:
        first = responses.first()
        if first is not None:
            yield chunk_event(first)
        while True:
            event = await job.next_event()
            if isinstance(event, Piece):
                for chunk in responses.deltas(event.text, event.logprobs):
                    yield chunk_event(chunk)
            elif isinstance(event, Finished):
                for chunk in responses.final(event):
                    yield chunk_event(chunk)
                if include_usage:
                    yield sse(responses.usage_chunk(event))
                yield DONE
                return
            elif isinstance(event, Failed):
                yield sse(from_exception(event.error).body())
                return
    finally:
        job.cancel()   # a no-op once finished; otherwise the client is gone or the stream broke

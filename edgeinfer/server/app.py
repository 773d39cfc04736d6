"""The HTTP routes. Every endpoint is served under /v1 and, for clients configured with a bare
base URL, without it (only the /v1 form appears in the OpenAPI schema)."""
from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from edgeinfer import __version__
from edgeinfer.server import prompts, schemas as s
from edgeinfer.server.config import ServerConfig
from edgeinfer.server.errors import from_exception, install_error_handlers
from edgeinfer.server.middleware import (ApiKeyMiddleware, BodyLimitMiddleware, JsonBodyMiddleware,
                                         StatusCountMiddleware, UnexpectedErrorMiddleware)
from edgeinfer.server.responses import ChatResponses, CompletionResponses
from edgeinfer.server.sse import HEADERS, MEDIA_TYPE, stream_job
from edgeinfer.server.worker import Engine, EngineState, Failed, Finished, GenerationJob, Piece

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": s.ErrorResponse, "description": text}
    for code, text in ((400, "Invalid request"), (401, "Missing or wrong API key"), (404, "Unknown model"),
                       (413, "Request body too large"), (503, "Model loading or queue full"))
}
STREAM_DOC = {"content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
              "description": "With stream=true: server-sent events, one chunk per `data:` line."}


async def _watch_disconnect(request: Request, job: GenerationJob) -> None:
    """Cancels `job` when the client of a non-streamed request goes away (the body has been
    read, so the next ASGI message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel()
            return


async def _collect(job: GenerationJob, responses: Any, request: Request) -> JSONResponse:
    """Runs `job` to the end and returns the whole response."""
    watcher = asyncio.create_task(_watch_disconnect(request, job))
    pieces: list[str] = []
    logprobs: list = []
    try:
        while True:
            event = await job.next_event()
            if isinstance(event, Piece):
                pieces.append(event.text)
                logprobs.extend(event.logprobs)
            elif isinstance(event, Finished):
                logprobs.extend(event.logprobs)
                return JSONResponse(responses.whole("".join(pieces), logprobs, event))
            elif isinstance(event, Failed):
                return from_exception(event.error).response()
    finally:
        watcher.cancel()
        job.cancel()   # a no-op once finished


def make_router(config: ServerConfig, engine: Engine, include_in_schema: bool) -> APIRouter:
    router = APIRouter(include_in_schema=include_in_schema, responses=ERRORS)

    def fingerprint() -> str:
        return f"fp_{engine.model.fingerprint:016x}"

    async def run(job: GenerationJob, responses: Any, stream: bool, include_usage: bool,
                  request: Request) -> Any:
        engine.submit(job)
        if stream:
            return StreamingResponse(stream_job(job, responses, include_usage), media_type=MEDIA_TYPE,
                                     headers=HEADERS)
        return await _collect(job, responses, request)

    @router.post("/chat/completions", response_model=s.ChatCompletion, responses={200: STREAM_DOC},
                 summary="Chat completion (OpenAI-compatible)")
    async def chat_completions(body: s.ChatCompletionRequest, request: Request) -> Any:
        arrived = time.perf_counter()
        model = engine.require_model()
        prompts.check_model(body.model, config)
        prompts.check_supported_chat(body)
        job = await run_in_threadpool(prompts.chat_job, body, model, config)
        job.accepted_at = arrived
        responses = ChatResponses(config.model_id, fingerprint(), model.vocab, body.logprobs, job.tool_format)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return await run(job, responses, body.stream, include_usage, request)

    @router.post("/completions", response_model=s.Completion, responses={200: STREAM_DOC},
                 summary="Text completion (OpenAI-compatible, legacy)")
    async def completions(body: s.CompletionRequest, request: Request) -> Any:
        arrived = time.perf_counter()
        model = engine.require_model()
        prompts.check_model(body.model, config)
        prompts.check_supported_completion(body)
        job = await run_in_threadpool(prompts.completion_job, body, model, config)
        job.accepted_at = arrived
        responses = CompletionResponses(config.model_id, fingerprint(), model.vocab, body.logprobs is not None)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return await run(job, responses, body.stream, include_usage, request)

    def card() -> s.ModelCard:
        model = engine.require_model()
        created = int(config.model_path.stat().st_mtime) if config.model_path.exists() else 0
        return s.ModelCard(id=config.model_id, created=created, n_ctx=model.n_ctx, n_params=model.n_params,
                           arch=model.arch, parallel=engine.n_slots)

    @router.get("/models", response_model=s.ModelList, summary="The served model")
    async def list_models() -> s.ModelList:
        return s.ModelList(data=[card()])

    @router.get("/models/{model_id:path}", response_model=s.ModelCard, summary="One model")
    async def get_model(model_id: str) -> s.ModelCard:
        prompts.check_model(model_id, config)
        return card()

    @router.get("/health", response_model=s.Health, responses={503: {"model": s.Health}},
                summary="200 once the model is loaded, 503 before")
    async def health() -> Any:
        status = engine.state.value
        ready = engine.state is EngineState.READY
        body = s.Health(status=status, model=config.model_id,
                        detail=None if engine.error is None else str(engine.error),
                        slots_total=engine.n_slots if ready else None, slots_idle=engine.idle_slots if ready else None,
                        n_ctx_per_slot=engine.model.n_ctx if ready else None)
        code = 200 if ready else 503
        return JSONResponse(body.model_dump(exclude_none=True), status_code=code)

    @router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
    async def metrics() -> PlainTextResponse:
        text = engine.metrics.render(engine.in_flight, engine.queue_depth, engine.state is EngineState.READY,
                                     engine.slot_states(), engine.step_stats())
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @router.post("/tokenize", response_model=s.TokenizeResponse, summary="Text to token ids")
    async def tokenize(body: s.TokenizeRequest) -> s.TokenizeResponse:
        model = engine.require_model()
        prompts.check_model(body.model, config)
        ids = await run_in_threadpool(model.tokenize, body.content, body.add_special, body.parse_special)
        return s.TokenizeResponse(tokens=ids)

    @router.post("/detokenize", response_model=s.DetokenizeResponse, summary="Token ids to text")
    async def detokenize(body: s.DetokenizeRequest) -> s.DetokenizeResponse:
        model = engine.require_model()
        prompts.check_model(body.model, config)
        prompts.check_token_ids(body.tokens, model.n_vocab, "tokens")
        return s.DetokenizeResponse(content=await run_in_threadpool(model.detokenize, body.tokens))

    return router


def create_app(config: ServerConfig, engine: Engine) -> FastAPI:
    """The ASGI app. The engine starts loading the model when the app starts up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            await run_in_threadpool(engine.shutdown)

    app = FastAPI(title="edgeinfer", version=__version__, lifespan=lifespan,
                  description="A local OpenAI-compatible server for GGUF models.")
    app.include_router(make_router(config, engine, include_in_schema=True), prefix="/v1")
    app.include_router(make_router(config, engine, include_in_schema=False))
    install_error_handlers(app)
    # Added last = outermost: CORS answers preflights and decorates even 401/413 answers, and the
    # status count sees every answer.
    app.add_middleware(UnexpectedErrorMiddleware)
    app.add_middleware(JsonBodyMiddleware)
    app.add_middleware(BodyLimitMiddleware, limit=config.max_body_bytes)
    if config.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=config.api_key)
    if config.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["*"],
                           allow_headers=["*"], max_age=600)
    app.add_middleware(StatusCountMiddleware, record=engine.metrics.record_response)
    return app

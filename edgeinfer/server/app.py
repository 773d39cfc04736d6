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
from edgeinfer.server import embeddings, prompts, schemas as s
from edgeinfer.server.config import ServerConfig
from edgeinfer.server.errors import from_exception, install_error_handlers
from edgeinfer.server.middleware import (ApiKeyMiddleware, BodyLimitMiddleware, JsonBodyMiddleware,
                                         StatusCountMiddleware, UnexpectedErrorMiddleware)
from edgeinfer.server.responses import ChatResponses, CompletionResponses
from edgeinfer.server.sse import HEADERS, MEDIA_TYPE, stream_job
from edgeinfer.server.model_pool import ModelPool
from edgeinfer.server.ollama_routes import make_ollama_router
from edgeinfer.server.webui import mount_chat_page
from edgeinfer.server.served_models import ServedModel
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


def make_router(config: ServerConfig, pool: ModelPool, include_in_schema: bool) -> APIRouter:
    router = APIRouter(include_in_schema=include_in_schema, responses=ERRORS)

    def fingerprint(model: Any) -> str:
        return f"fp_{model.fingerprint:016x}"

    async def run(engine: Engine, job: GenerationJob, responses: Any, stream: bool, include_usage: bool,
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
        prompts.check_supported_chat(body)
        resident = await pool.acquire(body.model)
        try:
            model = resident.engine.model
            job = await run_in_threadpool(prompts.chat_job, body, model, config)
            job.accepted_at = arrived
            responses = ChatResponses(resident.served.model_id, fingerprint(model), model.vocab, body.logprobs,
                                      job.tool_format, job.reasoning)
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return await run(resident.engine, job, responses, body.stream, include_usage, request)
        finally:
            pool.release(resident)

    @router.post("/completions", response_model=s.Completion, responses={200: STREAM_DOC},
                 summary="Text completion (OpenAI-compatible, legacy)")
    async def completions(body: s.CompletionRequest, request: Request) -> Any:
        arrived = time.perf_counter()
        prompts.check_supported_completion(body)
        resident = await pool.acquire(body.model)
        try:
            model = resident.engine.model
            job = await run_in_threadpool(prompts.completion_job, body, model, config)
            job.accepted_at = arrived
            responses = CompletionResponses(resident.served.model_id, fingerprint(model), model.vocab,
                                            body.logprobs is not None)
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return await run(resident.engine, job, responses, body.stream, include_usage, request)
        finally:
            pool.release(resident)

    @router.post("/embeddings", response_model=s.EmbeddingList, summary="Embeddings (OpenAI-compatible)")
    async def create_embeddings(body: s.EmbeddingRequest) -> Any:
        resident = await pool.acquire(body.model)
        try:
            model, model_id = resident.engine.model, resident.served.model_id
            embeddings.check_can_embed(model, model_id)
            inputs = await run_in_threadpool(embeddings.input_ids, body.input, model)
            tokens = embeddings.check_lengths(inputs, model.n_ctx, body.truncate)
            vectors = await run_in_threadpool(resident.engine.call_model, model.embed, inputs, truncate=body.truncate)
        finally:
            pool.release(resident)
        vectors = embeddings.fewer_dimensions(vectors, body.dimensions, model, normalized=True)
        return JSONResponse(embeddings.embedding_list(vectors, model_id, body.encoding_format, tokens))

    @router.post("/rerank", response_model=s.RerankResponse, summary="Rerank documents for a query (Jina / Cohere)")
    async def rerank(body: s.RerankRequest) -> Any:
        texts = embeddings.document_texts(body.documents)
        resident = await pool.acquire(body.model)
        try:
            model, model_id = resident.engine.model, resident.served.model_id
            embeddings.check_can_rerank(model, model_id)
            scores = await run_in_threadpool(resident.engine.call_model, model.rerank, body.query, texts,
                                             truncate=body.truncate)
            # Counted as the query's tokens and each document's (a pair adds a few separators).
            query_tokens = len(model.tokenize(body.query, add_special=False))
            tokens = sum(query_tokens + len(model.tokenize(t, add_special=False)) for t in texts)
        finally:
            pool.release(resident)
        return JSONResponse(embeddings.rerank_response(scores, texts, body, model_id, tokens))

    def card(served: ServedModel) -> s.ModelCard:
        resident = next((r for r in pool.residents() if r.served.model_id == served.model_id), None)
        engine = resident.engine if resident is not None else None
        model = engine.model if engine is not None and engine.state is EngineState.READY else None
        try:
            created = int(served.path.stat().st_mtime)
        except OSError:
            created = 0
        status = ("loaded" if model is not None else "loading" if engine is not None and engine.state is EngineState.LOADING
                  else "available" if served.present else "not_downloaded")
        return s.ModelCard(id=served.model_id, created=created, status=status,
                           n_ctx=model.n_ctx if model else None, n_params=model.n_params if model else None,
                           arch=model.arch if model else None, parallel=engine.n_slots if model else None,
                           size=served.file_size)

    @router.get("/models", response_model=s.ModelList, summary="The models this server can serve, loaded or not")
    async def list_models() -> s.ModelList:
        return s.ModelList(data=[card(served) for served in pool.available()])

    @router.get("/models/{model_id:path}", response_model=s.ModelCard, summary="One model")
    async def get_model(model_id: str) -> s.ModelCard:
        return card(pool.lookup(model_id))

    # HEAD too: uptime monitors and `curl -I` probe with it.
    @router.api_route("/health", methods=["GET", "HEAD"], response_model=s.Health, responses={503: {"model": s.Health}},
                summary="200 once the model is loaded (a server of many models: once it listens), 503 before")
    async def health() -> Any:
        if pool.single is None:
            loaded = [r.served.model_id for r in pool.residents() if r.engine.state is EngineState.READY]
            return JSONResponse(s.Health(status="ok", loaded=loaded).model_dump(exclude_none=True))
        engine = pool.single.engine
        ready = engine.state is EngineState.READY
        body = s.Health(status=engine.state.value, model=pool.single.served.model_id,
                        detail=None if engine.error is None else str(engine.error),
                        slots_total=engine.n_slots if ready else None, slots_idle=engine.idle_slots if ready else None,
                        n_ctx_per_slot=engine.model.n_ctx if ready else None)
        return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if ready else 503)

    @router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
    async def prometheus_metrics() -> PlainTextResponse:
        engines = [r.engine for r in pool.residents()]
        ready = [e for e in engines if e.state is EngineState.READY]
        # Per-slot lines only while one model is loaded: slot numbers are per model.
        one = ready[0] if len(ready) == 1 else None
        text = pool.metrics.render(sum(e.in_flight for e in engines), sum(e.queue_depth for e in engines),
                                     bool(ready), one.slot_states() if one else (), one.step_stats() if one else None)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @router.post("/tokenize", response_model=s.TokenizeResponse, summary="Text to token ids")
    async def tokenize(body: s.TokenizeRequest) -> s.TokenizeResponse:
        resident = await pool.acquire(body.model)
        try:
            model = resident.engine.model
            ids = await run_in_threadpool(model.tokenize, body.content, body.add_special, body.parse_special)
        finally:
            pool.release(resident)
        if not body.with_pieces:
            return s.TokenizeResponse(tokens=ids)
        return s.TokenizeResponse(tokens=[s.TokenPiece(id=i, piece=_piece(model.vocab.token_to_piece(i))) for i in ids])

    @router.post("/detokenize", response_model=s.DetokenizeResponse, summary="Token ids to text")
    async def detokenize(body: s.DetokenizeRequest) -> s.DetokenizeResponse:
        resident = await pool.acquire(body.model)
        try:
            model = resident.engine.model
            prompts.check_token_ids(body.tokens, model.n_vocab, "tokens")
            # Special tokens as their text, as llama-server's /detokenize gives them.
            text = await run_in_threadpool(model.detokenize, body.tokens, True)
        finally:
            pool.release(resident)
        return s.DetokenizeResponse(content=text)

    return router


def create_app(config: ServerConfig, pool: ModelPool) -> FastAPI:
    """The ASGI app. The pool starts (a single model starts loading) when the app starts up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool.start()
        try:
            yield
        finally:
            await pool.shutdown()

    app = FastAPI(title="edgeinfer", version=__version__, lifespan=lifespan,
                  description="A local OpenAI-compatible server for GGUF models.")
    app.include_router(make_router(config, pool, include_in_schema=True), prefix="/v1")
    app.include_router(make_router(config, pool, include_in_schema=False))
    app.include_router(make_ollama_router(config, pool))
    mount_chat_page(app)
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
    app.add_middleware(StatusCountMiddleware, record=pool.metrics.record_response)
    return app


def _piece(raw: bytes) -> str | list[int]:
    """A token's text as llama-server's /tokenize shows it: a string, or its bytes where they are
    not whole UTF-8 (part of a character)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)

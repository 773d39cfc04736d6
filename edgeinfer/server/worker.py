"""The engine: the model's slots and the threads that generate in them.

Requests become `GenerationJob`s in a FIFO queue. The engine thread loads the model, then hands
each job, in order, to a free slot: one of the model's `n_parallel` sequences, each with its own
prompt cache and its own thread running the ordinary generation loop. The slots' decode calls
share steps (edgeinfer.parallel): a job joins at the next step, a long prompt goes in chunks
between the others' steps. A job goes to the free slot whose cached tokens share the longest
prefix with its prompt (a conversation returns to its slot and reuses it), else to the one used
least recently. The asyncio side stays free to accept, validate and stream; each job carries an
asyncio queue that its slot's thread feeds with events (`Piece`, `Finished`, `Failed`) through
the event loop's thread-safe call.

Cancellation: `job.cancel()` sets a flag that the per-token hook checks before every decode
step, so a client that goes away stops costing compute within one step and frees its slot. A
job cancelled while still queued is skipped. A failure (a prompt over the context, a bad
request the engine finds) ends its own job only.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Union

import numpy as np

from edgeinfer.generate import GenerationResult
from edgeinfer.model import Model
from edgeinfer.prompt_cache import PromptCache, common_prefix
from edgeinfer.server.errors import APIError, from_exception
from edgeinfer.server.logprobs import TokenLogprob, token_logprob
from edgeinfer.server.metrics import Metrics

log = logging.getLogger("edgeinfer.server")

RETRY_AFTER_S = 1


class GenerationCancelled(Exception):
    """Raised inside the generation when its job was cancelled."""


@dataclass
class Piece:
    text: str
    logprobs: list[TokenLogprob]


@dataclass
class Finished:
    result: GenerationResult
    logprobs: list[TokenLogprob]    # of tokens whose text was never emitted as a piece
    ttft_ms: float
    queue_ms: float


@dataclass
class Failed:
    error: BaseException


Event = Union[Piece, Finished, Failed]


@dataclass
class GenerationJob:
    """A prompt (token ids) and generate() keyword arguments; `logprobs` None = none, k = the
    chosen token's and the k most likely."""

    prompt: list[int]
    options: dict[str, Any]
    logprobs: int | None = None
    keep_prefix: int = 0            # leading prompt tokens worth keeping on disk (the system prefix)
    tool_format: Any = None         # edgeinfer.tools.ToolFormat: how to read calls from the answer
    reasoning: Any = None           # edgeinfer.reasoning.ReasoningStyle: how to read reasoning apart
    accepted_at: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _events: asyncio.Queue | None = field(default=None, init=False, repr=False)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events = asyncio.Queue()

    def cancel(self) -> None:
        self.cancelled.set()

    async def next_event(self) -> Event:
        assert self._events is not None, "bind() the job to the event loop first"
        return await self._events.get()

    def emit(self, event: Event) -> None:
        """Called from the engine thread."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:   # the event loop is gone (shutdown): nobody is listening
            self.cancel()


# What slot 0 holds while Engine.call_model runs in its sequence (no job of a client).
MODEL_CALL = object()


class EngineState(str, Enum):
    LOADING = "loading"
    READY = "ok"
    FAILED = "error"


@dataclass(eq=False)
class Slot:
    """One of the model's sequences and the thread that generates in it."""
    index: int
    cache: PromptCache | None                 # the model's prompt cache for this sequence
    draft: Any = None                         # its edgeinfer.draft_model.DraftModel (--draft), if any
    job: GenerationJob | None = None          # the job it runs, None when free
    last_used: float = 0.0
    inbox: queue.Queue = field(default_factory=queue.Queue)

    def reusable(self, prompt: list[int]) -> int:
        """How many leading prompt tokens this slot's cache holds already."""
        if self.cache is None:
            return 0
        return common_prefix(self.cache.tokens[:self.cache.reusable_tokens], prompt)

    @property
    def context_tokens(self) -> int:
        return 0 if self.cache is None else len(self.cache.tokens)


class Engine:
    """Owns the model; `start()` loads it on the engine thread, then serves jobs in order, as
    many at once as the model has slots (Model.n_parallel)."""

    def __init__(self, load: Callable[[], Model], metrics: Metrics, max_queue: int,
                 make_prompt_store: Callable[[Model], Any] | None = None,
                 on_load_failure: Callable[[BaseException], None] | None = None,
                 make_drafts: Callable[[Model], list] | None = None):
        """`load` makes the model (on the engine thread); `make_prompt_store(model)` the optional
        PromptStateStore (loading saved states is part of loading: /health says 503 until done);
        `make_drafts(model)` the optional draft models, one per slot (part of loading too)."""
        self._load = load
        self._make_prompt_store = make_prompt_store
        self._make_drafts = make_drafts
        self._drafts: list | None = None
        self._on_load_failure = on_load_failure
        self.metrics = metrics
        self.max_queue = max_queue
        self.state = EngineState.LOADING
        self.error: BaseException | None = None
        self.model: Model | None = None
        self.prompt_store: Any = None
        self.slots: list[Slot] = []
        self._queue: queue.Queue[GenerationJob | None] = queue.Queue()
        self._submit_lock = threading.Lock()
        self._model_calls = threading.Lock()
        self._slot_free = threading.Condition(self._submit_lock)
        self._placing: GenerationJob | None = None   # taken from the queue, waiting for a free slot
        self._in_flight = 0   # submitted and not yet done (queued or running)
        self._settled = threading.Event()   # set when loading has succeeded or failed
        self._stopping = False
        self.last_active = time.monotonic()   # a job submitted or ended (the pool's keep-alive counts from it)
        self._thread = threading.Thread(target=self._run, name="edgeinfer-engine", daemon=True)
        self._slot_threads: list[threading.Thread] = []

    # --- the HTTP side ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Waits until loading ends; True if the model is ready."""
        self._settled.wait(timeout)
        return self.state is EngineState.READY

    def require_model(self) -> Model:
        """The model, or a 503 while it is loading (or failed to load)."""
        if self.state is EngineState.READY:
            return self.model
        if self.state is EngineState.LOADING:
            raise APIError(503, "The model is still loading; retry shortly.", type="server_error",
                           code="model_loading", headers={"Retry-After": str(RETRY_AFTER_S)})
        raise APIError(503, f"The model failed to load: {self.error}", type="server_error", code="model_failed")

    def submit(self, job: GenerationJob) -> None:
        """Queues `job` (bound to the running event loop); 503 with Retry-After when full."""
        self.require_model()
        job.bind(asyncio.get_running_loop())
        with self._submit_lock:
            if self.queue_depth >= self.max_queue:
                self.metrics.record_rejected()
                raise APIError(503, f"The server is busy: {self.max_queue} requests are already waiting. "
                                    f"Retry later.", type="server_error", code="queue_full",
                               headers={"Retry-After": str(RETRY_AFTER_S)})
            self._queue.put(job)
            self._in_flight += 1
            self.last_active = time.monotonic()

    @property
    def queue_depth(self) -> int:
        """Jobs waiting for a slot."""
        return self._queue.qsize() + (self._placing is not None)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    @property
    def idle_slots(self) -> int:
        with self._submit_lock:
            return sum(slot.job is None for slot in self.slots)

    def slot_states(self) -> list[tuple[int, bool, int]]:
        """(index, busy, tokens its cache holds) per slot, for /metrics."""
        with self._submit_lock:
            return [(slot.index, slot.job is not None, slot.context_tokens) for slot in self.slots]

    def step_stats(self) -> Any:
        """The batcher's step counters (edgeinfer.parallel.StepStats), None with one slot."""
        batcher = getattr(self.model, "batcher", None)
        return None if batcher is None else batcher.stats

    def cancel_all(self) -> None:
        """Fails the queued jobs and cancels the running ones (their clients get an error event at
        the next token), so open streams end at once when the server is asked to stop."""
        with self._submit_lock:
            self._stopping = True
            waiting = [self._placing] if self._placing is not None else []
            while True:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    waiting.append(job)
            for job in waiting:
                job.cancel()
                job.emit(Failed(APIError(503, "The server is shutting down.", type="server_error",
                                         code="shutting_down")))
                self._in_flight -= 1
            self._placing = None
            for slot in self.slots:
                if slot.job is not None:
                    slot.job.cancel()
            self._slot_free.notify_all()

    def shutdown(self, timeout: float = 5.0) -> None:
        """cancel_all(), then stops the engine and slot threads (saving the slots' conversations
        to the prompt store, when there is one)."""
        self.cancel_all()
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def call_model(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs a model call beside the slots (embeddings, reranking), one at a time. Model.embed
        works in sequence 0, so while it runs that slot takes no job (it waits for the slot's
        job to end, as a job waits for a free slot); the slot's prompt cache is emptied by it."""
        with self._model_calls:
            slot = self.slots[0] if self.slots else None
            if slot is not None:
                with self._submit_lock:
                    while slot.job is not None:
                        self._slot_free.wait()
                    slot.job = MODEL_CALL
            try:
                return fn(*args, **kwargs)
            finally:
                if slot is not None:
                    with self._submit_lock:
                        slot.job = None
                        slot.last_used = time.perf_counter()
                        self._slot_free.notify_all()

    def release_model(self) -> None:
        """Drops the references to the model after shutdown(), so its memory goes back."""
        self.slots = []
        self._slot_threads = []
        self._drafts = None
        self.prompt_store = None
        self.model = None

    # --- the engine thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            model = self._load()
            if self._make_drafts is not None:
                self._drafts = self._make_drafts(model)
            if self._make_prompt_store is not None:
                self.prompt_store = self._make_prompt_store(model)
        except BaseException as exc:  # noqa: BLE001 - reported to the HTTP side and the CLI
            self.error = exc
            self.state = EngineState.FAILED
            log.error("model failed to load: %s", exc)
            self._settled.set()
            if self._on_load_failure is not None:
                self._on_load_failure(exc)
            return
        self.model = model
        self.slots = [Slot(i, cache, self._drafts[i] if self._drafts else None)
                      for i, cache in enumerate(model.prompt_caches)]
        for slot in self.slots:
            thread = threading.Thread(target=self._slot_loop, args=(slot,), name=f"edgeinfer-slot-{slot.index}",
                                      daemon=True)
            thread.start()
            self._slot_threads.append(thread)
        self.state = EngineState.READY
        self._settled.set()
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                if job.cancelled.is_set():   # its client left while it waited
                    self.metrics.record_cancelled()
                    self._done()
                    continue
                self._place(job)
        finally:
            self._stop_slots()

    def _place(self, job: GenerationJob) -> None:
        """Waits for a free slot and hands `job` to the best one (see the module doc)."""
        with self._submit_lock:
            self._placing = job
            while not self._stopping and not job.cancelled.is_set() and all(s.job for s in self.slots):
                self._slot_free.wait()
            if self._placing is None:   # cancel_all failed it meanwhile
                return
            self._placing = None
            if job.cancelled.is_set() or self._stopping:
                self.metrics.record_cancelled()
                self._in_flight -= 1
                job.emit(Failed(APIError(503, "The server is shutting down.", type="server_error",
                                         code="shutting_down")))   # nobody listens, unless stopping
                return
            free = [s for s in self.slots if s.job is None]
            slot = max(free, key=lambda s: (s.reusable(job.prompt), -s.last_used))
            slot.job = job
        slot.inbox.put(job)

    def _stop_slots(self) -> None:
        for slot in self.slots:
            slot.inbox.put(None)
        for thread in self._slot_threads:
            thread.join(5.0)
        if self.prompt_store is not None:
            for slot in self.slots:
                self._store("save the last conversation", self.prompt_store.save_live, slot.cache)

    def _done(self) -> None:
        with self._submit_lock:
            self._in_flight -= 1

    # --- a slot's thread -------------------------------------------------------------------------
    def _slot_loop(self, slot: Slot) -> None:
        while True:
            job = slot.inbox.get()
            if job is None:
                return
            try:
                if job.cancelled.is_set():
                    self.metrics.record_cancelled()
                else:
                    self._serve(job, slot)
            finally:
                with self._submit_lock:
                    slot.job = None
                    slot.last_used = time.perf_counter()
                    self._in_flight -= 1
                    self.last_active = time.monotonic()
                    self._slot_free.notify_all()

    def _serve(self, job: GenerationJob, slot: Slot) -> None:
        started = time.perf_counter()
        first_token_at: float | None = None
        pending: list[TokenLogprob] = []

        def on_token(token: int, logits: np.ndarray) -> None:
            nonlocal first_token_at
            if job.cancelled.is_set():
                raise GenerationCancelled
            if first_token_at is None:
                first_token_at = time.perf_counter()
            if job.logprobs is not None:
                pending.append(token_logprob(logits, token, job.logprobs))

        try:
            if self.prompt_store is not None:
                self.prompt_store.before_generate(slot.cache, job.prompt)
            drafting = {"draft": slot.draft} if slot.draft is not None else {}
            gen = self.model.generate(job.prompt, on_token=on_token, prompt_cache=slot.cache, **drafting,
                                      **job.options)
            while True:
                try:
                    text = next(gen)
                except StopIteration as done:
                    result: GenerationResult = done.value
                    break
                job.emit(Piece(text, pending.copy()))
                pending.clear()
        except GenerationCancelled:
            self.metrics.record_cancelled()
            log.info("generation cancelled (slot %d)", slot.index)
            # Usually nobody listens any more; on shutdown this ends the client's stream.
            job.emit(Failed(APIError(503, "The generation was cancelled (the server is shutting down).",
                                     type="server_error", code="shutting_down")))
            return
        except Exception as exc:  # noqa: BLE001 - sent to the client, the engine goes on
            self.metrics.record_failed()
            error = from_exception(exc)   # an unexpected one is logged in full under its error id
            if error.status < 500:
                log.info("generation refused: %s", error.message)
            job.emit(Failed(error))
            return
        end = time.perf_counter()
        t = result.timings
        drafts = result.drafts
        self.metrics.record_generation(result.prompt_tokens, result.cached_tokens, len(result.tokens),
                                       t.prompt_ms / 1e3, t.gen_ms / 1e3, t.prompt_tok_s, t.gen_tok_s,
                                       drafts.drafted if drafts else 0, drafts.accepted if drafts else 0,
                                       slot=slot.index)
        ttft = (first_token_at or end) - job.accepted_at
        job.emit(Finished(result, pending.copy(), ttft * 1e3, (started - job.accepted_at) * 1e3))
        if self.prompt_store is not None and job.keep_prefix:
            self._store("save the system prefix", self.prompt_store.after_generate, slot.cache, job.prompt,
                        job.keep_prefix)

    @staticmethod
    def _store(what: str, action: Callable[..., Any], *args: Any) -> None:
        """Runs a prompt-store action after the answer went out: a failure costs a warning, never
        the request or the engine."""
        try:
            action(*args)
        except Exception:  # noqa: BLE001
            log.warning("prompt cache: could not %s", what, exc_info=True)

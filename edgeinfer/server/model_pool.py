"""The models a server holds loaded, as Ollama keeps them: loaded on a request's first use of a
name, unloaded when idle past their keep-alive, or least recently used first when a new one
needs room, within a count (`--max-loaded`) and a memory budget (`--memory-budget`).

Each loaded model is an `Engine` of its own (its slots, queue and threads). A request that names
a model being loaded waits for it; one whose model cannot fit even alone is a 503 naming the
sizes, and one that cannot fit because the others are busy is a 503 with Retry-After, never an
out-of-memory kill. The single-model server (`edgeinfer serve MODEL`) is a pool of one model
that is loaded at start and never unloaded: its requests get 503 while it loads, as before.

All bookkeeping runs on the event loop's thread; engines load and stop on their own threads.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from edgeinfer.server.config import DEFAULT_KEEP_ALIVE_S, DEFAULT_MAX_LOADED
from edgeinfer.server.errors import APIError
from edgeinfer.server.metrics import Metrics
from edgeinfer.server.served_models import ServedModel, find, is_hub_name
from edgeinfer.server.worker import RETRY_AFTER_S, Engine, EngineState

log = logging.getLogger("edgeinfer.server")

DEFAULT_BUDGET_FRACTION = 0.75  # of physical memory: the rest stays the desktop's
REAP_INTERVAL_S = 0.25
SERVER_KEEP_ALIVE = "default"   # acquire()'s keep_alive when the request has none: the server's


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def default_memory_budget() -> int | None:
    total = physical_memory()
    return None if total is None else int(total * DEFAULT_BUDGET_FRACTION)


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


@dataclass(eq=False)
class Resident:
    """A model the pool has loaded (or is loading)."""

    served: ServedModel
    engine: Engine
    memory: int                     # the estimate it was admitted with
    keep_alive: float | None        # idle seconds before unloading; None = never
    pinned: bool = False            # the single-model server's model: never unloaded
    leases: int = 0                 # requests between acquire() and release()
    last_used: float = field(default_factory=time.monotonic)

    @property
    def idle(self) -> bool:
        return self.leases == 0 and self.engine.in_flight == 0 and self.engine.state is not EngineState.LOADING

    def idle_since(self) -> float:
        return max(self.last_used, self.engine.last_active)

    def expires_in(self) -> float:
        """Seconds until the keep-alive unloads it, counted from now as if it stayed idle."""
        if self.keep_alive is None:
            return float("inf")
        return self.idle_since() + self.keep_alive - time.monotonic()


class ModelPool:
    def __init__(self, models: Callable[[], list[ServedModel]], make_engine: Callable[[ServedModel], Engine],
                 estimate: Callable[[ServedModel], int], metrics: Metrics, max_loaded: int = DEFAULT_MAX_LOADED,
                 memory_budget: int | None = None, keep_alive: float | None = DEFAULT_KEEP_ALIVE_S,
                 default_model: str | None = None):
        """`models()` lists what can be served (called per listing: files dropped into the models
        folder appear); `make_engine` makes a model's engine, not started; `estimate` its bytes."""
        self._models = models
        self.metrics = metrics          # shared by every model's engine
        self._make_engine = make_engine
        self._estimate = estimate
        self.max_loaded = max_loaded
        self.memory_budget = memory_budget
        self.keep_alive = keep_alive
        self.default_model = default_model
        self.single: Resident | None = None
        self._residents: dict[str, Resident] = {}
        self._lock = asyncio.Lock()
        self._reaper: asyncio.Task | None = None

    @classmethod
    def of_one(cls, served: ServedModel, engine: Engine) -> "ModelPool":
        """The single-model server's pool."""
        pool = cls(lambda: [served], lambda _: engine, lambda _: 0, engine.metrics, max_loaded=1, keep_alive=None)
        pool.single = Resident(served, engine, 0, None, pinned=True)
        pool._residents[served.model_id] = pool.single
        return pool

    # --- what there is ---------------------------------------------------------------------------
    def available(self) -> list[ServedModel]:
        return self._models()

    def residents(self) -> list[Resident]:
        return list(self._residents.values())

    def lookup(self, requested: str | None) -> ServedModel:
        """The model a request names (404 if none), or with no name: the single model, else the
        one used last, else the default."""
        if self.single is not None:
            if requested and find([self.single.served], requested) is None:
                raise APIError(404, f"The model {requested!r} does not exist; this server serves "
                                    f"{self.single.served.model_id!r}.", param="model", code="model_not_found")
            return self.single.served
        available = self.available()
        if not requested:
            if self._residents:
                return max(self._residents.values(), key=Resident.idle_since).served
            requested = self.default_model
        served = find(available, requested) if requested else None
        if served is None:
            names = ", ".join(m.model_id for m in available[:20]) or "none"
            # A client may not make the server download from the Hub (Ollama's chat does not pull either).
            hint = f" Pull it on the server first: edgeinfer pull {requested}" if is_hub_name(requested) else ""
            raise APIError(404, f"The model {requested!r} does not exist; this server can serve: {names}.{hint}",
                           param="model", code="model_not_found")
        return served

    # --- a request's use of a model --------------------------------------------------------------
    async def acquire(self, requested: str | None, keep_alive: float | None | str = SERVER_KEEP_ALIVE) -> Resident:
        """The loaded model a request names, loading it first if need be (and waiting while it
        loads). The caller must `release()` it once its job is submitted (or it gave up)."""
        served = self.lookup(requested)
        if self.single is not None:
            self.single.engine.require_model()   # 503 while loading, as the single-model server always did
            self.single.leases += 1
            return self.single
        async with self._lock:
            resident = self._residents.get(served.model_id)
            if resident is None:
                resident = await self._load(served)
            resident.leases += 1
            resident.last_used = time.monotonic()
            if keep_alive != SERVER_KEEP_ALIVE:
                resident.keep_alive = keep_alive
        try:
            await asyncio.to_thread(resident.engine.wait_ready)
            if resident.engine.state is EngineState.FAILED:
                async with self._lock:
                    if self._residents.get(served.model_id) is resident:
                        del self._residents[served.model_id]   # the next request tries again
            resident.engine.require_model()
        except BaseException:
            self.release(resident)
            raise
        return resident

    def release(self, resident: Resident) -> None:
        resident.leases -= 1
        resident.last_used = time.monotonic()

    async def _load(self, served: ServedModel) -> Resident:
        """Makes room for `served` and starts loading it (under the lock)."""
        need = self._estimate(served)
        if self.memory_budget is not None and need > self.memory_budget:
            raise APIError(503, f"The model {served.model_id!r} needs about {gib(need)} (weights and KV cache), "
                                f"more than the server's memory budget of {gib(self.memory_budget)} "
                                f"(--memory-budget).", type="server_error", code="insufficient_memory")
        while self._residents and (len(self._residents) >= self.max_loaded or self._over_budget(need)):
            idle = [r for r in self._residents.values() if r.idle and not r.pinned]
            if not idle:
                raise APIError(503, f"Cannot load {served.model_id!r} now: the loaded models "
                                    f"({', '.join(self._residents)}) are all busy and there is no room beside them "
                                    f"(--max-loaded {self.max_loaded}, --memory-budget). Retry shortly.",
                               type="server_error", code="models_busy", headers={"Retry-After": str(RETRY_AFTER_S)})
            await self._unload(min(idle, key=Resident.idle_since), "to make room")
        resident = Resident(served, self._make_engine(served), need, self.keep_alive)
        self._residents[served.model_id] = resident
        log.info("loading %s", served.model_id)
        resident.engine.start()
        return resident

    def _over_budget(self, need: int) -> bool:
        used = sum(r.memory for r in self._residents.values())
        return self.memory_budget is not None and used + need > self.memory_budget

    async def unload(self, model_id: str) -> bool:
        """Ollama's keep_alive 0 with no prompt: unloads a model at once if it is idle, else once
        its requests are done (its keep-alive becomes 0, which the reaper honours), and loads
        nothing. False for the single-model server's model, which is never unloaded."""
        async with self._lock:
            resident = self._residents.get(model_id)
            if resident is None:
                return True
            if resident.pinned:
                return False
            if resident.idle:
                await self._unload(resident, "asked to")
            else:
                resident.keep_alive = 0.0
            return True

    async def _unload(self, resident: Resident, why: str) -> None:
        del self._residents[resident.served.model_id]
        log.info("unloading %s (%s)", resident.served.model_id, why)
        await asyncio.to_thread(resident.engine.shutdown)
        resident.engine.release_model()

    # --- lifetime --------------------------------------------------------------------------------
    def start(self) -> None:
        """Starts the single model's loading, or the reaper of idle models (on the event loop)."""
        if self.single is not None:
            self.single.engine.start()
        else:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            async with self._lock:
                now = time.monotonic()
                for resident in list(self._residents.values()):
                    expired = resident.keep_alive is not None and now - resident.idle_since() >= resident.keep_alive
                    if resident.idle and expired and not resident.pinned:
                        await self._unload(resident, "keep-alive over")

    def cancel_all(self) -> None:
        for resident in self.residents():
            resident.engine.cancel_all()

    async def shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for resident in self.residents():
            await asyncio.to_thread(resident.engine.shutdown)

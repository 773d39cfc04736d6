"""Token sampling: small pure numpy functions chained by `make_sampler` (mlx-lm's shape).

The chain, in llama.cpp's order::

    logit bias (per-token additive, optional)                         apply_logit_bias
    -> penalties (repeat / presence / frequency over the last n tokens) apply_penalties
    -> top-k -> top-p -> min-p                                          filters on raw logits
    -> temperature -> softmax                                           token_distribution
    -> draw (seeded numpy Generator)                                    Distribution.draw

As in llama.cpp, top-p and min-p judge the probabilities *before* temperature; temperature then
reshapes the distribution over the survivors. ``temperature <= 0`` short-circuits to argmax.
`TokenPicker` is the whole chain as one callable; its `distribution` is the one the draw is made
from, which speculative decoding's rejection rule needs (edgeinfer/rejection.py).

The logits handed in are often a zero-copy view of the native core's buffer, so nothing here
writes to its input: every transform returns a new array (or the input itself, unchanged).

Cost on a 262k vocabulary: top-k narrows with one compare and then ``argpartition``s the few
near the maximum; only the survivors are sorted, and only when top-p needs an order. min-p runs
before top-p (one vectorised compare), so top-p sorts only what min-p left. That reordering
keeps the same set as top-p-then-min-p: both keep a prefix of the same descending order, and
top-p's cumulative sum is normalised over every candidate, not just min-p's survivors.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

import numpy as np

Sampler = Callable[[np.ndarray], int]
LogitsProcessor = Callable[[np.ndarray, Sequence[int]], np.ndarray]


@dataclass(frozen=True)
class Limit:
    """The values one sampling option takes: an int or a finite number within [lo, hi] (either
    end open when `lo_open` / `hi_open`, absent when None)."""

    kind: type
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def describe(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        if self.lo is not None and self.hi is not None:
            return f"{what} in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{what} {'>' if self.lo_open else '>='} {self.lo:g}"
        return what

    def contains(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind is int and not isinstance(value, numbers.Integral):
            return False
        if not math.isfinite(value):
            return False
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        return self.hi is None or not (value > self.hi or (self.hi_open and value == self.hi))

    def bounds(self) -> dict[str, float]:
        """pydantic Field keyword arguments for these bounds."""
        out: dict[str, float] = {}
        if self.lo is not None:
            out["gt" if self.lo_open else "ge"] = self.lo
        if self.hi is not None:
            out["lt" if self.hi_open else "le"] = self.hi
        return out


def option(default: Any, limit: Limit, help: str) -> Any:
    """A `SamplingParams` field: its default, the values it takes and what it does, stated once
    for every entry point (see SamplingParams)."""
    return field(default=default, metadata={"limit": limit, "help": help})


@dataclass(frozen=True)
class SamplingParams:
    """Every sampling option, defined once: its default (llama.cpp's), its limits and its help.

    Making one checks every value against its limits (`Model.generate` makes one from its
    keywords). The CLI flags (edgeinfer/cli/args.py), the REPL's /set (edgeinfer/repl/commands.py)
    and the server's request fields (edgeinfer/server/schemas.py) take their defaults, checks and
    help from these fields, and only choose which options they offer and how they spell them; the
    server narrows a few ranges to OpenAI's on top.

    ``top_k <= 0``, ``top_p >= 1``, ``min_p <= 0``, ``repeat_penalty == 1``, and zero presence /
    frequency penalties each turn that stage off. An option whose default is None (the seed) may
    be None: not given.
    """

    temperature: float = option(0.8, Limit(float, 0.0), "temperature; 0 = greedy")
    top_k: int = option(40, Limit(int, 0), "keep the K most likely tokens; 0 = off")
    top_p: float = option(0.95, Limit(float, 0.0, 1.0), "nucleus sampling; 1 = off")
    min_p: float = option(0.05, Limit(float, 0.0, 1.0), "drop tokens below P x the top probability; 0 = off")
    repeat_penalty: float = option(1.0, Limit(float, 0.0, lo_open=True), "penalise recently seen tokens; 1 = off")
    repeat_last_n: int = option(64, Limit(int, -1),
                                "how many recent tokens the penalties look at; 0 = none, -1 = all")
    presence_penalty: float = option(0.0, Limit(float), "subtracted from the logit of every recently seen "
                                                        "token; 0 = off")
    frequency_penalty: float = option(0.0, Limit(float), "subtracted from a recently seen token's logit once "
                                                         "per time it was seen; 0 = off")
    seed: int | None = option(None, Limit(int, 0, 2**64 - 1), "random seed for reproducible sampling")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None or f.default is not None:
                check_option(f.name, value)

    def make_sampler(self) -> Sampler:
        """The sampler for these parameters (penalties are separate: `make_logits_processors`;
        both together: `TokenPicker`)."""
        return make_sampler(self.temperature, self.top_k, self.top_p, self.min_p, self.seed)

    def make_logits_processors(self) -> list[LogitsProcessor]:
        """The history-dependent logits transforms for these parameters."""
        return make_logits_processors(self.repeat_penalty, self.repeat_last_n,
                                      self.presence_penalty, self.frequency_penalty)

    def to_dict(self) -> dict:
        return asdict(self)


# Read from the fields above, never written again.
LIMITS: dict[str, Limit] = {f.name: f.metadata["limit"] for f in fields(SamplingParams)}
HELP: dict[str, str] = {f.name: f.metadata["help"] for f in fields(SamplingParams)}


def check_option(name: str, value: float) -> float:
    """`value` if it is a valid `name` option, else ValueError naming the option and what it takes."""
    limit = LIMITS[name]
    if not limit.contains(value):
        raise ValueError(f"{name}: expected {limit.describe()}, got {value!r}")
    return value


def parse_option(name: str, text: str) -> float:
    """A `name` option from text (a CLI flag, a /set value), checked against LIMITS; the
    ValueError says what is expected (the caller names the flag or setting)."""
    limit = LIMITS[name]
    try:
        value = limit.kind(text)
    except ValueError:
        value = None
    if value is None or not limit.contains(value):
        raise ValueError(f"expected {limit.describe()}, got {text if value is not None else repr(text)}")
    return value


DEFAULTS = SamplingParams()


# -- penalties -------------------------------------------------------------------------------

def apply_penalties(logits: np.ndarray, history: Sequence[int], *,
                    repeat_penalty: float = DEFAULTS.repeat_penalty,
                    repeat_last_n: int = DEFAULTS.repeat_last_n,
                    presence_penalty: float = DEFAULTS.presence_penalty,
                    frequency_penalty: float = DEFAULTS.frequency_penalty) -> np.ndarray:
    """Penalise tokens seen in the last ``repeat_last_n`` entries of ``history`` (llama.cpp's
    rule): a positive logit is divided by ``repeat_penalty``, a negative one multiplied; then
    ``count * frequency_penalty + presence_penalty`` is subtracted from each seen token.

    Returns ``logits`` itself when no penalty is active, otherwise a penalised copy.
    """
    off = repeat_penalty == 1.0 and presence_penalty == 0.0 and frequency_penalty == 0.0
    if off or repeat_last_n == 0 or len(history) == 0:
        return logits
    recent = history if repeat_last_n < 0 else history[-repeat_last_n:]
    ids, counts = np.unique(np.asarray(recent, dtype=np.int64), return_counts=True)
    out = np.array(logits, dtype=np.float32, copy=True)
    seen = out[ids]
    if repeat_penalty != 1.0:
        seen = np.where(seen > 0, seen / repeat_penalty, seen * repeat_penalty)
    seen = seen - counts * frequency_penalty - presence_penalty
    out[ids] = seen
    return out


def make_logits_processors(repeat_penalty: float = DEFAULTS.repeat_penalty,
                           repeat_last_n: int = DEFAULTS.repeat_last_n,
                           presence_penalty: float = DEFAULTS.presence_penalty,
                           frequency_penalty: float = DEFAULTS.frequency_penalty,
                           ) -> list[LogitsProcessor]:
    """``[f(logits, history) -> logits]`` to apply before the sampler; empty when all are off."""
    if repeat_penalty == 1.0 and presence_penalty == 0.0 and frequency_penalty == 0.0:
        return []

    def penalties(logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        return apply_penalties(logits, history, repeat_penalty=repeat_penalty,
                               repeat_last_n=repeat_last_n, presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty)

    return [penalties]


def apply_logit_bias(logits: np.ndarray, bias: Mapping[int, float]) -> np.ndarray:
    """Adds ``bias[id]`` to each listed token's logit (OpenAI's ``logit_bias``: -100 all but bans
    a token, +100 all but forces it). Returns ``logits`` itself when ``bias`` is empty, otherwise
    a biased copy. Ids outside the vocabulary raise ValueError."""
    if not bias:
        return logits
    ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
    if ids.min() < 0 or ids.max() >= len(logits):
        bad = int(ids[(ids < 0) | (ids >= len(logits))][0])
        raise ValueError(f"logit_bias: token id {bad} is outside the vocabulary (0..{len(logits) - 1})")
    out = np.array(logits, dtype=np.float32, copy=True)
    out[ids] += np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
    return out


def make_logit_bias_processor(bias: Mapping[int, float] | None) -> list[LogitsProcessor]:
    """``[f(logits, history) -> logits]`` adding ``bias`` (empty when there is none). It goes
    first in the chain, before the penalties, as in llama.cpp."""
    if not bias:
        return []
    frozen = {int(k): float(v) for k, v in bias.items()}
    return [lambda logits, history: apply_logit_bias(logits, frozen)]


# -- filters ---------------------------------------------------------------------------------
# Each takes candidate ids and their logits and returns the (ids, logits) it keeps.

def apply_top_k(ids: np.ndarray, logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the ``k`` largest logits (all when ``k <= 0`` or ``k >= len``), ids still ascending."""
    if k <= 0 or k >= len(logits):
        return ids, logits
    # argpartition over 262k logits costs far more than a compare over them (docs/PERFORMANCE.md).
    # Narrow to the tokens within `width` of the best first, and partition only those (a superset
    # of the top k).
    top = logits.max()
    for width in (4.0, 8.0, 16.0, 32.0):
        near = np.flatnonzero(logits >= top - width)
        if len(near) >= k:
            ids, logits = ids[near], logits[near]
            break
    else:
        # A grammar mask (edgeinfer.constrain) may leave fewer than k finite logits, and
        # argpartition through a whole vocabulary of equal -inf values is slow: keep the finite ones.
        finite = np.flatnonzero(logits > -np.inf)
        if len(finite) <= k:
            return ids[finite], logits[finite]
    part = np.argpartition(logits, -k)[-k:]
    part.sort()
    return ids[part], logits[part]


def apply_min_p(ids: np.ndarray, logits: np.ndarray, min_p: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """Keep tokens whose probability is at least ``min_p`` times the most likely one's."""
    if min_p <= 0.0 or len(logits) <= 1:
        return ids, logits
    # p_i / p_max >= min_p  <=>  logit_i >= logit_max + log(min_p): no exp needed.
    keep = logits >= logits.max() + math.log(min_p)
    return ids[keep], logits[keep]


def sort_desc(ids: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Descending by logit; equal logits keep ascending id order (``ids`` must be ascending,
    which every filter here preserves), so results never depend on partition order."""
    order = np.argsort(-logits, kind="stable")
    return ids[order], logits[order]


def apply_top_p(ids: np.ndarray, logits: np.ndarray, top_p: float, log_total: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """Keep the smallest most-likely prefix whose probability reaches ``top_p``.

    ``ids``/``logits`` must be sorted descending; ``log_total`` is the log of the softmax
    denominator over every candidate (which may be more than the ones passed in).
    """
    if top_p >= 1.0 or len(logits) <= 1:
        return ids, logits
    cum = np.cumsum(np.exp(logits.astype(np.float64) - log_total))
    cut = min(int(np.searchsorted(cum, top_p, side="left")) + 1, len(logits))
    return ids[:cut], logits[:cut]


def _logsumexp(x: np.ndarray) -> float:
    m = x.max()
    return float(m) + math.log(float(np.exp(x - m).sum(dtype=np.float64)))


# -- the sampler -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Distribution:
    """What a sampler draws from: the candidate ids and their weights (float64, not normalised: a
    draw scales a uniform number by their sum). Ids not listed have probability 0."""

    ids: np.ndarray       # [n] token ids: ascending, or by descending logit (after top-p)
    weights: np.ndarray   # [n] float64 >= 0

    def probs(self) -> np.ndarray:
        return self.weights / self.weights.sum()

    def probs_of(self, tokens: np.ndarray) -> np.ndarray:
        """The probability of each of `tokens` (0 for those not among the candidates)."""
        order = np.argsort(self.ids)
        ids, probs = self.ids[order], self.probs()[order]
        at = np.minimum(np.searchsorted(ids, tokens), len(ids) - 1)
        return np.where(ids[at] == tokens, probs[at], 0.0)

    def prob(self, token: int) -> float:
        at = np.flatnonzero(self.ids == token)   # one compare: no sort for a single token
        return float(self.weights[at[0]] / self.weights.sum()) if len(at) else 0.0

    def draw(self, rng: np.random.Generator) -> int:
        """One token by inverse CDF: one uniform number, the first candidate whose cumulative
        weight exceeds it (a zero-weight candidate is never drawn)."""
        cdf = np.cumsum(self.weights)
        i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return int(self.ids[min(i, len(self.ids) - 1)])


def is_greedy(temperature: float, top_k: int) -> bool:
    """Whether these settings always pick the most likely token."""
    return temperature <= 0.0 or top_k == 1


def token_distribution(logits: np.ndarray, temperature: float = DEFAULTS.temperature,
                       top_k: int = DEFAULTS.top_k, top_p: float = DEFAULTS.top_p,
                       min_p: float = DEFAULTS.min_p) -> Distribution:
    """The distribution the sampler draws from for these (already biased and penalised) logits:
    top-k, min-p and top-p, then temperature and softmax over the survivors. Greedy settings put
    all the weight on the argmax (ties: the lowest id)."""
    x = np.asarray(logits, dtype=np.float32).reshape(-1)
    if is_greedy(temperature, top_k):
        return Distribution(np.array([int(np.argmax(x))]), np.ones(1))
    ids = np.arange(len(x))
    ids, x = apply_top_k(ids, x, top_k)
    log_total = _logsumexp(x) if top_p < 1.0 else 0.0
    ids, x = apply_min_p(ids, x, min_p)
    if top_p < 1.0:
        ids, x = apply_top_p(*sort_desc(ids, x), top_p, log_total)
    return Distribution(ids, np.exp((x.astype(np.float64) - float(x.max())) / temperature))


def make_sampler(temperature: float = DEFAULTS.temperature, top_k: int = DEFAULTS.top_k,
                 top_p: float = DEFAULTS.top_p, min_p: float = DEFAULTS.min_p,
                 seed: int | np.random.Generator | None = DEFAULTS.seed) -> Sampler:
    """A function ``logits (n_vocab,) -> token id`` for these settings: one draw from
    `token_distribution`.

    ``temperature <= 0`` or ``top_k == 1`` is greedy (argmax; ties go to the lowest id; no random
    number is used). Otherwise the draw uses a ``numpy.random.Generator`` seeded with ``seed``
    (fresh entropy when None; a Generator is used as it is), so equal seeds and equal logits give
    equal tokens.
    """
    if is_greedy(temperature, top_k):
        return lambda logits: int(np.argmax(logits))
    rng = np.random.default_rng(seed)
    return lambda logits: token_distribution(logits, temperature, top_k, top_p, min_p).draw(rng)


class TokenPicker:
    """The logit bias and the history-dependent penalties, then the sampler: called as
    ``picker(logits, history) -> token id``. `distribution` is what that call draws from, for the
    speculative rejection rule (edgeinfer.rejection), which draws with the same `rng`."""

    def __init__(self, params: SamplingParams, logit_bias: Mapping[int, float] | None = None,
                 rng: np.random.Generator | None = None):
        """`rng`: the generator to draw with (default: one seeded with params.seed)."""
        self.params = params
        self.rng = rng if rng is not None else np.random.default_rng(params.seed)
        self._processors = make_logit_bias_processor(logit_bias) + params.make_logits_processors()
        self._sample = make_sampler(params.temperature, params.top_k, params.top_p, params.min_p, self.rng)

    @property
    def greedy(self) -> bool:
        return is_greedy(self.params.temperature, self.params.top_k)

    def process(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """The logits after the bias and the penalties (a new array, or `logits` when none apply)."""
        for process in self._processors:
            logits = process(logits, history)
        return logits

    def most_likely(self, logits: np.ndarray, history: Sequence[int]) -> int:
        """The token greedy decoding would pick: the mode of `distribution`."""
        return int(np.argmax(self.process(logits, history)))

    def distribution(self, logits: np.ndarray, history: Sequence[int]) -> Distribution:
        p = self.params
        return token_distribution(self.process(logits, history), p.temperature, p.top_k, p.top_p, p.min_p)

    def __call__(self, logits: np.ndarray, history: Sequence[int]) -> int:
        return self._sample(self.process(logits, history))

"""KL divergence of a model's next-token distributions from a base model's, over the tokens that
perplexity scores (`edgeinfer perplexity --kl-divergence-base / --kl-divergence`).

The base file keeps, for every scored token, the base model's top-K logits (ids and values) and the
log-sum-exp of its full row, so the stored probabilities are exact. The rest of the vocabulary is
kept as one "tail" bucket: KL(P||Q) is then computed over the K ids plus that bucket, which by the
log-sum inequality is a lower bound of the full-vocabulary KL divergence, tight when the top K
hold nearly all the mass (the stored tail mass is reported). The default K = 1024 (8 bytes per id
and token) keeps the bound close to the exact mean KLD, and the 99th percentile closer still
(docs/PERFORMANCE.md). llama-perplexity stores every logit (16-bit) instead.
"""
from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgeinfer.errors import EdgeInferError
from edgeinfer.output_file import PartialFile
from edgeinfer.wording import Ref, Wording

TOP_K = 1024
FORMAT = "edgeinfer-kld-base/1"


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1, keepdims=True)
    return np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]


class BaseRecorder:
    """Collects the base model's top-K logits per scored token; `save(path)` writes them."""

    def __init__(self, k: int = TOP_K):
        self.k = k
        self.ids: list[np.ndarray] = []
        self.logits: list[np.ndarray] = []
        self.lse: list[np.ndarray] = []
        self.targets: list[np.ndarray] = []

    def __call__(self, _chunk: int, logits: np.ndarray, targets: np.ndarray) -> None:
        x = logits.astype(np.float64)
        k = min(self.k, x.shape[1])
        top = np.argpartition(-x, k - 1, axis=1)[:, :k]
        vals = np.take_along_axis(x, top, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")   # descending; column 0 is the argmax
        self.ids.append(np.take_along_axis(top, order, axis=1).astype(np.int32))
        self.logits.append(np.take_along_axis(vals, order, axis=1).astype(np.float32))
        self.lse.append(_logsumexp(x))
        self.targets.append(targets.astype(np.int32))

    def save(self, path: str | Path, meta: dict) -> None:
        """Writes the base file at `path`, through a temporary file (an error names `path`)."""
        partial = PartialFile(path)
        try:
            with partial.errors(), open(partial.tmp_path, "wb") as f:
                np.savez(f, ids=np.concatenate(self.ids), logits=np.concatenate(self.logits),
                         lse=np.concatenate(self.lse), targets=np.concatenate(self.targets),
                         meta=np.array(json.dumps({"format": FORMAT, "k": self.k, **meta})))
            partial.publish()
        finally:
            partial.discard()


@dataclass
class KLDResult:
    n: int
    mean_kld: float
    mean_kld_stderr: float
    median_kld: float
    kld_99: float
    max_kld: float
    same_top_pct: float
    same_top_stderr: float
    mean_tail_mass: float       # base probability outside the stored top K (the bound's slack)
    klds: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "klds"}


class Comparer:
    """Computes per-token KL(base || model) against a saved base file, chunk by chunk."""

    def __init__(self, path: str | Path):
        try:
            with np.load(path, allow_pickle=False) as z:
                self.meta = json.loads(str(z["meta"]))
                self.ids, self.logits = z["ids"], z["logits"].astype(np.float64)
                self.lse, self.targets = z["lse"], z["targets"]
        except OSError as exc:
            raise EdgeInferError(f"cannot read the KL-divergence base file {path}: {exc.strerror or exc}") from None
        except (KeyError, ValueError, EOFError, zipfile.BadZipFile):   # numpy's reasons would not help the reader
            raise EdgeInferError(f"{path}: not a KL-divergence base file (those are written by perplexity "
                                 "--kl-divergence-base FILE)") from None
        if self.meta.get("format") != FORMAT:
            raise EdgeInferError(f"{path}: unknown base file format {self.meta.get('format')!r}")
        self.pos = 0
        self.klds: list[np.ndarray] = []
        self.same: list[np.ndarray] = []
        self.tail: list[np.ndarray] = []

    def __call__(self, _chunk: int, logits: np.ndarray, targets: np.ndarray) -> None:
        n = len(targets)
        sl = slice(self.pos, self.pos + n)
        if self.pos + n > len(self.targets) or not np.array_equal(self.targets[sl], targets):
            raise EdgeInferError("the text, chunk size or tokenizer differs from the base run's "
                                 "(the scored tokens do not match)")
        self.pos += n
        x = logits.astype(np.float64)
        lse_q = _logsumexp(x)
        ids = self.ids[sl]
        log_p = self.logits[sl] - self.lse[sl][:, None]                     # [n, K], exact
        log_q = np.take_along_axis(x, ids, axis=1) - lse_q[:, None]
        p, q = np.exp(log_p), np.exp(log_q)
        p_tail = np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
        q_tail = np.clip(1.0 - q.sum(axis=1), 1e-300, 1.0)
        kl = (p * (log_p - log_q)).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            kl += np.where(p_tail > 0, p_tail * (np.log(np.maximum(p_tail, 1e-300)) - np.log(q_tail)), 0.0)
        self.klds.append(np.maximum(kl, 0.0))
        self.same.append(ids[:, 0] == x.argmax(axis=1))
        self.tail.append(p_tail)

    def result(self) -> KLDResult:
        if self.pos != len(self.targets):
            raise EdgeInferError(Wording(f"scored {self.pos} tokens, the base file has {len(self.targets)} "
                                         "(different text, chunk size or ", Ref("n_chunks"), ")"))
        kld = np.concatenate(self.klds)
        same = np.concatenate(self.same).astype(np.float64)
        n = len(kld)
        return KLDResult(
            n=n, mean_kld=float(kld.mean()), mean_kld_stderr=float(kld.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
            median_kld=float(np.median(kld)), kld_99=float(np.percentile(kld, 99)), max_kld=float(kld.max()),
            same_top_pct=100.0 * float(same.mean()),
            same_top_stderr=100.0 * math.sqrt(float(same.mean()) * (1 - float(same.mean())) / max(n - 1, 1)),
            mean_tail_mass=float(np.concatenate(self.tail).mean()), klds=kld)

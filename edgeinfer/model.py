"""`edgeinfer.Model`: the Python API everything else (CLI, server, REPL) is built on."""
from __future__ import annotations

import contextlib
import os
import warnings
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Mapping, Sequence

import numpy as np

from edgeinfer import _core
import dataclasses

from edgeinfer.errors import ContextOverflowError, EdgeInferError
from edgeinfer.chat_template import (ChatPrompt, ChatTemplate, Messages, apply_chat_template,
                                     template_for_vocab)
from edgeinfer.generate import GenerationResult, TokenHook, make_token_picker, stream_generate
from edgeinfer.parallel import StepBatcher
from edgeinfer.prompt_cache import DEFAULT_SNAPSHOT_BUDGET, PromptCache, SnapshotStore
from edgeinfer.sampling import DEFAULTS
from edgeinfer.text_check import require_valid_text
from edgeinfer.threads import resolve_n_threads
from edgeinfer.wording import Ref, Wording

if TYPE_CHECKING:  # llguidance and the tool layer load on first use
    from edgeinfer.constrain import GrammarMatcher
    from edgeinfer.draft_model import DraftModel
    from edgeinfer.tools import ToolPlan, ToolSupport
    from edgeinfer.reasoning import ReasoningStyle
    from edgeinfer.tools.formats import ToolFormat

KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")
# llama.cpp's pooling types, in the order of its enum (the GGUF <arch>.pooling_type values).
POOLING_TYPES = ("none", "mean", "cls", "last", "rank")
# n_ctx=0/None takes the model's trained context, capped here (a 128k-token KV cache would not
# fit on the machines this runs on; ask for more explicitly).
DEFAULT_MAX_N_CTX = 8192


def resolve_n_ctx(requested: int | None, n_ctx_train: int) -> int:
    """The context size to allocate: `requested`, clamped to the trained context with a warning;
    0/None = the trained context capped at DEFAULT_MAX_N_CTX."""
    if not requested:
        return min(n_ctx_train, DEFAULT_MAX_N_CTX) if n_ctx_train > 0 else 2048
    if requested < 0:
        raise ValueError(f"n_ctx must be positive (or 0 for the model's context), got {requested}")
    if 0 < n_ctx_train < requested:
        warnings.warn(f"n_ctx={requested} exceeds the model's trained context of {n_ctx_train} tokens; "
                      f"using n_ctx={n_ctx_train}", stacklevel=3)
        return n_ctx_train
    return requested


class Model:
    """A GGUF model loaded for inference, with one decoding context.

    >>> m = Model.load("SmolLM2-135M-Instruct.Q4_1.gguf", n_ctx=2048)
    >>> for piece in m.generate("The capital of France is", max_tokens=16, temperature=0):
    ...     print(piece, end="")
    """

    def __init__(self, core: _core.Model, ctx: _core.Context, path: Path,
                 snapshot_budget: int = DEFAULT_SNAPSHOT_BUDGET):
        self._core = core
        self._ctx = ctx
        if ctx.n_seq == 1:
            self._caches = [PromptCache(ctx, snapshot_budget=snapshot_budget)]
        else:   # parallel generations: one cache per sequence, decoding in shared steps
            self.batcher = StepBatcher(ctx)
            snapshots = SnapshotStore(snapshot_budget)
            self._caches = [PromptCache(self.batcher.sequence(i), snapshots=snapshots) for i in range(ctx.n_seq)]
        self._cache = self._caches[0]
        self.path = path
        self._metadata: dict[str, Any] | None = None
        self.placement = None  # edgeinfer.gpu.placement.Placement when loaded with gpu_layers
        self._embeddings = False    # loaded with embeddings=True
        self._pooling: str | None = None  # load's pooling override

    @classmethod
    def load(
        cls, path: str | os.PathLike, n_ctx: int | None = 2048, n_threads: int | None = None, n_batch: int = 512,
        cache_type_k: str = "f16", cache_type_v: str = "f16", snapshot_budget: int = DEFAULT_SNAPSHOT_BUDGET,
        cache_rotate_k: bool | None = None, cache_center_k: bool | None = None, gpu_layers: str | int | None = None,
        device: int = 0, require_gpu: bool = False, n_parallel: int = 1, exact: bool | None = None,
        embeddings: bool = False, pooling: str | None = None,
    ) -> "Model":
        """Maps the file, reads its metadata and vocabulary, binds the weights (no copy) and makes a
        context of `n_ctx` positions (clamped to the model's trained context with a warning;
        0/None = the trained context, at most DEFAULT_MAX_N_CTX). n_threads None = the number of
        physical cores. cache_type_k/cache_type_v: KV cache types, "f16", "q8_0" or "q4_0".
        cache_rotate_k: store K Hadamard-rotated (None: where it pays, which is a q4_0 K; see
        docs/PERFORMANCE.md). cache_center_k: store a quantized K centered on the mean of the
        first keys, which are kept in F16 (None: where it pays, a q4_0 K). Attention results are the
        same up to quantization error.
        snapshot_budget: bytes of prefix snapshots the prompt cache may keep (0 = none).
        gpu_layers: layers to offload to OpenCL device `device` ("4": the last 4, "all", "auto",
        "0-5,12"; None/0: none), as edgeinfer.gpu.placement plans them; `placement` says what
        went where. No OpenCL device: a warning and the CPU, or EdgeInferError with require_gpu.
        A request that cannot be met raises edgeinfer.gpu.placement.PlacementError (an
        EdgeInferError) whose `param` names the keyword at fault.
        Offloaded layers keep their KV cache on the device, in the same format (types, rotation,
        centering) as the CPU's layers.
        n_parallel: generations that can run at once, each in its own thread with its own cache
        of n_ctx positions (`prompt_caches`; generate's `prompt_cache`), sharing each decode step
        (edgeinfer.parallel); the KV memory grows n_parallel times. Not with gpu_layers yet.
        exact: True computes every matmul in llama.cpp's float order (its logits bit for bit on
        the same ISA); False in the fast order, where Q4_0, Q4_1 and Q8_0 weights sum each block
        exactly and round once (docs/PERFORMANCE.md: its KL divergence against llama.cpp's); None:
        fast unless the environment sets EDGEINFER_EXACT=1. Either way a token decoded in a batch
        gets the logits it gets alone.
        embeddings: make a generative model usable for `embed` (llama.cpp's --embeddings); an
        encoder or a file with a pooling type is always usable. pooling: overrides the file's
        (`POOLING_TYPES`; the file's `<arch>.pooling_type`, else "none" as in llama.cpp)."""
        path = Path(path)
        if pooling is not None and pooling not in POOLING_TYPES:
            raise ValueError(Wording("", Ref("pooling"), f" must be one of {', '.join(POOLING_TYPES)}, got {pooling!r}"))
        if not path.exists():
            raise FileNotFoundError(f"model file not found: {path}")
        for name, value in (("cache_type_k", cache_type_k), ("cache_type_v", cache_type_v)):
            if value not in KV_CACHE_TYPES:
                raise ValueError(f"{name} must be one of {', '.join(KV_CACHE_TYPES)}, got {value!r}")
        if not 1 <= n_parallel <= 256:
            raise ValueError(Wording("", Ref("n_parallel"), f" must be in 1..256, got {n_parallel}"))
        if n_parallel > 1 and gpu_layers not in (None, 0, "0"):
            raise ValueError(Wording("", Ref("n_parallel"), " > 1 cannot run with ", Ref("gpu_layers"),
                                     " yet (parallel sequences run on the CPU only)"))
        core = _core.Model(os.fsencode(path), exact=exact)   # bytes: a file name need not be UTF-8
        n_ctx = resolve_n_ctx(n_ctx, core.n_ctx_train)
        placement, offload = None, {}
        if gpu_layers == "auto" and core.is_encoder:
            gpu_layers = None   # an encoder runs on the CPU; "auto" asks for nothing in particular
        if gpu_layers is not None:
            from edgeinfer.gpu.model_plan import plan_offload
            placement, offload = plan_offload(core.gguf, str(gpu_layers), device, n_ctx,
                                              (cache_type_k, cache_type_v), require_gpu)
        ctx = _core.Context(core, n_ctx=n_ctx, n_threads=resolve_n_threads(n_threads, stacklevel=2), n_batch=n_batch,
                            type_k=cache_type_k, type_v=cache_type_v, rotate_k=cache_rotate_k,
                            center_k=cache_center_k, n_seq=n_parallel, **offload)
        model = cls(core, ctx, path, snapshot_budget=snapshot_budget)
        model.placement = placement
        model._embeddings = bool(embeddings)
        model._pooling = pooling
        return model

    # --- facts about the model -------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """GGUF key/value metadata (arrays as lists), built on first use."""
        if self._metadata is None:
            self._metadata = self._core.gguf.metadata()
        return self._metadata

    @property
    def tensor_infos(self) -> list[dict]:
        return self._core.gguf.tensors()

    arch = property(lambda self: self._core.arch)
    n_params = property(lambda self: self._core.n_params)
    n_vocab = property(lambda self: self._core.n_vocab)
    n_ctx_train = property(lambda self: self._core.n_ctx_train)
    n_ctx = property(lambda self: self._ctx.n_ctx)
    n_threads = property(lambda self: self._ctx.n_threads)
    load_ms = property(lambda self: self._core.load_ms)
    fingerprint = property(lambda self: self._core.fingerprint,
                           doc="64-bit hash of the file's header, metadata and tensor table.")
    file_size = property(lambda self: self._core.gguf.file_size)
    isa = property(lambda self: _core.isa())
    vocab = property(lambda self: self._core.vocab)
    context = property(lambda self: self._ctx, doc="The native context (KV cache + logits).")
    prompt_cache = property(lambda self: self._cache, doc="The prompt cache over the context (its first sequence).")
    prompt_caches = property(lambda self: list(self._caches),
                             doc="A prompt cache per sequence (n_parallel of them); the first is prompt_cache.")
    n_parallel = property(lambda self: len(self._caches))
    cache_type_k = property(lambda self: self._ctx.type_k)
    cache_type_v = property(lambda self: self._ctx.type_v)
    cache_rotate_k = property(lambda self: self._ctx.rotate_k, doc="True if K is stored Hadamard-rotated.")
    cache_center_k = property(lambda self: self._ctx.center_k, doc="True if K is stored centered.")
    kv_bytes_per_token = property(lambda self: self._ctx.kv_bytes_per_token)
    kv_bytes = property(lambda self: self._ctx.kv_bytes, doc="KV cache bytes at n_ctx.")

    def kv_summary(self) -> str:
        """One line for verbose output: KV types, bytes per token and the total at n_ctx."""
        rotated = " (K rotated, centered)" if self.cache_center_k and self.cache_rotate_k else \
            " (K rotated)" if self.cache_rotate_k else " (K centered)" if self.cache_center_k else ""
        return (f"KV cache {self.cache_type_k}/{self.cache_type_v}{rotated} (K/V): "
                f"{self.kv_bytes_per_token:,} bytes per token, {self.kv_bytes / 2**20:.1f} MiB at n_ctx={self.n_ctx}")

    # --- saved states ----------------------------------------------------------------------------
    def save_state(self, path: str | os.PathLike) -> int:
        """Saves the cached prompt (tokens + KV rows) to `path`, atomically; returns the number of
        tokens saved. A later `load_state` (same model file, same KV types) makes a prompt that
        starts with them skip their prefill."""
        return self._cache.save(path)

    def load_state(self, path: str | os.PathLike) -> int:
        """Restores a state written by `save_state`; returns its token count. A corrupt, truncated
        or foreign file raises StateFileError and leaves the context as it was."""
        return self._cache.load(path)

    # --- text <-> tokens -------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of `text`; ValueError if it holds a lone surrogate (see edgeinfer.text_check)."""
        require_valid_text(text, "the text to tokenize")
        return self._core.vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, ids: Sequence[int], special: bool = False) -> str:
        return self._core.vocab.detokenize([int(i) for i in ids], special).decode("utf-8", errors="replace")

    # --- evaluation ------------------------------------------------------------------------------
    def eval_logits(self, ids: Sequence[int], first: int = 0) -> np.ndarray:
        """Logits for positions first..len(ids)-1 of `ids`, from an empty context:
        [len(ids) - first, n_vocab] (a copy). Rows before `first` are not computed."""
        self._cache.reset()
        self._cache.decode(ids, logits_from=first)
        # The cache's sequence's rows: with parallel generations the context's latest logits may
        # already be another sequence's step.
        return np.array(self._cache.ctx.logits)

    # --- embeddings and reranking (llama.cpp's --embeddings, --pooling, --reranking) -------------
    @property
    def pooling(self) -> str:
        """How `embed` pools the hidden states: load's `pooling`, else the file's pooling type."""
        return self._pooling or self._core.pooling

    @property
    def is_encoder(self) -> bool:
        """An encoder (BERT, EmbeddingGemma): it embeds (and reranks) but cannot generate."""
        return self._core.is_encoder

    @property
    def can_embed(self) -> bool:
        """True for an encoder, a file with a pooling type, or a model loaded with embeddings=True."""
        return self._embeddings or self.is_encoder or f"{self.arch}.pooling_type" in self._core.gguf

    @property
    def can_rerank(self) -> bool:
        """True when `rerank` works: rank pooling over a classification head."""
        return self.can_embed and self.pooling == "rank" and self._core.n_cls_out > 0

    @property
    def n_embd_out(self) -> int:
        """Floats per embedding: the hidden size (or the Dense projections' output: EmbeddingGemma),
        or the classification head's outputs (rank)."""
        return self._core.n_cls_out if self.pooling == "rank" else self._core.n_embd_out

    def embed(self, inputs: str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]], *,
              normalize: bool = True, truncate: bool = False) -> np.ndarray | list[np.ndarray]:
        """Embeddings of `inputs` (a text, texts, token ids, or lists of token ids): float32
        [n_inputs, n_embd_out], one row per input; with pooling "none" a list of [n_tokens, n_embd]
        arrays instead. Texts are tokenized with the special tokens ([CLS] ... [SEP] for BERT).
        No input sees another, and a batch gives each input the floats it gets by itself (an
        encoder's inputs share passes through the weights, each in its own attention). normalize: L2 (llama.cpp's default embd_normalize 2; never for rank scores).
        An input longer than the context raises ContextOverflowError unless truncate=True, which
        cuts it to the context, keeping the start. Runs in the context's sequence 0 (its prompt
        cache is emptied): not at the same time as a generation on this Model."""
        if not self.can_embed:
            raise EdgeInferError(f"{self.path.name} is a generative model: load it with embeddings=True "
                                 "(the server's --embeddings) to embed with it")
        batch = self._embedding_inputs(inputs, truncate)
        return self._run_embed(batch, self.pooling, normalize and self.pooling != "rank")

    def rerank(self, query: str, documents: Sequence[str], *, truncate: bool = False) -> np.ndarray:
        """Relevance scores of `documents` for `query`: float32 [n_docs], the classification
        head's first output (what llama.cpp's server returns; a Qwen 3 reranker's is P("yes")).
        Each pair is the file's rerank prompt (`tokenizer.chat_template.rerank`, with {query} and
        {document} filled in, special tokens parsed, none added) where it has one, else the pair
        joined with the model's special tokens ([CLS] query [SEP] document [SEP] for BERT,
        <s> query </s></s> document </s> for XLM-RoBERTa). Only for rank-pooling models
        (`can_rerank`)."""
        if not self.can_rerank:
            raise EdgeInferError(f"{self.path.name} cannot rerank: that needs a model with rank pooling and a "
                                 "classification head (a cross-encoder reranker)")
        require_valid_text(query, "the query")
        for doc in documents:
            require_valid_text(doc, "a document")
        template = self._rerank_template()
        if template is not None:
            pairs = [self.tokenize(template.replace("{query}", query).replace("{document}", doc),
                                   add_special=False, parse_special=True) for doc in documents]
        else:
            q = self.tokenize(query, add_special=False)
            pairs = [self._core.vocab.pair(q, self.tokenize(doc, add_special=False)) for doc in documents]
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        scores = self._run_embed(self._checked_lengths(pairs, truncate), "rank", False)
        return np.ascontiguousarray(scores[:, 0])

    def _rerank_template(self) -> str | None:
        """The file's rerank prompt (llama.cpp's llama_model_chat_template(model, "rerank")), or None."""
        key = "tokenizer.chat_template.rerank"
        gguf = self._core.gguf
        return gguf.get_string(key) if key in gguf else None

    def _embedding_inputs(self, inputs, truncate: bool) -> list[list[int]]:
        if isinstance(inputs, str):
            inputs = [inputs]
        inputs = list(inputs)
        if inputs and all(isinstance(i, (int, np.integer)) for i in inputs):
            inputs = [inputs]
        batch = []
        for item in inputs:
            if isinstance(item, str):
                batch.append(self.tokenize(item, add_special=True))
            else:
                batch.append([int(t) for t in item])
        return self._checked_lengths(batch, truncate)

    def _checked_lengths(self, batch: list[list[int]], truncate: bool) -> list[list[int]]:
        n_ctx = self.n_ctx
        for i, ids in enumerate(batch):
            if not ids:
                raise ValueError(f"input {i} has no tokens")
            if len(ids) > n_ctx:
                if not truncate:
                    raise ContextOverflowError(Wording(f"input {i} has {len(ids)} tokens, more than the context of "
                                                       f"{n_ctx}; shorten it or pass ", Ref("truncate", True)))
                batch[i] = ids[:n_ctx]
        return batch

    def _run_embed(self, batch: list[list[int]], pooling: str, normalize: bool):
        if not batch:
            return [] if pooling == "none" else np.zeros((0, self.n_embd_out), dtype=np.float32)
        self._cache.reset()   # the engine empties sequence 0 for each input
        # With parallel sequences the step batcher's thread drives the same context: its lock
        # keeps their decode steps and this call apart (the core is not reentrant).
        batcher = getattr(self, "batcher", None)
        with batcher.core_lock if batcher is not None else contextlib.nullcontext():
            out = self._ctx.embed([np.asarray(ids, dtype=np.int32) for ids in batch], pooling)
        if normalize:
            out = [_l2_normalize(a) for a in out]
        return out if pooling == "none" else np.stack(out).astype(np.float32, copy=False)

    # --- generation ------------------------------------------------------------------------------
    def generate(
        self,
        prompt: str | Sequence[int],
        max_tokens: int = 128,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repeat_penalty: float | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        add_special: bool = True,
        context_overflow: str = "stop",
        n_keep: int | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        logit_bias: Mapping[int, float] | None = None,
        on_token: TokenHook | None = None,
        json_schema: Mapping[str, Any] | str | bool | None = None,
        grammar: str | None = None,
        matcher: GrammarMatcher | None = None,
        repeat_last_n: int | None = None,
        speculative: bool = True,
        prompt_cache: PromptCache | None = None,
        draft: DraftModel | Model | None = None,
    ) -> Generator[str, None, GenerationResult]:
        """Streams the continuation of `prompt` (text, or token ids used as they are) as text pieces.

        The generator's return value (StopIteration.value) is a GenerationResult with the tokens,
        the text, the finish reason ("stop" or "length") and timings. temperature=0 is greedy.
        The sampling options (temperature ... frequency_penalty, repeat_last_n) are the fields of
        `SamplingParams`, which says what each does and takes; those left as None take its defaults.

        When generation reaches the end of the context, `context_overflow="stop"` (default) ends
        it with finish_reason "length"; "shift" keeps the first `n_keep` tokens (default: the BOS
        token if the prompt starts with it), drops the oldest half of the rest and continues.
        A prompt that does not fit raises ContextOverflowError.

        `logit_bias` maps token ids to values added to their logits before sampling (OpenAI's
        meaning). `on_token(token, logits)` sees every generated token and its raw logits, and may
        raise to abort (see `stream_generate`).

        Constrained decoding (at most one of these; see edgeinfer.constrain.grammar for the JSON
        bounds: compact JSON, at most 12 integer and 6 fraction digits unless the schema bounds them):
        `json_schema` a JSON Schema (dict or JSON text): the text validates against it;
        `json_schema=True` any JSON object; `grammar` a Lark grammar (llguidance's dialect).
        No special token appears in the text; the grammar's end ends generation with finish_reason
        "stop" (max_tokens can still cut it first: "length"). An invalid schema or grammar raises
        ValueError with the compiler's message. `matcher` is a constraint compiled beforehand
        (`compile_constraint`), used once; special tokens its grammar names appear in the text.

        `speculative` (on by default) guesses tokens from earlier text (prompt lookup) and checks
        several in one decode call, as many as pay on this model and CPU (none when guessing does
        not pay): exactly the tokens plain decoding gives, for the same seed too, sooner when the
        answer repeats earlier text (GenerationResult.drafts counts guesses and hits). Not used with
        a constraint. `draft` (a DraftModel, or a Model of the same vocabulary) guesses with a draft
        model instead (edgeinfer.draft_model: the same tokens, or sampling without a seed, the same
        distribution).

        `prompt_cache`: one of `prompt_caches` to generate in (a model loaded with n_parallel > 1
        runs one generation per cache at once, from as many threads); default `prompt_cache`."""
        ids = self.tokenize(prompt, add_special=add_special) if isinstance(prompt, str) else [int(i) for i in prompt]
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        for s in stop:
            require_valid_text(s, "a stop string")
        overrides = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                         repeat_penalty=repeat_penalty, seed=seed, presence_penalty=presence_penalty,
                         frequency_penalty=frequency_penalty, repeat_last_n=repeat_last_n)
        params = dataclasses.replace(DEFAULTS, **{k: v for k, v in overrides.items() if v is not None})
        if logit_bias:
            bad = [t for t in logit_bias if not 0 <= int(t) < self.n_vocab]
            if bad:
                raise ValueError(f"logit_bias: token id {bad[0]} is outside the vocabulary (0..{self.n_vocab - 1})")
        sampler = make_token_picker(params, logit_bias)
        if json_schema is not None or grammar is not None:
            if matcher is not None:
                raise ValueError("give json_schema, grammar or matcher, not several")
            matcher = self.compile_constraint(json_schema, grammar)
        if n_keep is None:
            bos = self._core.vocab.bos
            n_keep = 1 if ids and bos >= 0 and ids[0] == bos else 0
        cache = self._cache if prompt_cache is None else prompt_cache
        if not any(cache is c for c in self._caches):
            raise ValueError("prompt_cache must be one of this model's prompt_caches")
        return stream_generate(self._core, cache, ids, sampler, max_tokens, stop, load_ms=self.load_ms,
                               context_overflow=context_overflow, n_keep=n_keep, on_token=on_token,
                               matcher=matcher, speculative=speculative, draft=draft)

    def complete(self, prompt: str | Sequence[int], **kwargs) -> GenerationResult:
        """Runs generate() to the end and returns its result."""
        return _run_to_end(self.generate(prompt, **kwargs))

    def compile_constraint(self, json_schema: Mapping[str, Any] | str | bool | None = None,
                           grammar: str | None = None) -> GrammarMatcher | None:
        """The matcher for generate()'s json_schema / grammar (None when neither is given);
        ValueError with the compiler's message when it does not compile."""
        from edgeinfer.constrain import GrammarMatcher, make_grammar  # imported on first use (slow)
        spec = make_grammar(json_schema, grammar)
        if spec is None:
            return None
        texts = None if spec.unique_items_schema is None else self.constraint_token_texts
        return GrammarMatcher(self.constraint_tokenizer, spec.text, spec.unique_items_schema, texts)

    @cached_property
    def constraint_tokenizer(self):
        """llguidance's tokenizer for this vocabulary (edgeinfer.constrain.tokenizer), built on
        first use (about a second for a 262k vocabulary) and kept."""
        from edgeinfer.constrain import make_lltokenizer
        return make_lltokenizer(self._core.vocab, self.n_vocab)

    @cached_property
    def constraint_token_texts(self):
        """Token texts for the uniqueItems guard (edgeinfer.constrain.unique), built on first use."""
        from edgeinfer.constrain.unique import TokenTexts
        return TokenTexts(self.constraint_tokenizer)

    # --- chat ------------------------------------------------------------------------------------
    @cached_property
    def chat_template(self) -> ChatTemplate:
        """The file's `tokenizer.chat_template`, else a built-in one for the model's family;
        `.origin` says which. ChatTemplateError if there is none."""
        gguf = self._core.gguf
        # A template of another type is a ModelFormatError naming the key, not a Jinja TypeError.
        file_template = gguf.get_string("tokenizer.chat_template") if "tokenizer.chat_template" in gguf else None
        return template_for_vocab(self.arch, file_template, self._core.vocab)

    def chat_prompt(self, messages: Messages | str, add_generation_prompt: bool = True,
                    tools: Sequence[Mapping[str, Any]] | None = None,
                    template_kwargs: Mapping[str, Any] | None = None) -> ChatPrompt:
        """`messages` ({"role", "content"} dicts, or one user message as a string) rendered with
        the chat template and tokenized; `tools` are passed to the template as they are, and so
        are `template_kwargs` (e.g. enable_thinking, reasoning_effort)."""
        taken = {"messages", "add_generation_prompt", "tools"} & set(template_kwargs or {})
        if taken:
            raise ValueError(f"template_kwargs cannot set {', '.join(sorted(taken))}: the chat prompt sets it")
        extra = {**(template_kwargs or {}), **({"tools": tools} if tools else {})}
        return apply_chat_template(self.chat_template, self._core.vocab, messages, add_generation_prompt, **extra)

    @cached_property
    def tool_support(self) -> ToolSupport:
        """What the chat template shows of tool use and how this model writes calls
        (edgeinfer.tools.prompt), found once."""
        from edgeinfer.tools import tool_support
        return tool_support(self.chat_template, self._special_token_id)

    def _special_token_id(self, text: str) -> int | None:
        """The id of `text` when it is one token that constrained text treats as special."""
        from edgeinfer.constrain.tokenizer import SPECIAL_PREFIX, token_bytes
        ids = self._core.vocab.tokenize(text, False, True)
        if len(ids) == 1 and token_bytes(self._core.vocab, ids[0]) == SPECIAL_PREFIX + text.encode():
            return ids[0]
        return None

    def plan_tools(self, messages: Messages | str, tools: Sequence[Mapping[str, Any]] | None = None,
                   tool_choice: Any = None, parallel_tool_calls: bool | None = None) -> ToolPlan:
        """How to render and decode a conversation with tools (OpenAI's `tools` / `tool_choice`
        shapes); ToolSpecError names a field that is not well-formed."""
        from edgeinfer.constrain.grammar import bounded_schema
        from edgeinfer.tools import parse_tool_choice, parse_tools, plan_tool_use
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        parsed = parse_tools(tools) if tools else []
        choice = parse_tool_choice(tool_choice, parsed)
        return plan_tool_use(self.tool_support, messages, parsed, choice, parallel_tool_calls, bounded_schema)

    def chat(self, messages: Messages | str, tools: Sequence[Mapping[str, Any]] | None = None,
             tool_choice: Any = None, parallel_tool_calls: bool | None = None,
             **kwargs) -> Generator[str, None, GenerationResult]:
        """Streams the model's answer to a conversation; takes generate()'s keyword arguments.

        With `tools` (OpenAI's shape), the template shows them (or a preamble does) and calls are
        decoded under a grammar: `tool_choice` "auto" (default), "none", "required" or
        {"type": "function", "function": {"name": ...}}; `parallel_tool_calls` None allows several
        calls per answer when the template shows tools (edgeinfer.tools.plan_tool_use). The pieces are the raw answer (call
        and reasoning markup included; edgeinfer.chat_answer reads them apart as they stream);
        the result's `tool_calls` holds the calls, `content` the text before them (the answer),
        `reasoning_content` a reasoning model's reasoning, and finish_reason is "tool_calls"
        when calls were made."""
        from edgeinfer.reasoning import reasoning_style
        from edgeinfer.tools import uses_tools
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        plan = None
        if uses_tools(messages, tools) or tool_choice is not None:
            plan = self.plan_tools(messages, tools, tool_choice, parallel_tool_calls)
            prompt = self.chat_prompt(plan.messages, tools=plan.template_tools)
        else:
            prompt = self.chat_prompt(messages)
        reasoning = reasoning_style(self.chat_template.source, prompt.text)
        fmt = plan.format if plan is not None and plan.grammar is not None else None
        if fmt is not None:
            kwargs["grammar"] = plan.grammar
        gen = self.generate(prompt.ids, **kwargs)
        if reasoning is None and fmt is None:
            return gen
        return _read_answer(gen, reasoning, fmt)

    def chat_complete(self, messages: Messages | str, **kwargs) -> GenerationResult:
        """Runs chat() to the end and returns its result (with `tool_calls` when tools were given)."""
        return _run_to_end(self.chat(messages, **kwargs))


def _l2_normalize(a: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, a zero row left as it is (llama.cpp's common_embd_normalize 2)."""
    norm = np.sqrt(np.sum(a.astype(np.float64) ** 2, axis=-1, keepdims=True))
    return (a / np.where(norm > 0, norm, 1.0)).astype(np.float32)


def _run_to_end(gen: Generator[str, None, GenerationResult]) -> GenerationResult:
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value


def _read_answer(gen: Generator[str, None, GenerationResult], reasoning: ReasoningStyle | None,
                 fmt: ToolFormat | None) -> Generator[str, None, GenerationResult]:
    """`gen`'s pieces, unchanged; its result with the reasoning, content and tool calls read back."""
    from edgeinfer.chat_answer import read_answer
    result = yield from gen
    answer = read_answer(result.text, reasoning, fmt, cut=result.finish_reason == "length")
    result.reasoning_content, result.content, result.tool_calls = answer.reasoning, answer.content, answer.tool_calls
    if result.tool_calls and result.finish_reason == "stop":
        result.finish_reason = "tool_calls"
    return result

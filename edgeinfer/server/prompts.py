"""From a validated request to a `GenerationJob`: which model, which features, the prompt's
token ids (chat template or plain text), the room left in the context and the sampling options.

Everything here can fail only because of the request, so every failure is a 4xx `APIError`,
raised before the job reaches the engine (and before a stream starts, so a streamed request
still gets a real status code).
"""
from __future__ import annotations

from typing import Any

from dataclasses import replace

from edgeinfer.chat_template import ChatPrompt, tokenize_chat_prompt
from edgeinfer.continuation import ContinuationError, continuation_mode, continued_prompt, end_not_return
from edgeinfer.errors import ChatTemplateError, headline
from edgeinfer.model import Model
from edgeinfer.prompt_cache import common_prefix
from edgeinfer.reasoning import ReasoningStyle, reasoning_style
from edgeinfer.server.config import ServerConfig
from edgeinfer.server.errors import APIError, context_overflow
from edgeinfer.server.schemas import REQUEST_SAMPLING_OPTIONS, ChatCompletionRequest, CompletionRequest, SamplingFields
from edgeinfer.server.worker import GenerationJob
from edgeinfer.tools import ToolPlan, ToolSpecError, uses_tools

UINT64_MASK = (1 << 64) - 1


def not_supported(feature: str, param: str) -> APIError:
    return APIError(400, f"{feature} is not supported yet.", param=param, code="not_supported")


def check_can_generate(model: Model) -> None:
    """An encoder (BERT: an embedding model) has no decoder to generate with."""
    if getattr(model, "is_encoder", False):
        raise APIError(400, f"The model {model.path.name} is an embedding model ({model.arch}): it cannot generate "
                            f"text; use /v1/embeddings (or /v1/rerank) with it.", param="model",
                       code="not_a_generative_model")


def _check_common(req: SamplingFields) -> None:
    if req.n != 1:
        raise not_supported("n > 1 (several choices per request)", "n")


def check_supported_chat(req: ChatCompletionRequest) -> None:
    _check_common(req)
    if req.functions:
        raise not_supported("Function calling ('functions')", "functions")
    other = [m for m in req.modalities or () if m != "text"]
    if other:
        raise APIError(400, f"This server produces text only, but 'modalities' asks for {other[0][:40]!r}.",
                       param="modalities", code="not_supported")
    if req.audio is not None:
        raise APIError(400, "This server produces text only, but 'audio' sets options for audio output.",
                       param="audio", code="not_supported")


def check_supported_completion(req: CompletionRequest) -> None:
    _check_common(req)
    if req.echo:
        raise not_supported("echo", "echo")
    if req.suffix:
        raise not_supported("suffix (fill-in-the-middle)", "suffix")
    if req.best_of is not None and req.best_of > 1:
        raise not_supported("best_of > 1", "best_of")


def chat_messages(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The messages as the chat template expects them. OpenAI's "developer" role is the system
    role of newer models; templates know only "system". A past turn's reasoning goes back under
    the names the templates read it by."""
    messages = []
    for m in req.messages:
        message: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role}
        if isinstance(m.content, list):
            message["content"] = [part.model_dump(exclude_none=True) for part in m.content]
        else:
            message["content"] = m.content
        for key in ("name", "tool_calls", "tool_call_id"):
            value = getattr(m, key)
            if value is not None:
                message[key] = value
        if m.reasoning_content is not None:
            # Qwen3's template reads reasoning_content, gpt-oss's `thinking` (as llama.cpp passes it)
            message["reasoning_content"] = message["thinking"] = m.reasoning_content
        messages.append(message)
    return messages


def tool_plan(req: ChatCompletionRequest, model: Model) -> ToolPlan | None:
    """How tools and past calls are rendered and decoded; None when the conversation has none."""
    messages = chat_messages(req)
    if not uses_tools(messages, req.tools) and req.tool_choice is None:
        return None
    try:
        return model.plan_tools(messages, req.tools, req.tool_choice, req.parallel_tool_calls)
    except ToolSpecError as exc:
        raise APIError(400, str(exc), param=exc.field, code="invalid_value") from exc
    except ChatTemplateError as exc:   # the template failed while its tool support was probed
        raise APIError(400, str(exc), param="messages", code="chat_template_error") from exc
    except ValueError as exc:
        raise APIError(400, str(exc), param="messages", code="invalid_value") from exc


def chat_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, model: Model,
                template_kwargs: dict[str, Any] | None = None, add_generation_prompt: bool = True) -> ChatPrompt:
    try:
        return model.chat_prompt(messages, add_generation_prompt, tools=tools, template_kwargs=template_kwargs)
    except ChatTemplateError as exc:
        raise APIError(400, str(exc), param="messages", code="chat_template_error") from exc
    except ValueError as exc:   # a message the template cannot take (e.g. an image part)
        raise APIError(400, str(exc), param="messages", code="invalid_value") from exc


def completion_prompt_ids(req: CompletionRequest, model: Model) -> list[int]:
    prompt = req.prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) != 1:
            raise not_supported("Several prompts in one request", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise APIError(400, "The prompt is empty.", param="prompt", code="invalid_value")
        return model.tokenize(prompt, add_special=True)
    if not prompt:
        raise APIError(400, "The prompt is empty.", param="prompt", code="invalid_value")
    check_token_ids(prompt, model.n_vocab, "prompt")
    return list(prompt)


def check_token_ids(ids: list[int], n_vocab: int, param: str) -> None:
    bad = next((t for t in ids if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise APIError(400, f"Token id {bad} is outside the vocabulary (0..{n_vocab - 1}).", param=param,
                       code="invalid_value")


def constraint(req: SamplingFields, model: Model, tools: ToolPlan | None = None) -> dict[str, Any]:
    """Model.generate's `matcher` for the request's tool calls, response_format (or llama.cpp's
    json_schema / grammar fields), compiled here, once, so that a schema or grammar the engine
    cannot enforce is a 400 naming the field before the job is queued, never a 5xx later."""
    asked: list[tuple[str, str, Any]] = []   # (param, kind, value)
    if tools is not None and tools.grammar is not None:
        asked.append(("tools", "tools", tools.grammar))
    fmt = req.response_format
    if fmt is not None and fmt.type == "json_object":
        asked.append(("response_format", "json_schema", True))   # compile_constraint's True: any JSON object
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise APIError(400, "response_format of type 'json_schema' needs 'json_schema.schema'.",
                           param="response_format.json_schema.schema", code="missing_field")
        asked.append(("response_format", "standard_schema", fmt.json_schema.schema_))
    if req.json_schema is not None:
        asked.append(("json_schema", "standard_schema", req.json_schema))
    if req.grammar is not None:
        asked.append(("grammar", "grammar", req.grammar))
    if not asked:
        return {}
    if len(asked) > 1:
        raise APIError(400, f"Give one of {', '.join(a[0] for a in asked)}, not several.", param=asked[1][0],
                       code="invalid_value")
    param, kind, value = asked[0]
    if kind == "tools":
        return {"matcher": tool_matcher(req, model, value)}
    code = "invalid_grammar" if kind == "grammar" else "invalid_schema"
    if kind == "grammar":
        from llguidance.gbnf_to_lark import any_to_lark   # llguidance loads on first use
        try:
            value = any_to_lark(value)   # llama.cpp's GBNF, or Lark as it is
        except Exception as exc:   # its converter raises plain Exception too ("No 'root' rule found")
            raise APIError(400, f"Invalid '{param}': {headline(str(exc), type(exc).__name__)}", param=param, code=code) from exc
    try:
        if kind == "standard_schema":   # a schema as JSON Schema reads it, `true` and `false` included
            from edgeinfer.constrain.grammar import from_standard_schema
            kind, value = "json_schema", from_standard_schema(value)
        return {"matcher": model.compile_constraint(**{kind: value})}
    except ValueError as exc:
        raise APIError(400, f"Invalid '{param}': {exc}", param=param, code=code) from exc


def tool_matcher(req: SamplingFields, model: Model, grammar: str) -> Any:
    """The compiled tool-call grammar; when it does not compile, the 400 names the tool whose
    parameters the engine cannot enforce (each is compiled alone to find it)."""
    try:
        return model.compile_constraint(grammar=grammar)
    except ValueError as exc:
        for i, tool in enumerate(req.tools or []):
            parameters = (tool.get("function") or {}).get("parameters")
            try:
                model.compile_constraint(json_schema=parameters if parameters is not None else True)
            except ValueError as culprit:
                raise APIError(400, f"Invalid 'tools.{i}.function.parameters': {culprit}",
                               param=f"tools.{i}.function.parameters", code="invalid_schema") from culprit
        raise APIError(400, f"Invalid 'tools': {exc}", param="tools", code="invalid_schema") from exc


def generation_options(req: SamplingFields, requested_max: int | None, n_prompt: int, model: Model,
                       config: ServerConfig, tools: ToolPlan | None = None) -> dict[str, Any]:
    """Model.generate keyword arguments: the request's values, else the server's defaults.

    max_tokens: what was asked, else unlimited; then at most the server's -n, and at most the
    context (the engine stops at the context's end with finish_reason "length")."""
    if n_prompt >= model.n_ctx:
        raise context_overflow(n_prompt, model.n_ctx)
    max_tokens = requested_max or model.n_ctx
    if config.max_tokens_limit:
        max_tokens = min(max_tokens, config.max_tokens_limit)
    max_tokens = min(max_tokens, model.n_ctx)

    def pick(name: str) -> Any:
        value = getattr(req, name)
        return getattr(config.sampling, name) if value is None else value

    sampling = {name: pick(name) for name in REQUEST_SAMPLING_OPTIONS}
    if sampling["seed"] is not None:
        sampling["seed"] &= UINT64_MASK   # OpenAI's seed is any integer
    logit_bias = None
    if req.logit_bias:
        logit_bias = {int(k): float(v) for k, v in req.logit_bias.items()}
        check_token_ids(list(logit_bias), model.n_vocab, "logit_bias")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    return dict(max_tokens=max_tokens, **sampling, stop=stop, logit_bias=logit_bias,
                speculative=config.speculative, **constraint(req, model, tools))


def system_prefix_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, model: Model,
                         ids: list[int]) -> int:
    """How many leading tokens of `ids` the leading system / developer messages (and the tools
    the template shows) render to, up to the next turn's header: the prefix other conversations
    with the same system prompt share. Found by rendering those messages before an empty user
    turn and comparing tokens, so it holds for any template (one that folds the system prompt
    into the first user turn too)."""
    n_system = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    if n_system == 0 or n_system == len(messages):
        return 0
    try:
        probe = model.chat_prompt(messages[:n_system] + [{"role": "user", "content": ""}],
                                  add_generation_prompt=False, tools=tools).ids
    except (ChatTemplateError, ValueError):   # a template that refuses the probe: nothing to keep
        return 0
    return common_prefix(ids, probe)


def continuation(req: ChatCompletionRequest, messages: list[dict[str, Any]]) -> str:
    """How the request ends (edgeinfer.continuation): "content" or "reasoning" to continue its
    final assistant message, "" for a new turn."""
    try:
        mode = continuation_mode(messages, req.continue_final_message)
    except ContinuationError as exc:
        raise APIError(400, str(exc), param="messages", code="invalid_value") from exc
    if mode and req.continue_final_message is not None and req.add_generation_prompt is not False:
        raise APIError(400, "Cannot set both add_generation_prompt and continue_final_message to true.",
                       param="add_generation_prompt", code="invalid_value")
    return mode


def reading(req: ChatCompletionRequest, style: ReasoningStyle | None) -> ReasoningStyle | None:
    """How the answer's reasoning is read: reasoning_format "none" leaves harmony's analysis in
    the content with its markers (its calls are still read) and think's as generated."""
    if req.reasoning_format != "none" or style is None:
        return style
    return replace(style, raw=True) if style.name == "harmony" else None


def chat_job(req: ChatCompletionRequest, model: Model, config: ServerConfig) -> GenerationJob:
    check_can_generate(model)
    plan = tool_plan(req, model)
    messages, tools = (plan.messages, plan.template_tools) if plan else (chat_messages(req), None)
    mode = continuation(req, messages)
    if mode:
        try:
            prompt, style = continued_prompt(model, messages, mode, tools, req.chat_template_kwargs)
        except ChatTemplateError as exc:
            raise APIError(400, str(exc), param="messages", code="chat_template_error") from exc
        except ValueError as exc:   # a ContinuationError, or a message the template cannot take
            raise APIError(400, str(exc), param="messages", code="invalid_value") from exc
    elif req.add_generation_prompt is False:
        prompt = chat_prompt(messages, tools, model, req.chat_template_kwargs, add_generation_prompt=False)
        style = reasoning_style(model.chat_template.source, prompt.text)
        text = end_not_return(prompt.text, style)
        prompt = ChatPrompt(text, tokenize_chat_prompt(model._core.vocab, text), prompt.template)
    else:
        prompt = chat_prompt(messages, tools, model, req.chat_template_kwargs)
        style = reasoning_style(model.chat_template.source, prompt.text)
    ids = prompt.ids
    options = generation_options(req, req.max_completion_tokens or req.max_tokens, len(ids), model, config, plan)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    keep = system_prefix_tokens(messages, tools, model, ids) if config.prompt_cache_dir else 0
    reasoning = reading(req, style)
    return GenerationJob(ids, options, logprobs, keep_prefix=keep,
                         tool_format=plan.format if plan else None, reasoning=reasoning)


def completion_job(req: CompletionRequest, model: Model, config: ServerConfig) -> GenerationJob:
    check_can_generate(model)
    ids = completion_prompt_ids(req, model)
    try:
        options = generation_options(req, req.max_tokens, len(ids), model, config)
    except APIError as exc:
        if exc.code == "context_length_exceeded":
            exc.param = "prompt"
        raise
    return GenerationJob(ids, options, req.logprobs)

"""The chat's conversation logic without a terminal: prompt-cache reuse across turns, stopping
mid-answer, context overflow trimming, /regen, transcripts with their KV state, and the slash
commands' parsing. Real SmolLM2 where the model matters; greedy and short answers."""
from __future__ import annotations

import json

import pytest

from edgeinfer.errors import ContextOverflowError
from edgeinfer.model import Model
from edgeinfer.repl import transcript
from edgeinfer.repl.commands import ChatOptions, CommandContext, run_command
from edgeinfer.repl.session import ChatSession, Settings, TurnStats
from edgeinfer.sampling import SamplingParams
from edgeinfer.repl.terminal import SlashCompleter, open_block, unfence

pytestmark = pytest.mark.realmodel

GREEDY = Settings(SamplingParams(temperature=0), max_tokens=16)


def drain(gen) -> tuple[str, TurnStats]:
    text = ""
    while True:
        try:
            text += next(gen)
        except StopIteration as done:
            return text, done.value


@pytest.fixture(scope="module")
def model(smollm2_path) -> Model:
    # n_batch=64: longer prompts are prefilled in several chunks, each a chance to stop.
    return Model.load(smollm2_path, n_ctx=384, n_threads=2, n_batch=64)


LONG = "Here is some background. " + " ".join(f"Fact {i}: the sky was blue on day {i}." for i in range(14))


def new_session(model, **kw) -> ChatSession:
    model.prompt_cache.reset()
    return ChatSession(model, settings=Settings.from_dict(GREEDY.to_dict()), **kw)


def test_second_turn_prefills_only_the_new_message(model):
    s = new_session(model)
    answer1, first = drain(s.ask("What is the capital of France?"))
    _, second = drain(s.ask("And of Italy?"))
    assert first.cached_tokens == 0 and first.finish in ("stop", "length")
    # Everything up to the end of the first answer is reused; the new message (and the template's
    # tokens around it) is all that gets prefilled.
    assert second.cached_tokens >= first.prompt_tokens + first.tokens - 1
    assert second.prompt_tokens - second.cached_tokens < 20
    assert [m["role"] for m in s.messages] == ["user", "assistant", "user", "assistant"]
    assert s.messages[1]["content"] == answer1
    assert second.context_used == model.context.n_past <= model.n_ctx


@pytest.mark.parametrize("speculative", [False, True])
def test_stopping_keeps_the_partial_answer_and_the_next_turn_reuses_it(model, speculative):
    s = new_session(model, speculative=speculative)
    s.settings.max_tokens = 64
    count = 0

    def stop() -> bool:
        nonlocal count
        count += 1
        return count >= 3

    text, stats = drain(s.ask("Write a long story about a dragon.", stop))
    assert stats.finish == "cancelled" and stats.tokens >= 3
    assert s.messages[-1] == {"role": "assistant", "content": text} and text
    # The cache holds the answer's tokens but the last (decoded only when the next is wanted), and
    # with speculation perhaps a few checked guesses past it (the next prompt's prefix match drops them).
    if speculative:
        assert stats.context_used >= stats.prompt_tokens + stats.tokens - 1
    else:
        assert stats.context_used == stats.prompt_tokens + stats.tokens - 1
    _, next_turn = drain(s.ask("Shorter, please."))
    assert next_turn.cached_tokens >= stats.prompt_tokens


def test_a_chunked_prefill_answers_as_one_prefill_call_does(model):
    progress = []
    s = new_session(model, progress=lambda done, total: progress.append((done, total)))
    text, stats = drain(s.ask(LONG + " What colour was the sky?"))
    n = stats.prompt_tokens
    assert n > 3 * 64 and stats.cached_tokens == 0
    # after every chunk but the last (1..64 tokens), which generate() decodes
    assert progress == [(k, n) for k in range(64, n, 64)]
    model.prompt_cache.reset()
    one_call = model.complete(model.chat_prompt(s.messages[:1]).ids, **GREEDY.generate_kwargs())
    assert text == one_call.text


def test_stopping_during_the_prefill_keeps_no_message_but_keeps_the_cache(model):
    s = new_session(model)
    calls = 0

    def stop() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 2

    text, stats = drain(s.ask(LONG, stop))
    assert text == "" and stats.finish == "cancelled" and stats.tokens == 0
    assert s.messages == [] and model.context.n_past == 64
    _, again = drain(s.ask(LONG))
    assert again.cached_tokens == 64


def test_overflow_drops_oldest_turns_with_a_notice_and_keeps_the_system_prompt(model):
    notices = []
    s = new_session(model, system="You are terse.", notify=notices.append)
    filler = "Tell me something about the number {}. " + "Please be accurate and detailed. " * 6
    for i in range(10):
        _, stats = drain(s.ask(filler.format(i)))
        assert stats.prompt_tokens + s.answer_reserve() <= model.n_ctx
    assert len(notices) >= 2 and all(n.startswith("context full: dropped the ") for n in notices)
    conversation = s.conversation()
    assert conversation[0] == {"role": "system", "content": "You are terse."}
    assert conversation[1]["role"] == "user" and "number 0." not in conversation[1]["content"]
    assert s.messages[-2]["content"] == filler.format(9)


def test_a_message_longer_than_the_context_is_refused_and_taken_back(model):
    s = new_session(model)
    drain(s.ask("Hi"))
    before = list(s.messages)
    with pytest.raises(ContextOverflowError, match="does not fit"):
        drain(s.ask("word " * 600))
    assert s.messages == before
    _, stats = drain(s.ask("Hello again"))   # the session still works
    assert stats.cached_tokens > 0


def test_regenerate_answers_the_last_message_again_from_the_cache(model):
    s = new_session(model)
    answer, first = drain(s.ask("Name a colour."))
    again, second = drain(s.regenerate())
    assert again == answer   # greedy
    assert len(s.messages) == 2
    assert second.cached_tokens == first.prompt_tokens - 1


def test_a_regen_stopped_before_its_answer_does_not_break_the_next_turn(model):
    s = new_session(model)
    s.messages.append({"role": "user", "content": LONG})
    calls = []
    _, stats = drain(s.regenerate(lambda: calls.append(1) or len(calls) >= 2))
    assert stats.tokens == 0 and s.messages[-1]["role"] == "user"
    _, stats = drain(s.ask("Hello"))
    assert [m["role"] for m in s.messages] == ["user", "assistant"]
    assert s.messages[0]["content"] == "Hello"


def test_regenerate_without_a_message_is_an_error(model):
    with pytest.raises(ValueError, match="no message"):
        drain(new_session(model).regenerate())


# --- transcripts -----------------------------------------------------------------------------------

def test_saved_conversation_resumes_in_a_new_model_without_prefill(model, smollm2_path, tmp_path):
    s = new_session(model, system="Answer briefly.")
    drain(s.ask("What is 2+2?"))
    saved = transcript.save(s, tmp_path / "chat.json", "smollm2")
    assert saved.state_path == tmp_path / "chat.json.kvstate" and saved.state_path.exists()
    data = json.loads((tmp_path / "chat.json").read_text())
    assert data["system"] == "Answer briefly." and len(data["messages"]) == 2

    fresh = Model.load(smollm2_path, n_ctx=384, n_threads=2)
    s2 = ChatSession(fresh)
    loaded = transcript.load(s2, tmp_path / "chat.json")
    assert loaded.state_tokens == saved.state_tokens and loaded.prefilled == 0
    assert s2.system == "Answer briefly." and s2.messages == s.messages
    assert s2.settings == s.settings
    _, stats = drain(s2.ask("And 3+3?"))
    assert stats.cached_tokens >= saved.state_tokens - 2


def test_state_from_another_model_is_refused_and_the_transcript_prefilled(model, gemma3_path, tmp_path):
    s = new_session(model)
    drain(s.ask("What is 2+2?"))
    transcript.save(s, tmp_path / "chat.json", "smollm2")
    gemma = Model.load(gemma3_path, n_ctx=256, n_threads=2)
    s2 = ChatSession(gemma, settings=Settings.from_dict(GREEDY.to_dict()))
    loaded = transcript.load(s2, tmp_path / "chat.json")
    assert loaded.state_tokens is None and loaded.state_error.startswith("refused")
    assert loaded.prefilled > 0 and gemma.context.n_past == loaded.prefilled
    _, stats = drain(s2.ask("And 3+3?"))
    assert stats.cached_tokens >= loaded.prefilled - 1


@pytest.mark.parametrize("content, message", [
    ("not json", "not valid JSON"),
    ('{"format": "other"}', "not an edgeinfer chat transcript"),
    ('{"format": "edgeinfer-chat", "version": 99}', "version 99"),
    ('{"format": "edgeinfer-chat", "version": 1, "messages": [{"role": "wizard"}]}', "'messages'"),
    ('{"format": "edgeinfer-chat", "version": 1, "messages": [], "settings": {"top_p": 2}}',
     r"bad settings \(top_p: expected a number in \[0, 1\], got 2\)"),
])
def test_bad_transcripts_are_refused_with_a_reason(model, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    s = new_session(model)
    with pytest.raises(ValueError, match=message):
        transcript.load(s, path)


# --- commands, without a model -----------------------------------------------------------------------

@pytest.fixture
def ctx() -> CommandContext:
    return CommandContext(ChatSession(model=None, system="Be nice."), ChatOptions(), "test")


@pytest.mark.parametrize("line, attr, value", [
    ("/set temp 0", "temperature", 0.0), ("/set top_k 5", "top_k", 5), ("/set top_p 0.5", "top_p", 0.5),
    ("/set min_p 0", "min_p", 0.0), ("/set max_tokens 7", "max_tokens", 7), ("/set seed 3", "seed", 3),
    ("/set seed random", "seed", None), ("/set repeat_penalty 1.1", "repeat_penalty", 1.1),
])
def test_set_changes_the_setting(ctx, line, attr, value):
    outcome = run_command(ctx, line)
    assert not outcome.error and ctx.session.settings.get(attr) == value


def test_speculative_decoding_is_turned_off_and_on(ctx):
    assert ctx.session.speculative and "speculative decoding on" in run_command(ctx, "/speculative").text
    assert run_command(ctx, "/speculative off").text == "speculative decoding off" and not ctx.session.speculative
    assert run_command(ctx, "/speculative on").text == "speculative decoding on" and ctx.session.speculative
    bad = run_command(ctx, "/speculative maybe")
    assert bad.error and bad.text == "usage: /speculative [on|off]" and ctx.session.speculative


@pytest.mark.parametrize("line, message", [
    ("/set temp hot", "/set temp: expected a number >= 0, got 'hot'"),
    ("/set temp nan", "/set temp: expected a number >= 0, got nan"),
    ("/set temp -1", "/set temp: expected a number >= 0, got -1"),
    ("/set top_p 1.5", "/set top_p: expected a number in [0, 1], got 1.5"),
    ("/set top_k 1.5", "/set top_k: expected an integer >= 0, got '1.5'"),
    ("/set max_tokens 0", "/set max_tokens: expected an integer >= 1, got 0"),
    ("/set warp 9", "unknown setting 'warp'; settable: temp, top_k"),
    ("/set temp", "usage: /set NAME VALUE"),
    ("/frobnicate now", "unknown command /frobnicate; type /help for the list"),
])
def test_bad_commands_get_a_clear_message_and_change_nothing(ctx, line, message):
    before = Settings.from_dict(ctx.session.settings.to_dict())
    outcome = run_command(ctx, line)
    assert outcome.error and outcome.text.startswith(message)
    assert ctx.session.settings == before


def test_clear_keeps_the_system_prompt(ctx):
    ctx.session.messages += [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert "system prompt is kept" in run_command(ctx, "/clear").text
    assert ctx.session.messages == [] and ctx.session.system == "Be nice."


def test_commands_that_drive_the_loop(ctx):
    assert run_command(ctx, "/bye").action == run_command(ctx, "/exit").action == "quit"
    assert run_command(ctx, "/regen").error
    ctx.session.messages.append({"role": "user", "content": "a"})
    assert run_command(ctx, "/regen").action == "regen"
    assert run_command(ctx, "/stats off").text == "stats line off" and not ctx.options.show_stats
    help_text = run_command(ctx, "/help").text
    assert '"""' in help_text and "Alt-Enter" in help_text and "/save FILE" in help_text


def test_multiline_blocks():
    assert open_block('"""') and open_block('"""first line\nsecond') and not open_block('"""a\nb"""')
    assert not open_block("plain") and not open_block('"""one line"""')
    assert unfence('"""\nline one\nline two"""') == "line one\nline two"
    assert unfence("a\nb") == "a\nb"


def test_completer_offers_commands_and_setting_names():
    from prompt_toolkit.document import Document
    c = SlashCompleter(["help", "set", "save", "show"], ["temp", "top_k"])
    words = lambda text: [x.text for x in c.get_completions(Document(text), None)]
    assert words("/s") == ["/save", "/set", "/show"]
    assert words("/set t") == ["temp", "top_k"] and words("hello /s") == []

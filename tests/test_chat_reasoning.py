"""A reasoning model in `edgeinfer chat`: the session streams the reasoning apart from the answer
and records only the answer; the renderer writes the reasoning to the console (dimmed on a
terminal), never to the answers' output, and not at all when hidden (--hide-reasoning,
/reasoning off). A scripted model writes gpt-oss's and Qwen3's text."""
from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from edgeinfer.generate import GenerationResult
from edgeinfer.reasoning import Reasoning
from edgeinfer.repl.app import stream_answer
from edgeinfer.repl.commands import ChatOptions, CommandContext, run_command
from edgeinfer.repl.render import Renderer
from edgeinfer.repl.session import ChatSession

HARMONY_TEMPLATE = "{{ '<|start|>assistant<|channel|>final<|message|>' }}"
THINK_TEMPLATE = "{% if x %}<think>\n\n</think>\n\n{% endif %}"
HARMONY_PIECES = ["<|channel|>", "analysis", "<|message|>", "The user", " greets.", "<|end|>", "<|start|>",
                  "assistant", "<|channel|>", "final", "<|message|>", "Hello", "!"]


class ScriptedModel:
    """What ChatSession uses of a Model; generate() yields the given pieces."""

    n_ctx = 512

    def __init__(self, template: str, pieces: list[str]):
        self.chat_template = SimpleNamespace(source=template)
        self.pieces = pieces
        self.context = SimpleNamespace(n_batch=64, n_past=0)
        self.prompt_cache = SimpleNamespace(prepare=lambda ids: 0)

    def chat_prompt(self, messages, add_generation_prompt=True):
        return SimpleNamespace(ids=list(range(len(messages) + 1)), text="prompt")

    def generate(self, ids, on_token=None, **kwargs):
        result = GenerationResult(prompt_tokens=len(ids), finish_reason="stop")
        for i, piece in enumerate(self.pieces):
            on_token(i, None)
            result.tokens.append(i)
            yield piece
        result.text = "".join(self.pieces)
        return result


def run_turn(session: ChatSession, text: str) -> list:
    gen, pieces = session.ask(text), []
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration:
            return pieces


def test_the_session_streams_reasoning_apart_and_records_only_the_answer():
    session = ChatSession(ScriptedModel(HARMONY_TEMPLATE, HARMONY_PIECES))
    pieces = run_turn(session, "Hi")
    assert "".join(p.text for p in pieces if isinstance(p, Reasoning)) == "The user greets."
    assert "".join(p for p in pieces if isinstance(p, str)) == "Hello!"
    first_answer = next(i for i, p in enumerate(pieces) if isinstance(p, str))
    assert all(isinstance(p, Reasoning) for p in pieces[:first_answer])
    assert session.messages[-1] == {"role": "assistant", "content": "Hello!"}


def test_think_tags_too_and_a_plain_model_is_untouched():
    think = ChatSession(ScriptedModel(THINK_TEMPLATE, ["<think>", "\nHm.\n", "</think>", "\n\nYes."]))
    pieces = run_turn(think, "Q")
    assert [p.text for p in pieces if isinstance(p, Reasoning)] == ["Hm."]
    assert think.messages[-1]["content"] == "Yes."
    plain = ChatSession(ScriptedModel("{{ messages }}", ["<think>", "x"]))
    assert run_turn(plain, "Q") == ["<think>", "x"]


def chat_output(show_reasoning: bool, piped: bool) -> tuple[str, str]:
    """(console text, answers text) of one turn."""
    console_file, answers = io.StringIO(), io.StringIO()
    out = Renderer(Console(file=console_file, force_terminal=False), answer_file=answers if piped else None)
    session = ChatSession(ScriptedModel(HARMONY_TEMPLATE, HARMONY_PIECES))
    stream_answer(lambda stop: session.ask("Hi", stop), out,
                  ChatOptions(show_stats=False, show_reasoning=show_reasoning))
    return console_file.getvalue(), answers.getvalue()


def test_the_reasoning_is_shown_before_the_answer_and_never_in_piped_answers():
    console, _ = chat_output(show_reasoning=True, piped=False)
    assert console == "The user greets.\n\nHello!\n"
    console, answers = chat_output(show_reasoning=True, piped=True)
    assert (console, answers) == ("The user greets.\n", "Hello!\n")


def test_hidden_reasoning_is_not_written():
    assert chat_output(show_reasoning=False, piped=False) == ("Hello!\n", "")
    assert chat_output(show_reasoning=False, piped=True) == ("", "Hello!\n")


def test_the_reasoning_command_switches_the_display():
    ctx = CommandContext(ChatSession(ScriptedModel(HARMONY_TEMPLATE, [])), ChatOptions(), "m")
    assert run_command(ctx, "/reasoning off").text == "reasoning display off"
    assert ctx.options.show_reasoning is False
    assert "hidden" in run_command(ctx, "/reasoning").text
    assert run_command(ctx, "/reasoning maybe").error

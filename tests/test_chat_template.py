"""Chat templates: rendering (the model file's template and the built-ins) against llama.cpp's
reference prompts, the sandbox against malicious templates, clear errors, the BOS rule, and
`edgeinfer run --chat` on the real model."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from edgeinfer.chat_template import (ChatTemplate, apply_chat_template, make_chat_template,
                                     normalize_messages, template_for_vocab,
                                     tokenize_chat_prompt)
from edgeinfer import _core
from edgeinfer.errors import ChatTemplateError, EdgeInferError
from edgeinfer.model import Model
from support.cli import assert_clean_error, run_cli
from support.generation import drain

# The questions of the llama.cpp reference runs' chat cases (fixtures/REFERENCE.md, section 6).
QUESTIONS = {
    "chat_capital": "What is the capital of France?",
    "chat_haiku": "Write a haiku about the ocean.",
    "chat_cpu": "Explain in one sentence what a CPU does.",
}


def render(source: str, messages="hi", **kwargs) -> str:
    return ChatTemplate(source, "model file", "<s>", "</s>").render(messages, **kwargs)


def gemma() -> ChatTemplate:
    return make_chat_template("gemma3", None, lambda token: False, "<bos>", "<eos>")


def user(text: str) -> dict:
    return {"role": "user", "content": text}


# -- choosing a template --------------------------------------------------------------------

def test_the_file_template_wins_over_every_built_in():
    template = make_chat_template("gemma3", "{{ 'x' }}", lambda token: True)
    assert template.name == "model file" and template.origin == "from the model file"


@pytest.mark.parametrize("arch", ["gemma", "gemma2", "gemma3"])
def test_gemma_architectures_get_the_gemma_turn_format(arch):
    assert make_chat_template(arch, None, lambda token: True).origin == "built-in gemma"


@pytest.mark.parametrize("token, name", [("<|im_start|>", "chatml"),
                                         ("<|start_header_id|>", "llama3")])
def test_special_tokens_of_the_vocabulary_pick_the_built_in(token, name):
    template = make_chat_template("llama", None, lambda t: t == token)
    assert template.name == name and template.origin == f"built-in {name}"


def test_no_template_and_an_unknown_family_asks_for_a_template():
    with pytest.raises(ChatTemplateError, match="no chat template.*'mamba'"):
        make_chat_template("mamba", None, lambda token: False)
    assert issubclass(ChatTemplateError, EdgeInferError)


# -- the built-in templates -----------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(QUESTIONS))
def test_gemma_built_in_reproduces_the_llamacpp_reference_text(case, load_fixture):
    reference = {r["name"]: r for r in load_fixture("greedy_llamacpp_gemma3")["results"]}[case]
    assert gemma().render([user(QUESTIONS[case])]) == reference["text"]


def test_gemma_folds_the_system_message_into_the_first_user_turn():
    messages = [{"role": "system", "content": "Be brief."}, user(" Hi "),
                {"role": "assistant", "content": "Hello."}, user("Bye")]
    assert gemma().render(messages, add_generation_prompt=False) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n")


def test_gemma_refuses_roles_that_do_not_alternate():
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        gemma().render([user("a"), user("b")])


def test_chatml_and_llama3_built_ins():
    messages = [{"role": "system", "content": "S"}, user("Q")]
    chatml = make_chat_template("qwen2", None, lambda t: t == "<|im_start|>", "<s>")
    assert chatml.render(messages) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n")
    llama3 = make_chat_template("llama", None, lambda t: t == "<|start_header_id|>",
                                "<|begin_of_text|>")
    assert llama3.render(messages) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")


# -- messages -------------------------------------------------------------------------------

def test_text_content_parts_are_joined_with_newlines():
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert render("{{ messages[0].content }}", [{"role": "user", "content": parts}]) == "one\ntwo"


def test_non_text_parts_and_malformed_messages_are_refused():
    with pytest.raises(ValueError, match="unsupported content part 'image_url'"):
        normalize_messages([{"role": "user", "content": [{"type": "image_url"}]}])
    with pytest.raises(ValueError, match="'role'"):
        normalize_messages([{"content": "no role"}])
    with pytest.raises(ValueError, match="no 'content'"):
        normalize_messages([{"role": "user"}])


def test_a_string_is_one_user_message_and_the_input_is_not_modified():
    messages = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    assert normalize_messages("hi") == [{"role": "user", "content": "hi"}]
    normalize_messages(messages)
    assert messages[0]["content"] == [{"type": "text", "text": "x"}]


# -- the environment: what real templates use -----------------------------------------------

def test_helpers_that_published_templates_use():
    assert render("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}") \
        == "<s>|</s>|True|None"
    assert render("{{ {'a': 'é', 'b': [1]} | tojson }}") == '{"a": "é", "b": [1]}'
    assert render("{{ {'a': 1} | tojson(indent=2) }}") == '{\n  "a": 1\n}'
    assert render("{{ strftime_now('%Y') | length }}") == "4"
    assert render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                  "{% endfor %}{{ ns.n }}") == "1"
    assert render("{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}"
                  "{% endfor %}") == "01"
    assert render("{{ enable_thinking }}", enable_thinking=False) == "False"


def test_blocks_are_trimmed_as_hf_transformers_renders_them():
    source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n" \
             "    {% endif %}\n{% endfor %}"
    assert render(source) == "hi\n"


# -- the sandbox ----------------------------------------------------------------------------

ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__ }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ cycler.__init__.__globals__.os.system('touch {canary}') }}",
    "{{ joiner.__init__.__globals__['os'].popen('touch {canary}').read() }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ lipsum.__globals__['os'].system('touch {canary}') }}",
    "{{ raise_exception.__globals__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ messages['__class__'] }}",
    "{{ messages.append({'role': 'user'}) }}",
    "{% set x = messages[0].update({'content': 'pwned'}) %}",
]


@pytest.mark.parametrize("source", ESCAPES)
def test_malicious_templates_raise_and_run_nothing(source, tmp_path):
    canary = tmp_path / "pwned"
    with pytest.raises(ChatTemplateError, match="sandbox forbids"):
        render(source.replace("{canary}", str(canary)))
    assert not canary.exists()


@pytest.mark.parametrize("source", ["{{ 'a' * 1000000000 }}", "{{ 2 ** 100000000 }}",
                                    "{{ range(1000000000) | list | length }}"])
def test_templates_cannot_build_huge_values(source):
    with pytest.raises(ChatTemplateError):
        render(source)


# -- errors ---------------------------------------------------------------------------------

def test_raise_exception_becomes_the_template_error_with_its_message():
    with pytest.raises(ChatTemplateError, match="refused the conversation: System role not "
                                                "supported"):
        render("{{ raise_exception('System role not supported') }}")


def test_a_syntax_error_names_the_line():
    with pytest.raises(ChatTemplateError, match="syntax error on line 2"):
        render("{% for m in messages %}\n{{ m.content }\n{% endfor %}")


def test_a_failing_render_names_the_reason():
    with pytest.raises(ChatTemplateError, match="failed to render the conversation") as err:
        render("{{ messages[0].content + 1 }}")
    assert "TypeError" not in str(err.value)   # the reason, not Python's exception names


def test_tool_calls_a_template_cannot_show_are_refused_by_name():
    calls = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": calls}]
    with pytest.raises(ChatTemplateError, match="message 1 carries tool_calls"):
        render("{% for m in messages %}{{ m.content }}{% endfor %}", messages)
    shown = "{% for m in messages %}{{ m.content or '' }}{{ m.tool_calls | length if m.tool_calls }}{% endfor %}"
    assert render(shown, messages) == "hi1"


def test_text_with_a_lone_surrogate_is_refused_naming_the_message():
    with pytest.raises(ValueError, match=r"message 0 content is not valid Unicode.*U\+D83D\) at character 6"):
        render("{{ messages[0].content }}", [{"role": "user", "content": "Hello \ud83d"}])


# -- tokenizing: llama.cpp's BOS rule -------------------------------------------------------

class FakeVocab:
    """A vocabulary where '<bos>' is token 2 and every other character is its code point."""

    bos, eos = 2, 3

    def __init__(self, add_bos: bool):
        self.add_bos = add_bos

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        assert not add_special and parse_special
        ids: list[int] = []
        for i, chunk in enumerate(text.split("<bos>")):
            ids += ([self.bos] if i else []) + [ord(c) for c in chunk]
        return ids


@pytest.mark.parametrize("text, add_bos, first", [
    ("<bos>hi", True, [2, ord("h")]),     # the template wrote it: not added again
    ("hi", True, [2, ord("h")]),          # the model wants one: added
    ("hi", False, [ord("h"), ord("i")]),  # neither
    ("<bos>hi", False, [2, ord("h")]),    # the template wrote it for a model that does not add it
])
def test_exactly_one_bos_when_the_template_or_the_model_wants_it(text, add_bos, first):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tokenize_chat_prompt(FakeVocab(add_bos), text)[:2] == first


def test_a_template_that_writes_two_bos_tokens_is_warned_about():
    with pytest.warns(UserWarning, match="two BOS"):
        tokenize_chat_prompt(FakeVocab(True), "<bos><bos>hi")


# -- models ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model(tiny_llama_path) -> Model:
    return Model.load(tiny_llama_path, n_ctx=64)


def test_a_vocabulary_with_im_start_and_no_file_template_gets_chatml(tiny_model):
    assert tiny_model.chat_template.origin == "built-in chatml"
    prompt = tiny_model.chat_prompt("hi")
    assert prompt.text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert prompt.ids[0] == 1 and prompt.template == "built-in chatml"   # <|im_start|> is one token


def test_chat_streams_like_generate(tiny_model):
    gen = tiny_model.chat([user("hi")], max_tokens=3, temperature=0)
    pieces, result = drain(gen)
    assert "".join(pieces) == result.text
    assert result.prompt_tokens == len(tiny_model.chat_prompt("hi").ids)


@pytest.fixture(scope="module")
def smollm2(smollm2_path: Path) -> Model:
    return Model.load(smollm2_path, n_ctx=256)


@pytest.mark.realmodel
@pytest.mark.parametrize("case", sorted(QUESTIONS))
def test_smollm2_own_template_reproduces_llamacpp_prompt_ids(case, smollm2, load_fixture):
    reference = {r["name"]: r for r in load_fixture("greedy_llamacpp_smollm2")["results"]}[case]
    prompt = smollm2.chat_prompt([user(QUESTIONS[case])])
    assert prompt.template == "from the model file"
    assert prompt.text == reference["text"]   # the default system prompt comes from the template
    assert prompt.ids == reference["prompt_ids"]


@pytest.mark.realmodel
def test_smollm2_vocabulary_without_its_template_would_get_chatml(smollm2):
    assert template_for_vocab(smollm2.arch, None, smollm2.vocab).name == "chatml"


@pytest.mark.realmodel
def test_gemma3_built_in_reproduces_llamacpp_prompt_ids(gemma3_path, load_fixture):
    # The vocabulary alone (the architecture may not run yet in this build).
    gguf = _core.GgufFile(str(gemma3_path))
    vocab = _core.Vocab(gguf)
    template = template_for_vocab(gguf.get("general.architecture"), gguf.get("tokenizer.chat_template"), vocab)
    reference = {r["name"]: r for r in load_fixture("greedy_llamacpp_gemma3")["results"]}
    for case, question in QUESTIONS.items():
        prompt = apply_chat_template(template, vocab, [user(question)])
        assert prompt.template == "built-in gemma"
        assert prompt.ids == reference[case]["prompt_ids"]


@pytest.mark.realmodel
def test_run_chat_prints_an_answer_and_names_the_template(smollm2_path):
    proc = run_cli("run", str(smollm2_path), "--chat", "What is the capital of France?",
                   "-n", "16", "--temp", "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert "chat template: from the model file" in proc.stderr
    assert "prompt 37 tokens" in proc.stderr   # the fixture's prompt length


def test_run_system_without_chat_is_one_clean_line():
    assert_clean_error(run_cli("run", "no-such-model", "-p", "hi", "-s", "be brief"), "--system needs --chat")


def test_run_chat_and_prompt_together_is_a_usage_error():
    proc = run_cli("run", "--chat", "hi", "-p", "hi")
    assert proc.returncode == 2 and "not allowed with" in proc.stderr

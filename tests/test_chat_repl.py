"""`edgeinfer chat` as people use it: a real pseudo-terminal (pexpect) driving the real SmolLM2,
and the piped mode as a subprocess. Answers are short and greedy; contexts are small."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import child_env

pexpect = pytest.importorskip("pexpect")

pytestmark = pytest.mark.realmodel

STATS = re.compile(r"(\d+) tokens · prompt (\d+) \((\d+) cached\) · context (\d+)/(\d+)")
TIMEOUT = 60


def chat_env(tmp_path: Path) -> dict[str, str]:
    return child_env(XDG_DATA_HOME=str(tmp_path / "data"),    # the input history goes here
                     TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")


class Chat:
    """`edgeinfer chat` in a pseudo-terminal."""

    def __init__(self, model: Path, tmp_path: Path, *args: str):
        argv = ["-m", "edgeinfer", "chat", str(model), "-t", "2", "-c", "512", "-n", "24", "--temp", "0", *args]
        self.child = pexpect.spawn(sys.executable, argv, env=chat_env(tmp_path), cwd=str(tmp_path),
                                   encoding="utf-8", timeout=TIMEOUT, dimensions=(50, 200))
        self.child.logfile_read = open(tmp_path / "terminal.log", "a", encoding="utf-8")
        self.expect(r"Type /help")
        self.expect_prompt()

    def expect(self, pattern: str) -> re.Match:
        self.child.expect(pattern)
        return self.child.match

    def expect_prompt(self) -> None:
        self.child.expect(">>>")

    def send_line(self, text: str) -> None:
        self.child.send(text + "\r")

    def ask(self, text: str) -> dict[str, int]:
        """Sends a message, waits for the stats line and the next prompt."""
        self.send_line(text)
        return self.wait_answer()

    def wait_answer(self) -> dict[str, int]:
        m = self.expect(STATS.pattern)
        self.expect_prompt()
        tokens, prompt, cached, used, n_ctx = m.groups()
        return dict(tokens=int(tokens), prompt=int(prompt), cached=int(cached), used=int(used), n_ctx=int(n_ctx))

    def command(self, line: str, reply: str) -> None:
        self.send_line(line)
        self.expect(reply)
        self.expect_prompt()

    def quit(self) -> int:
        self.child.send("\x04")   # Ctrl-D
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus


def saved_messages(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["messages"]


def test_second_turn_reuses_the_cache_and_ctrl_c_at_the_prompt_does_not_quit(smollm2_path, tmp_path):
    chat = Chat(smollm2_path, tmp_path)
    first = chat.ask("What is the capital of France?")
    second = chat.ask("And of Italy?")
    assert first["cached"] == 0 and first["n_ctx"] == 512
    assert second["cached"] >= first["prompt"] + first["tokens"] - 1
    assert second["prompt"] - second["cached"] < 20     # only the new message was prefilled
    chat.child.send("\x03")   # Ctrl-C at an empty prompt
    chat.expect("to quit, type /bye or press Ctrl-D")
    chat.expect_prompt()
    assert chat.child.isalive()
    chat.child.send("a draft")
    chat.expect("a draft")
    chat.child.send("\x03")   # clears the line: the Ctrl-D that follows quits
    assert chat.quit() == 0
    history = (tmp_path / "data" / "edgeinfer" / "chat_history").read_text(encoding="utf-8")
    assert "What is the capital of France?" in history and "And of Italy?" in history


def test_multiline_input_with_a_fence_and_with_alt_enter(smollm2_path, tmp_path):
    chat = Chat(smollm2_path, tmp_path)
    chat.send_line('"""')
    chat.send_line("first line")
    chat.send_line('second line"""')
    chat.wait_answer()
    chat.send_line("one\x1b\rtwo")   # Alt-Enter arrives as Esc + Enter
    chat.wait_answer()
    chat.command("/save chat.json", "saved 4 messages")
    messages = saved_messages(tmp_path / "chat.json")
    assert messages[0] == {"role": "user", "content": "first line\nsecond line"}
    assert messages[2] == {"role": "user", "content": "one\ntwo"}
    chat.command("/bye", "")   # /bye quits too
    chat.child.expect(pexpect.EOF)


def test_ctrl_c_stops_the_answer_keeps_it_and_the_chat_goes_on(smollm2_path, tmp_path):
    chat = Chat(smollm2_path, tmp_path)
    chat.send_line("/set max_tokens 400")
    chat.expect_prompt()
    chat.send_line("Write a long story about a dragon who learns to cook.")
    # four words on a line that is not the echoed input (">>> ..."): the answer is streaming
    chat.expect(r"\n[^>\n]*\w+ \w+ \w+ \w+")
    time.sleep(0.5)
    chat.child.send("\x03")
    chat.expect("stopped; the answer so far is kept")
    stopped = chat.wait_answer()
    assert 3 < stopped["tokens"] < 400
    chat.command("/set max_tokens 24", "max_tokens = 24")
    after = chat.ask("What is 2+2?")
    assert after["cached"] >= stopped["prompt"]   # the partial answer is in the cached conversation
    chat.command("/save chat.json", "saved 4 messages")
    messages = saved_messages(tmp_path / "chat.json")
    assert messages[1]["role"] == "assistant" and len(messages[1]["content"].split()) >= 3
    assert chat.quit() == 0


def test_save_then_load_in_a_fresh_process_resumes_without_prefill(smollm2_path, tmp_path):
    chat = Chat(smollm2_path, tmp_path, "-s", "You answer in one sentence.")
    first = chat.ask("What is the capital of France?")
    chat.command("/save missing/chat.json", "could not save: .*No such file or directory")
    chat.command("/save chat.json", r"saved 2 messages to chat.json and the KV state \((\d+) tokens\)")
    assert chat.quit() == 0

    fresh = Chat(smollm2_path, tmp_path)
    fresh.send_line("/load chat.json")
    restored = int(fresh.expect(r"KV state restored: (\d+) tokens, no prefill needed").group(1))
    fresh.expect_prompt()
    assert restored >= first["prompt"]
    follow_up = fresh.ask("And of Italy?")
    assert follow_up["cached"] >= restored - 2
    fresh.command("/show", "You answer in one sentence.")   # the system prompt came back too
    assert fresh.quit() == 0


def test_unknown_commands_and_bad_values_get_a_clear_message(smollm2_path, tmp_path):
    chat = Chat(smollm2_path, tmp_path)
    chat.command("/frobnicate", "unknown command /frobnicate; type /help for the list")
    chat.command("/set temp hot", "/set temp: expected a number >= 0, got 'hot'")
    chat.command("/set top_p 5", r"/set top_p: expected a number in \[0, 1\], got 5")
    chat.command("/set speed 11", "unknown setting 'speed'; settable: temp, top_k")
    chat.command("/load missing.json", "could not load: No such file or directory: missing.json")
    chat.command("/regen", "nothing to regenerate: ask something first")
    chat.command("/set temp 0.5", "temp = 0.5")
    chat.child.send("/sh\t")   # Tab completes the command
    chat.expect("/show")
    chat.send_line("")
    chat.expect("chat template")
    chat.expect("temp=0.5")
    chat.expect_prompt()
    assert chat.quit() == 0


def run_piped(model: Path, tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "edgeinfer", "chat", str(model), "-t", "2", "-c", "512", "-n", "24",
            "--temp", "0", *args]
    return subprocess.run(argv, input=text, capture_output=True, text=True, env=chat_env(tmp_path),
                          timeout=TIMEOUT)


def test_piped_input_prints_only_the_answers(smollm2_path, tmp_path):
    proc = run_piped(smollm2_path, tmp_path, "What is 2+2?\n/set max_tokens 8\n/set temp hot\nWhat is 3+3?\n")
    assert proc.returncode == 1   # the bad /set
    answers = proc.stdout.splitlines()
    assert len(answers) == 2 and all(answers), proc.stdout
    assert ">>>" not in proc.stdout and "tok/s" not in proc.stdout and "Type /help" not in proc.stdout
    assert "expected a number >= 0, got 'hot'" in proc.stderr
    single = run_piped(smollm2_path, tmp_path, "What is\n2+2?\n", "--single")
    assert single.returncode == 0 and len(single.stdout.splitlines()) == 1 and single.stdout.strip()
    (tmp_path / "system.txt").write_text("You are a pirate.\n")
    shown = run_piped(smollm2_path, tmp_path, "/show\n", "--system-file", str(tmp_path / "system.txt"))
    assert shown.returncode == 0 and shown.stdout == ""
    assert "system prompt  You are a pirate." in shown.stderr


def test_overflowing_the_context_drops_old_turns_with_a_notice(smollm2_path, tmp_path):
    questions = "".join(f"Tell me a fact about the number {i}, in detail please.\n" for i in range(8))
    proc = run_piped(smollm2_path, tmp_path, questions, "-c", "160", "-n", "16")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) >= 8
    notices = [line for line in proc.stderr.splitlines() if line.startswith("context full: dropped the ")]
    assert notices and "Traceback" not in proc.stderr

"""The fuzz runner (tests/support/fuzz_runner.py) pins crashes, hangs and batch deaths on the right
variant: checked with a stand-in child that misbehaves on request, so that the fuzz tests'
"no failure" means something."""
from __future__ import annotations

from support.fuzz_runner import run_variants

# Answers "ok" for each path, except: "segv" kills itself, "hang" sleeps, "poison" leaves a
# state that kills the process on the next variant, "exit" ends the process after its answer.
FAKE_CHILD = """
import json, os, signal, sys, time
poisoned = False
for variant_id, path in json.load(sys.stdin):
    if path == "segv" or poisoned:
        os.kill(os.getpid(), signal.SIGSEGV)
    if path == "hang":
        time.sleep(60)
    poisoned = path == "poison"
    print(json.dumps({"id": variant_id, "outcome": "ok", "stage": "", "type": "", "message": ""}), flush=True)
    if path == "exit":
        sys.exit(3)
"""


def _run(tmp_path, paths):
    child = tmp_path / "child.py"
    child.write_text(FAKE_CHILD)
    results, notes = run_variants(list(enumerate(paths)), "model", timeout=1.0, child=child, startup=2.0)
    return [results[i] for i in range(len(paths))], notes


def test_crashes_and_hangs_are_pinned_on_their_variant_and_the_batch_goes_on(tmp_path):
    results, notes = _run(tmp_path, ["a", "segv", "b", "hang", "c"])
    assert [r.outcome for r in results] == ["ok", "crash", "ok", "hang", "ok"]
    assert "SIGSEGV" in results[1].message
    assert not notes


def test_a_variant_that_dies_only_after_another_is_a_batch_death(tmp_path):
    results, notes = _run(tmp_path, ["poison", "x", "y"])
    assert [r.outcome for r in results] == ["ok", "batch_death", "ok"]
    assert "SIGSEGV" in results[1].message


def test_a_child_dying_after_its_last_answer_is_reported(tmp_path):
    results, notes = _run(tmp_path, ["a", "exit"])
    assert [r.outcome for r in results] == ["ok", "ok"]
    assert len(notes) == 1 and "exit code 3" in notes[0]

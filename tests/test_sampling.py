"""The numpy sampler chain: greedy, seeding, and what each filter keeps."""
import math

import numpy as np
import pytest

from edgeinfer.sampling import (
    DEFAULTS, SamplingParams, apply_logit_bias, apply_min_p, apply_penalties, apply_top_k, apply_top_p,
    make_logit_bias_processor, make_logits_processors, make_sampler, sort_desc, TokenPicker, token_distribution,
)


def random_logits(n=1000, seed=0):
    return np.random.default_rng(seed).normal(0, 3, n).astype(np.float32)


def draw_many(sampler, logits, n=2000):
    return {sampler(logits) for _ in range(n)}


def test_defaults_are_llama_cpp_defaults():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p) == (0.8, 40, 0.95, 0.05)
    assert (p.repeat_penalty, p.repeat_last_n) == (1.0, 64)


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_zero_temperature_is_argmax(temperature):
    logits = random_logits()
    assert make_sampler(temperature=temperature)(logits) == int(np.argmax(logits))


def test_greedy_ties_go_to_lowest_id():
    logits = np.zeros(10, np.float32)
    logits[[3, 7]] = 5.0
    assert make_sampler(temperature=0)(logits) == 3
    assert make_sampler(temperature=1.0, top_k=1)(logits) == 3


def test_top_k_1_is_greedy():
    for seed in range(5):
        logits = random_logits(seed=seed)
        assert make_sampler(temperature=1.5, top_k=1, seed=seed)(logits) == int(np.argmax(logits))


def test_same_seed_same_tokens():
    logits = random_logits()
    a, b = make_sampler(temperature=1.0, seed=42), make_sampler(temperature=1.0, seed=42)
    assert [a(logits) for _ in range(50)] == [b(logits) for _ in range(50)]


def test_different_seeds_differ():
    logits = np.zeros(1000, np.float32)
    a = make_sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1)
    b = make_sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=2)
    assert [a(logits) for _ in range(20)] != [b(logits) for _ in range(20)]


def test_sampler_never_writes_to_its_input():
    logits = random_logits()
    logits.setflags(write=False)  # like a read-only view of the core's buffer
    before = logits.copy()
    make_sampler(temperature=0.7, seed=0)(logits)
    make_sampler(temperature=0.7, top_k=0, seed=0)(logits)
    np.testing.assert_array_equal(logits, before)


def test_top_k_only_draws_from_the_k_largest():
    logits = random_logits()
    top5 = set(np.argsort(-logits)[:5].tolist())
    sampler = make_sampler(temperature=5.0, top_k=5, top_p=1.0, min_p=0.0, seed=0)
    drawn = draw_many(sampler, logits)
    assert drawn <= top5 and len(drawn) == 5


def test_top_p_keeps_smallest_prefix_reaching_p():
    # probabilities 0.5, 0.3, 0.15, 0.05
    probs = np.array([0.05, 0.5, 0.15, 0.3])
    logits = np.log(probs).astype(np.float32)
    ids, x = apply_top_p(*sort_desc(np.arange(4), logits), 0.79, log_total=0.0)
    assert ids.tolist() == [1, 3]  # 0.5 + 0.3 reaches 0.79
    ids, x = apply_top_p(*sort_desc(np.arange(4), logits), 0.81, log_total=0.0)
    assert ids.tolist() == [1, 3, 2]
    sampler = make_sampler(temperature=1.0, top_k=0, top_p=0.79, min_p=0.0, seed=0)
    assert draw_many(sampler, logits) == {1, 3}


def test_top_p_always_keeps_one():
    logits = np.array([10.0, 0.0, 0.0], np.float32)
    sampler = make_sampler(temperature=1.0, top_k=0, top_p=0.01, min_p=0.0, seed=0)
    assert draw_many(sampler, logits, 200) == {0}


def test_min_p_drops_tokens_below_fraction_of_max():
    probs = np.array([0.5, 0.2, 0.04, 0.26])
    logits = np.log(probs).astype(np.float32)
    ids, _ = apply_min_p(np.arange(4), logits, 0.1)  # threshold 0.05
    assert sorted(ids.tolist()) == [0, 1, 3]
    sampler = make_sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1, seed=0)
    assert draw_many(sampler, logits) == {0, 1, 3}


def test_min_p_then_top_p_equals_top_p_then_min_p():
    """The sampler runs min-p before sorting; the kept set must match llama.cpp's order."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        logits = rng.normal(0, 2, 200).astype(np.float32)
        top_p, min_p = rng.uniform(0.3, 1.0), rng.uniform(0.0, 0.3)
        ids = np.arange(200)
        log_total = math.log(np.exp(logits.astype(np.float64)).sum())
        a_ids, a_x = apply_top_p(*sort_desc(ids, logits), top_p, log_total)
        a_ids, _ = apply_min_p(a_ids, a_x, min_p)
        b_ids, b_x = apply_min_p(ids, logits, min_p)
        b_ids, _ = apply_top_p(*sort_desc(b_ids, b_x), top_p, log_total)
        assert sorted(a_ids.tolist()) == sorted(b_ids.tolist())


@pytest.mark.parametrize("scale", [0.01, 1.0, 30.0])
def test_apply_top_k_matches_full_sort(scale):
    logits = random_logits(5000) * scale
    ids, x = apply_top_k(np.arange(5000), logits, 40)
    assert set(ids.tolist()) == set(np.argsort(-logits)[:40].tolist())
    assert np.all(np.diff(ids) > 0)


def test_apply_top_k_disabled_keeps_everything():
    logits = random_logits(50)
    ids, x = apply_top_k(np.arange(50), logits, 0)
    assert len(ids) == 50


def test_low_temperature_concentrates_on_argmax():
    logits = random_logits()
    sampler = make_sampler(temperature=0.01, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    assert draw_many(sampler, logits, 100) == {int(np.argmax(logits))}


def test_distribution_matches_softmax_over_temperature():
    logits = np.log(np.array([0.6, 0.3, 0.1])).astype(np.float32)
    sampler = make_sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    counts = np.bincount([sampler(logits) for _ in range(20000)], minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.6, 0.3, 0.1], atol=0.02)


def test_token_distribution_is_the_softmax_over_temperature_of_what_the_filters_keep():
    logits = random_logits(50)
    dist = token_distribution(logits, temperature=0.7, top_k=5, top_p=1.0, min_p=0.0)
    top5 = np.sort(np.argsort(logits)[-5:])
    assert list(dist.ids) == list(top5)
    expected = np.exp(logits[top5].astype(np.float64) / 0.7)
    np.testing.assert_allclose(dist.probs(), expected / expected.sum(), rtol=1e-6)
    assert dist.prob(int(np.argmin(logits))) == 0.0          # filtered out: probability 0
    greedy = token_distribution(logits, temperature=0.0)
    assert list(greedy.ids) == [int(np.argmax(logits))] and greedy.prob(int(np.argmax(logits))) == 1.0


def test_the_token_picker_draws_from_its_distribution_after_bias_and_penalties():
    logits = np.log(np.array([0.5, 0.3, 0.2])).astype(np.float32)
    picker = TokenPicker(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0,
                                        presence_penalty=float(np.log(3.0))), logit_bias={2: float(np.log(2.0))})
    history = [0]          # token 0 seen: its probability a third as large; token 2's doubled
    expected = np.array([0.5 / 3, 0.3, 0.4])
    expected /= expected.sum()
    np.testing.assert_allclose(picker.distribution(logits, history).probs(), expected, rtol=1e-5)
    counts = np.bincount([picker(logits, history) for _ in range(20000)], minlength=3) / 20000
    np.testing.assert_allclose(counts, expected, atol=0.02)
    assert picker.most_likely(logits, history) == 2


def test_large_vocab_default_chain_is_fast():
    import time
    logits = random_logits(262144)
    sampler = make_sampler(seed=0)
    start = time.perf_counter()
    for _ in range(20):
        sampler(logits)
    assert (time.perf_counter() - start) / 20 < 0.02


def test_repeat_penalty_divides_positive_multiplies_negative():
    logits = np.array([2.0, -2.0, 1.0, 0.5], np.float32)
    out = apply_penalties(logits, [0, 1, 1], repeat_penalty=2.0)
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0, 0.5])
    np.testing.assert_array_equal(logits, [2.0, -2.0, 1.0, 0.5])  # input untouched


def test_presence_and_frequency_penalties():
    logits = np.zeros(4, np.float32)
    out = apply_penalties(logits, [2, 2, 2, 3], presence_penalty=0.5, frequency_penalty=0.25)
    np.testing.assert_allclose(out, [0.0, 0.0, -1.25, -0.75])


def test_penalties_only_look_at_last_n():
    logits = np.ones(4, np.float32)
    out = apply_penalties(logits, [0, 1, 2], repeat_penalty=2.0, repeat_last_n=1)
    np.testing.assert_allclose(out, [1.0, 1.0, 0.5, 1.0])
    out = apply_penalties(logits, [0, 1, 2], repeat_penalty=2.0, repeat_last_n=-1)
    np.testing.assert_allclose(out, [0.5, 0.5, 0.5, 1.0])


def test_penalties_off_returns_input_without_copy():
    logits = random_logits(10)
    assert apply_penalties(logits, [1, 2]) is logits
    assert make_logits_processors() == []
    assert DEFAULTS.make_logits_processors() == []


def test_logits_processor_applies_penalty():
    (proc,) = make_logits_processors(repeat_penalty=2.0)
    out = proc(np.array([4.0, 4.0], np.float32), [1])
    np.testing.assert_allclose(out, [4.0, 2.0])



def test_logit_bias_adds_to_listed_tokens_only():
    logits = random_logits(10)
    before = logits.copy()
    out = apply_logit_bias(logits, {3: 5.0, 7: -100.0})
    expected = logits.copy()
    expected[3] += 5.0
    expected[7] -= 100.0
    np.testing.assert_allclose(out, expected)
    np.testing.assert_array_equal(logits, before)  # the input is untouched


def test_empty_logit_bias_returns_input_without_copy():
    logits = random_logits(10)
    assert apply_logit_bias(logits, {}) is logits
    assert make_logit_bias_processor(None) == [] and make_logit_bias_processor({}) == []


def test_logit_bias_outside_vocabulary_is_an_error():
    with pytest.raises(ValueError, match="token id 10"):
        apply_logit_bias(random_logits(10), {10: 1.0})
    with pytest.raises(ValueError, match="token id -1"):
        apply_logit_bias(random_logits(10), {-1: 1.0})


def test_logit_bias_goes_before_penalties_in_the_token_picker():
    from edgeinfer.generate import make_token_picker

    logits = np.zeros(8, dtype=np.float32)
    logits[2] = 1.0
    greedy = SamplingParams(temperature=0.0, presence_penalty=2.0)
    pick = make_token_picker(greedy, logit_bias={5: 1.5})
    assert pick(logits, []) == 5          # bias lifts 5 above 2
    assert pick(logits, [5]) == 2         # ... and the presence penalty then drops it again


# -- one validation for every entry point ------------------------------------------------------

@pytest.mark.parametrize("field, value", [("temperature", -1.0), ("temperature", float("nan")), ("top_p", 1.5),
                                          ("min_p", -0.1), ("top_k", -3), ("top_k", True), ("top_k", 2.5),
                                          ("repeat_penalty", 0.0), ("repeat_last_n", -2), ("seed", -1),
                                          ("presence_penalty", float("inf"))])
def test_sampling_params_refuse_values_outside_their_limits(field, value):
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        SamplingParams(**{field: value})


def test_limits_describe_what_they_take_and_parse_text():
    from edgeinfer.sampling import LIMITS, parse_option

    assert LIMITS["top_p"].describe() == "a number in [0, 1]"
    assert LIMITS["repeat_penalty"].describe() == "a number > 0"
    assert parse_option("top_k", "5") == 5 and parse_option("temperature", "0") == 0.0
    with pytest.raises(ValueError, match=r"^expected a number >= 0, got -1$"):
        parse_option("temperature", "-1")
    with pytest.raises(ValueError, match=r"^expected an integer >= 0, got 'x'$"):
        parse_option("top_k", "x")


# -- one definition: every entry point reads SamplingParams' fields ------------------------------

def test_every_option_states_its_default_limit_and_help_once():
    from dataclasses import fields

    from edgeinfer.sampling import HELP, LIMITS

    for f in fields(SamplingParams):
        assert LIMITS[f.name] is f.metadata["limit"] and HELP[f.name] == f.metadata["help"]
        assert f.default is None or LIMITS[f.name].contains(f.default)


def test_model_generate_takes_every_option_and_defers_to_its_default():
    import inspect
    from dataclasses import fields

    from edgeinfer.model import Model

    keywords = inspect.signature(Model.generate).parameters
    assert all(keywords[f.name].default is None for f in fields(SamplingParams))


def test_cli_flags_take_their_default_check_and_help_from_the_fields():
    from edgeinfer.cli.args import SAMPLING_FLAGS, build_parser, sampling_options
    from edgeinfer.sampling import DEFAULTS, HELP

    parser = build_parser()
    for command in ("run", "chat", "serve"):
        actions = {a.dest: a for a in parser._subparsers._group_actions[0].choices[command]._actions}
        for name, (flag, _) in SAMPLING_FLAGS.items():
            assert actions[name].option_strings == [flag] and actions[name].default == getattr(DEFAULTS, name)
            assert actions[name].help.startswith(HELP[name] + " (default")
    args = parser.parse_args(["serve", "--temp", "0.5", "--seed", "-1"])
    assert SamplingParams(**sampling_options(args)) == SamplingParams(temperature=0.5)


def test_set_changes_sampling_fields_checked_by_their_limits():
    from edgeinfer.repl.commands import SETTABLE
    from edgeinfer.repl.session import Settings
    from edgeinfer.sampling import DEFAULTS, LIMITS

    assert {setting for setting, _ in SETTABLE.values()} - set(LIMITS) == {"max_tokens"}
    settings = Settings()
    assert settings.sampling == DEFAULTS
    with pytest.raises(ValueError, match="^top_p: expected a number in"):
        settings.set("top_p", 2.0)
    settings.set("top_p", 0.5)
    assert Settings.from_dict(settings.to_dict()) == settings and settings.get("top_p") == 0.5


def test_the_server_fields_are_bounded_and_described_as_the_fields_are():
    from edgeinfer.sampling import HELP, LIMITS
    from edgeinfer.server.schemas import REQUEST_SAMPLING_OPTIONS, CompletionRequest

    assert set(LIMITS) - set(REQUEST_SAMPLING_OPTIONS) == {"repeat_last_n"}
    schema = CompletionRequest.model_json_schema()["properties"]
    keys = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
    for name in REQUEST_SAMPLING_OPTIONS:
        assert schema[name]["description"].startswith(HELP[name])
        if name == "seed":
            continue   # OpenAI's seed is any integer; the server takes it modulo 2**64
        field = schema[name]["anyOf"][0]
        for bound, value in LIMITS[name].bounds().items():
            # OpenAI's ranges may be narrower (temperature <= 2, penalties in [-2, 2]), never wider.
            got = field[keys[bound]]
            assert got >= value if bound in ("ge", "gt") else got <= value, (name, bound)


def test_top_k_with_fewer_finite_logits_than_k_keeps_just_those():
    # what a grammar mask leaves: a few finite logits among -inf (the fast path skips the partition)
    logits = np.full(1000, -np.inf, dtype=np.float32)
    logits[[7, 300, 999]] = [1.0, 50.0, -3.0]
    ids, kept = apply_top_k(np.arange(1000), logits, 40)
    assert ids.tolist() == [7, 300, 999] and kept.tolist() == [1.0, 50.0, -3.0]

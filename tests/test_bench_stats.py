"""The bench statistics on known data: t quantiles, mean intervals, Fieller ratio intervals,
verdicts and the generated results sentence."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_cli.bench.stats import (
    Interval,
    Speedup,
    Verdict,
    mean_interval,
    ratio_interval,
    results_sentence,
    speedup,
    t_quantile,
    verdict_of,
)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [  # published two-sided 95% / 99% critical values
        (0.975, 1, 12.706205),
        (0.975, 2, 4.302653),
        (0.975, 4, 2.776445),
        (0.975, 10, 2.228139),
        (0.975, 30, 2.042272),
        (0.995, 5, 4.032143),
        (0.975, 1e9, 1.959964),  # the normal limit
    ],
)
def test_t_quantile_matches_tables(p: float, df: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-6)


def test_t_quantile_takes_fractional_df_between_neighbours() -> None:
    assert t_quantile(0.975, 2) < t_quantile(0.975, 1.5) < t_quantile(0.975, 1)


@pytest.mark.parametrize(("p", "df"), [(0.5, 3), (1.0, 3), (0.975, 0)])
def test_t_quantile_refuses_outside_its_domain(p: float, df: float) -> None:
    with pytest.raises(ValueError):
        t_quantile(p, df)


def test_mean_interval_is_student_t() -> None:
    # mean 100, s = 2, n = 3: half width t(0.975, 2) * 2 / sqrt(3) = 4.968275
    iv = mean_interval([98.0, 100.0, 102.0])
    assert (iv.estimate, iv.n) == (100.0, 3)
    assert iv.low == pytest.approx(100 - 4.968275, abs=1e-5)
    assert iv.high == pytest.approx(100 + 4.968275, abs=1e-5)
    assert iv.to_dict() == {"estimate": 100.0, "low": iv.low, "high": iv.high, "n": 3,
                            "confidence": 0.95}


def test_mean_interval_of_one_repeat_has_no_bounds() -> None:
    iv = mean_interval([123.5])
    assert iv == Interval(123.5, None, None, 1)
    assert not iv.bounded


def test_mean_interval_refuses_empty_and_nan() -> None:
    with pytest.raises(ValueError):
        mean_interval([])
    with pytest.raises(ValueError):
        mean_interval([1.0, math.nan])


def test_fieller_endpoints_solve_its_equation() -> None:
    num, den = [110.0, 114.0, 112.0], [100.0, 97.0, 103.0]
    iv = ratio_interval(num, den)
    a, b = sum(num) / 3, sum(den) / 3
    va = sum((x - a) ** 2 for x in num) / 2 / 3
    vb = sum((x - b) ** 2 for x in den) / 2 / 3
    r = a / b
    df = (va + r * r * vb) ** 2 / (va**2 / 2 + (r * r * vb) ** 2 / 2)
    t = t_quantile(0.975, df)
    assert iv.estimate == pytest.approx(r)
    for end in (iv.low, iv.high):
        assert (a - end * b) ** 2 == pytest.approx(t * t * (va + end * end * vb))
    assert iv.low < r < iv.high


def test_fieller_with_an_exact_baseline_is_the_numerator_interval_scaled() -> None:
    iv = ratio_interval([98.0, 100.0, 102.0], [50.0, 50.0, 50.0])
    mean = mean_interval([98.0, 100.0, 102.0])
    assert iv.low == pytest.approx(mean.low / 50)
    assert iv.high == pytest.approx(mean.high / 50)


def test_fieller_is_unbounded_when_the_baseline_may_be_zero() -> None:
    iv = ratio_interval([100.0, 102.0], [10.0, 100.0])
    assert iv.estimate == pytest.approx(101 / 55)
    assert (iv.low, iv.high) == (None, None)
    # ... and when the arm may be zero: the inverse ratio would be unbounded.
    assert not ratio_interval([10.0, 100.0], [100.0, 102.0]).bounded
    assert not ratio_interval([50.0, 59.0], [50.0, 50.0]).bounded


def test_fieller_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    rng = random.Random(11)
    trials, covered = 300, 0
    for _ in range(trials):
        num = [rng.gauss(120.0, 6.0) for _ in range(4)]
        den = [rng.gauss(100.0, 5.0) for _ in range(4)]
        iv = ratio_interval(num, den)
        covered += iv.low <= 1.2 <= iv.high
    assert 0.90 <= covered / trials <= 0.99


# The four cases the acceptance asks for, on known data (two arms of three repeats each).
def test_faster() -> None:
    s = speedup("dspark_adaptive", [130.0, 128.0, 132.0], "dspark_fixed",
                [100.0, 101.0, 99.0], 256, margin=0.05)
    assert s.verdict is Verdict.FASTER
    assert s.ratio.estimate == pytest.approx(1.3)
    assert 1 < s.ratio.low < 1.3 < s.ratio.high
    assert s.to_dict()["verdict"] == "faster"


def test_slower() -> None:
    s = speedup("dspark_adaptive", [80.0, 82.0, 78.0], "dspark_fixed",
                [100.0, 101.0, 99.0], 4, margin=0.05)
    assert s.verdict is Verdict.SLOWER
    assert s.ratio.high < 1


def test_comparable_when_the_interval_holds_one() -> None:
    s = speedup("dspark_adaptive", [99.0, 103.0, 100.0], "dspark_fixed",
                [100.0, 101.0, 99.0], 4, margin=0.0)
    assert s.ratio.low <= 1 <= s.ratio.high
    assert s.verdict is Verdict.COMPARABLE


def test_comparable_when_a_significant_change_is_within_the_margin() -> None:
    arm, base = [102.0, 102.1, 101.9], [100.0, 100.1, 99.9]
    strict = speedup("a", arm, "b", base, 8, margin=0.0)
    lenient = speedup("a", arm, "b", base, 8, margin=0.05)
    assert strict.ratio.low > 1  # significant ...
    assert strict.verdict is Verdict.FASTER
    assert lenient.verdict is Verdict.COMPARABLE  # ... but only 2%: within a 5% margin
    assert lenient.margin == 0.05


def test_one_repeat_cannot_tell() -> None:
    s = speedup("dspark_adaptive", [150.0], "dspark_fixed", [100.0], 64, margin=0.05)
    assert s.verdict is Verdict.CANNOT_TELL
    assert s.ratio == Interval(1.5, None, None, 1)
    assert s.to_dict()["verdict"] == "cannot tell"


def test_cannot_tell_when_the_repeats_cannot_bound_the_ratio() -> None:
    assert verdict_of(ratio_interval([100.0, 102.0], [10.0, 100.0]), 0.05) is \
        Verdict.CANNOT_TELL


@pytest.mark.parametrize("margin", [-0.1, 1.0])
def test_speedup_refuses_a_nonsense_margin(margin: float) -> None:
    with pytest.raises(ValueError):
        speedup("a", [1.0, 2.0], "b", [1.0, 2.0], 1, margin=margin)


def test_speedup_round_trips_through_its_dict() -> None:
    s = speedup("a", [130.0, 128.0, 132.0], "b", [100.0, 101.0, 99.0], 16, margin=0.05)
    assert Speedup.from_dict(s.to_dict()) == s


def test_results_sentence_merges_runs_of_one_verdict_by_concurrency() -> None:
    base = [100.0, 101.0, 99.0]
    speedups = [
        speedup("adaptive", [130.0, 128.0, 132.0], "fixed", base, 256, 0.05),
        speedup("adaptive", [99.5, 100.5, 100.0], "fixed", base, 4, 0.05),
        speedup("adaptive", [120.0, 121.0, 119.0], "fixed", base, 64, 0.05),
        speedup("adaptive", [100.5, 101.0, 99.0], "fixed", base, 8, 0.05),
    ]
    sentence = results_sentence(speedups)
    assert sentence.startswith("adaptive over fixed: comparable at concurrencies 4 and 8 (")
    assert "; faster at concurrencies 64 and 256 (1.20x to 1.30x)" in sentence
    assert "95% intervals over 3 repeats; equivalence margin 5%" in sentence


def test_results_sentence_says_why_it_cannot_tell() -> None:
    sentence = results_sentence([speedup("a", [150.0], "b", [100.0], 64, 0.05)])
    assert sentence == ("a over b: cannot tell at concurrency 64 (1.50x; fewer than two "
                        "repeats) (95% intervals over 1 repeat; equivalence margin 5%).")


def test_results_sentence_of_nothing_says_so() -> None:
    assert results_sentence([]).startswith("No speedup was measured")


samples = st.lists(st.floats(50.0, 5000.0), min_size=2, max_size=5)


@settings(max_examples=60, deadline=None)
@given(samples, samples, st.sampled_from([0.0, 0.05, 0.2]))
def test_property_swapping_arm_and_baseline_inverts_the_ratio_and_the_verdict(
        arm: list[float], base: list[float], margin: float) -> None:
    there = speedup("a", arm, "b", base, 8, margin)
    back = speedup("b", base, "a", arm, 8, margin)
    assert back.ratio.estimate == pytest.approx(1 / there.ratio.estimate)
    if there.ratio.bounded and back.ratio.bounded:
        assert there.ratio.low <= there.ratio.estimate <= there.ratio.high
        assert back.ratio.low == pytest.approx(1 / there.ratio.high)
        assert back.ratio.high == pytest.approx(1 / there.ratio.low)
    flipped = {Verdict.FASTER: Verdict.SLOWER, Verdict.SLOWER: Verdict.FASTER}
    if there.verdict in flipped and abs(1 / there.ratio.estimate - 1) > margin:
        assert back.verdict is flipped[there.verdict]
    if there.verdict is Verdict.COMPARABLE and there.ratio.low <= 1 <= there.ratio.high:
        assert back.verdict is Verdict.COMPARABLE

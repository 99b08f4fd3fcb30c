"""The verdict rule on known data (equivalent, faster, slower, inconclusive), its error rates over
seeded trials, the minimum detectable effect, and the results sentence generated from it."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_cli.bench.stats import (
    Interval,
    Speedup,
    Verdict,
    min_detectable,
    ratio_interval,
    results_sentence,
    speedup,
    t_quantile,
    verdict_of,
    words,
)

BASE = [100.0, 101.0, 99.0]


def test_equivalent_when_the_90_percent_interval_lies_within_the_margin() -> None:
    s = speedup("adaptive", [100.5, 99.5, 100.0], "fixed", BASE, 4, margin=0.05)
    assert s.verdict is Verdict.COMPARABLE
    assert s.equivalence.confidence == 0.90 and s.ratio.confidence == 0.95
    assert 0.95 <= s.equivalence.low < s.equivalence.high <= 1.05
    # The 90% interval is the narrower one, inside the 95%.
    assert s.ratio.low < s.equivalence.low < s.equivalence.high < s.ratio.high


def test_faster() -> None:
    s = speedup("dspark_adaptive", [130.0, 128.0, 132.0], "dspark_fixed", BASE, 256, 0.05)
    assert s.verdict is Verdict.FASTER
    assert s.ratio.estimate == pytest.approx(1.3)
    assert 1.05 < s.ratio.low < 1.3 < s.ratio.high
    assert s.to_dict()["verdict"] == "faster"


def test_slower() -> None:
    s = speedup("dspark_adaptive", [80.0, 82.0, 78.0], "dspark_fixed", BASE, 4, 0.05)
    assert s.verdict is Verdict.SLOWER
    assert s.ratio.high < 0.95


def test_a_wide_interval_holding_1_is_inconclusive_not_comparable() -> None:
    # The interval that used to read "comparable".
    wide = Interval(1.5, 0.26, 2.74, 3)
    assert verdict_of(wide, Interval(1.5, 0.45, 2.4, 3, 0.9), 0.05) is Verdict.INCONCLUSIVE
    s = speedup("a", [60.0, 140.0, 100.0], "b", [98.0, 102.0, 100.0], 8, 0.05)
    assert s.ratio.low < 0.1 and s.ratio.high > 1.9
    assert s.verdict is Verdict.INCONCLUSIVE
    assert s.mde > 1.0  # these repeats could only have seen a change of over 100%
    assert words(s) == f"inconclusive (min. detectable {s.mde:.0%})"


def test_significant_but_within_the_margin_is_comparable_only_when_equivalent() -> None:
    arm, base = [102.0, 102.1, 101.9], [100.0, 100.1, 99.9]
    assert speedup("a", arm, "b", base, 8, 0.05).verdict is Verdict.COMPARABLE
    assert speedup("a", arm, "b", base, 8, 0.0).verdict is Verdict.FASTER  # no margin
    # Significant, the estimate inside the margin, but the 90% interval reaches past it.
    assert verdict_of(Interval(1.03, 1.005, 1.055, 3), Interval(1.03, 1.01, 1.051, 3, 0.9),
                      0.05) is Verdict.INCONCLUSIVE


def test_beyond_the_margin_but_not_significant_is_inconclusive() -> None:
    s = speedup("a", [110.0, 125.0, 95.0], "b", BASE, 8, 0.05)
    assert s.ratio.estimate > 1.05 and s.ratio.low < 1
    assert s.verdict is Verdict.INCONCLUSIVE


def test_one_repeat_is_inconclusive_with_no_detectable_change() -> None:
    s = speedup("dspark_adaptive", [150.0], "dspark_fixed", [100.0], 64, 0.05)
    assert s.verdict is Verdict.INCONCLUSIVE
    assert s.ratio == Interval(1.5, None, None, 1) and s.mde is None
    assert words(s) == "inconclusive"


def test_min_detectable_is_the_two_quantiles_times_the_relative_standard_error() -> None:
    # Equal relative noise and repeats: Welch's df is 2 (n - 1) = 4.
    arm, base = [110.0, 100.0, 90.0], [110.0, 100.0, 90.0]
    se = (2 * (100.0 / 3) / 100.0**2) ** 0.5  # variance 100 over 3 repeats, per mean squared
    expected = (t_quantile(0.975, 4) + t_quantile(0.8, 4)) * se
    assert min_detectable(arm, base) == pytest.approx(expected)
    assert min_detectable([100.0, 100.0], [50.0, 50.0]) == 0.0
    assert min_detectable([1.0], [1.0, 2.0]) is None
    # More repeats of the same noise see smaller changes.
    assert min_detectable(arm * 3, base * 3) < min_detectable(arm, base) / 1.7


@pytest.mark.parametrize("margin", [-0.1, 1.0])
def test_speedup_refuses_a_nonsense_margin(margin: float) -> None:
    with pytest.raises(ValueError):
        speedup("a", [1.0, 2.0], "b", [1.0, 2.0], 1, margin=margin)


def test_speedup_round_trips_through_its_dict_and_reads_old_records() -> None:
    s = speedup("a", [130.0, 128.0, 132.0], "b", BASE, 16, margin=0.05)
    assert Speedup.from_dict(s.to_dict()) == s
    old = {"arm": "a", "baseline": "b", "concurrency": 4, "verdict": "cannot tell",
           "ratio": Interval(1.5, None, None, 1).to_dict(), "margin": 0.05}
    assert Speedup.from_dict(old).verdict is Verdict.INCONCLUSIVE
    assert Speedup.from_dict(old).equivalence is None


def trials(true: float, repeats: int, noise: float, n: int, seed: int = 1,
           margin: float = 0.05) -> Counter[Verdict]:
    """Verdicts over `n` seeded trials: both arms Gaussian with relative sd `noise`."""
    rng, seen = random.Random(seed), Counter()
    for _ in range(n):
        base = [rng.gauss(100.0, 100.0 * noise) for _ in range(repeats)]
        arm = [rng.gauss(100.0 * true, 100.0 * true * noise) for _ in range(repeats)]
        seen[speedup("a", arm, "b", base, 8, margin).verdict] += 1
    return seen


def test_a_true_ten_percent_speedup_over_three_noisy_repeats_no_longer_reads_comparable() -> None:
    # The old rule said "comparable" 67% of the time here (validity-facts.md).
    n = 1500
    seen = trials(1.10, 3, 0.05, n)
    assert seen[Verdict.COMPARABLE] / n <= 0.01
    assert seen[Verdict.SLOWER] == 0
    assert 0.25 <= seen[Verdict.FASTER] / n <= 0.45  # 34% in 4000 trials
    assert 0.55 <= seen[Verdict.INCONCLUSIVE] / n <= 0.75
    # Ten repeats see it almost always.
    assert trials(1.10, 10, 0.05, 400)[Verdict.FASTER] / 400 >= 0.93


def test_false_equivalence_at_the_margin_is_at_most_five_percent() -> None:
    # A true change of exactly the margin: the two one-sided tests' size (5%).
    n = 1500
    for repeats in (3, 5):
        assert trials(1.05, repeats, 0.01, n)[Verdict.COMPARABLE] / n <= 0.06


def test_no_change_with_little_noise_is_comparable_and_never_faster_by_chance() -> None:
    n = 1000
    quiet = trials(1.0, 3, 0.01, n)
    assert quiet[Verdict.COMPARABLE] / n >= 0.97
    noisy = trials(1.0, 3, 0.05, n, seed=2)
    assert (noisy[Verdict.FASTER] + noisy[Verdict.SLOWER]) / n <= 0.05  # 95% intervals
    assert noisy[Verdict.COMPARABLE] / n <= 0.06  # too noisy to claim equivalence


def test_a_change_beyond_the_min_detectable_is_mostly_seen() -> None:
    # The textbook (t + t) approximation is optimistic at 4 degrees of freedom: at the design's
    # MDE (15.6% for 3 repeats, 5% noise) "faster" comes 65% of the time, at 1.3 MDE 83%.
    design = (t_quantile(0.975, 4) + t_quantile(0.8, 4)) * 0.05 * (2 / 3) ** 0.5
    assert design == pytest.approx(0.153, abs=0.002)
    n = 800
    assert trials(1 + design, 3, 0.05, n, seed=3)[Verdict.FASTER] / n >= 0.55
    assert trials(1 + 1.3 * design, 3, 0.05, n, seed=4)[Verdict.FASTER] / n >= 0.75


def test_results_sentence_merges_runs_of_one_verdict_by_concurrency() -> None:
    speedups = [
        speedup("adaptive", [130.0, 128.0, 132.0], "fixed", BASE, 256, 0.05),
        speedup("adaptive", [99.5, 100.5, 100.0], "fixed", BASE, 4, 0.05),
        speedup("adaptive", [120.0, 121.0, 119.0], "fixed", BASE, 64, 0.05),
        speedup("adaptive", [100.5, 101.0, 99.0], "fixed", BASE, 8, 0.05),
        speedup("adaptive", [60.0, 140.0, 100.0], "fixed", BASE, 512, 0.05),
    ]
    sentence = results_sentence(speedups)
    assert sentence.startswith("adaptive over fixed: comparable at concurrencies 4 and 8 (")
    assert "; faster at concurrencies 64 and 256 (1.20x to 1.30x)" in sentence
    mde = speedups[-1].mde
    assert "; inconclusive at concurrency 512 (1.00x, 95% interval " in sentence
    assert f"smallest detectable change {100 * mde:.0f}%)" in sentence
    assert sentence.endswith("(95% intervals over 3 repeats; comparable only when the 90% "
                             "interval lies within the equivalence margin of 5%).")


def test_a_single_comparable_speedup_cites_its_90_percent_interval() -> None:
    s = speedup("a", [100.5, 99.5, 100.0], "b", BASE, 4, 0.05)
    assert f"comparable at concurrency 4 (1.00x, 90% interval {s.equivalence.low:.2f}x to " \
        f"{s.equivalence.high:.2f}x)" in results_sentence([s])


def test_results_sentence_says_why_it_is_inconclusive() -> None:
    sentence = results_sentence([speedup("a", [150.0], "b", [100.0], 64, 0.05)])
    assert sentence.startswith("a over b: inconclusive at concurrency 64 (1.50x; fewer than "
                               "two repeats) (95% intervals over 1 repeat;")


def test_results_sentence_of_nothing_says_so() -> None:
    assert results_sentence([]).startswith("No speedup was measured")


samples = st.lists(st.floats(50.0, 5000.0), min_size=2, max_size=5)


@settings(max_examples=60, deadline=None)
@given(samples, samples, st.sampled_from([0.0, 0.05, 0.2]))
def test_property_the_verdict_follows_its_intervals_and_flips_with_the_arms(
        arm: list[float], base: list[float], margin: float) -> None:
    there = speedup("a", arm, "b", base, 8, margin)
    back = speedup("b", base, "a", arm, 8, margin)
    assert back.ratio.estimate == pytest.approx(1 / there.ratio.estimate)
    assert there.ratio == ratio_interval(arm, base, 0.95)
    assert there.equivalence == ratio_interval(arm, base, 0.90)
    if there.verdict is Verdict.COMPARABLE:
        assert 1 - margin <= there.equivalence.low <= there.equivalence.high <= 1 + margin
    elif there.verdict is Verdict.FASTER:
        assert there.ratio.low > 1 and there.ratio.estimate > 1 + margin
    elif there.verdict is Verdict.SLOWER:
        assert there.ratio.high < 1 and there.ratio.estimate < 1 - margin
    flipped = {Verdict.FASTER: Verdict.SLOWER, Verdict.SLOWER: Verdict.FASTER}
    if there.verdict in flipped and abs(1 / there.ratio.estimate - 1) > margin \
            and back.ratio.bounded:
        assert back.verdict is flipped[there.verdict]
    assert there.mde == pytest.approx(back.mde)  # the noise, not the direction

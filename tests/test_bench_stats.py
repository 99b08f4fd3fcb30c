"""The bench statistics on known data: t quantiles (and the incomplete beta behind them), mean
intervals and Fieller ratio intervals. The verdicts on them: test_bench_verdicts.py."""

from __future__ import annotations

import math
import random

import pytest

from dspark_cli.bench.stats import (
    Interval,
    incomplete_beta,
    mean_interval,
    ratio_interval,
    t_quantile,
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


@pytest.mark.parametrize("p", [0.6, 0.8, 0.9, 0.975, 0.995, 0.9999])
def test_t_quantile_matches_the_closed_forms_of_one_two_and_four_df(p: float) -> None:
    assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-10)
    assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)),
                                             rel=1e-10)
    a = 4 * p * (1 - p)  # df 4: t = sign * 2 sqrt(cos(acos(sqrt a) / 3) / sqrt a - 1)
    assert t_quantile(p, 4) == pytest.approx(
        2 * math.sqrt(math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a) - 1), rel=1e-10)


@pytest.mark.parametrize(("a", "b", "x", "expected"), [
    (1.0, 1.0, 0.3, 0.3),  # the uniform
    (2.0, 1.0, 0.3, 0.09),  # x^a when b = 1
    (0.5, 0.5, 0.25, 1 / 3),  # arcsine: 2/pi asin(sqrt x)
    (3.0, 0.5, 0.0, 0.0), (3.0, 0.5, 1.0, 1.0),
])
def test_incomplete_beta_on_known_values(a: float, b: float, x: float, expected: float) -> None:
    assert incomplete_beta(a, b, x) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert incomplete_beta(a, b, x) + incomplete_beta(b, a, 1 - x) == pytest.approx(1.0, abs=1e-13)


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

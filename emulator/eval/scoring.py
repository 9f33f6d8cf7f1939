"""The reliability figures of a task's trials, as the evaluation harnesses define them, each with a 95% interval.

The intervals assume what pass@k and pass^k themselves assume: the task's n trials are independent tries of the
same agent, each succeeding with one unknown probability p (the same seed and starting state each time; a model's
sampling is what varies). Wilson's score interval bounds p from the passed count; pass@k = 1 − (1 − p)^k and
pass^k = p^k rise with p, so p's bounds put into them bound the pass@k and pass^k of k fresh tries. It is an
interval for those chances, not for the n trials that ran: the unbiased point estimates (C(n−c,k) and C(c,k) over
C(n,k)) can lie outside it at small n (2 of 3 passed: pass^3 is 0, while p^3 may well be 0.3), and then the interval
is widened to hold the estimate. With 3 trials all passed, p is only known to be above 0.44: run more trials for a
narrower interval. Trials that are not independent (an agent that caches, a shared rate limit) make it too narrow."""

from __future__ import annotations

from math import comb, sqrt

import msgspec

CONFIDENCE = 0.95
Z = 1.959963984540054  # the standard normal's 97.5th percentile: a two-sided 95% interval


class Interval(msgspec.Struct, kw_only=True):
    """A 95% confidence interval, both ends included."""

    low: float
    high: float


def pass_at_1(n: int, passed: int) -> float:
    """The share of trials that passed: the chance that one try succeeds."""
    return passed / n if n else 0.0


def pass_at_k(n: int, passed: int, k: int) -> float:
    """The unbiased pass@k of Chen et al. (HumanEval): the chance that at least one of k tries drawn from the n
    succeeds, 1 − C(n − passed, k) / C(n, k). It rises with k, as pass^k falls."""
    _check_k(n, k)
    return 1.0 - comb(n - passed, k) / comb(n, k)


def pass_hat_k(n: int, passed: int, k: int) -> float:
    """τ-bench's pass^k: the chance that k tries drawn from the n all succeed, C(passed, k) / C(n, k). With
    k = n it is 1 when every trial passed and 0 otherwise; it falls as k grows, which pass@k does not."""
    _check_k(n, k)
    return comb(passed, k) / comb(n, k)


def wilson(n: int, passed: int, z: float = Z) -> Interval:
    """Wilson's score interval for the success rate p of n independent trials of which `passed` succeeded (95% by
    default). Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n passed."""
    if n == 0:
        return Interval(low=0.0, high=1.0)
    p, z2 = passed / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # At 0 or n passed the exact end is 0 or 1; the formula reaches it only up to rounding.
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    return Interval(low=low, high=1.0 if passed == n else min(1.0, centre + half))


def pass_at_1_interval(n: int, passed: int) -> Interval:
    """pass@1's interval: Wilson's bounds of p themselves."""
    return _holding(wilson(n, passed), pass_at_1(n, passed))


def pass_at_k_interval(n: int, passed: int, k: int) -> Interval:
    """pass@k's interval: 1 − (1 − p)^k at Wilson's bounds of p, widened to hold the point estimate."""
    p = wilson(n, passed)
    return _holding(Interval(low=1 - (1 - p.low) ** k, high=1 - (1 - p.high) ** k), pass_at_k(n, passed, k))


def pass_hat_k_interval(n: int, passed: int, k: int) -> Interval:
    """pass^k's interval: p^k at Wilson's bounds of p, widened to hold the point estimate."""
    p = wilson(n, passed)
    return _holding(Interval(low=p.low**k, high=p.high**k), pass_hat_k(n, passed, k))


def _holding(interval: Interval, estimate: float) -> Interval:
    return Interval(low=round(min(interval.low, estimate), 4), high=round(max(interval.high, estimate), 4))


def _check_k(n: int, k: int) -> None:
    if not 0 < k <= n:
        raise ValueError(f"pass@k and pass^k need 0 < k <= n (k={k}, n={n})")

"""The reliability figures of a task's trials, as the evaluation harnesses define them."""

from __future__ import annotations

from math import comb


def pass_at_1(n: int, passed: int) -> float:
    """The share of trials that passed: the chance that one try succeeds."""
    return passed / n if n else 0.0


def pass_hat_k(n: int, passed: int, k: int) -> float:
    """τ-bench's pass^k: the chance that k tries drawn from the n all succeed, C(passed, k) / C(n, k). With
    k = n it is 1 when every trial passed and 0 otherwise; it falls as k grows, which pass@k does not."""
    if not 0 < k <= n:
        raise ValueError(f"pass^k needs 0 < k <= n (k={k}, n={n})")
    return comb(passed, k) / comb(n, k)

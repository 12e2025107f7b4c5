"""The canary statistic's false-positive rate on seeded null pairs (candidate as good as `against`): the share of runs
whose permutation p, and whose t interval, say "different" at 0.05. Run: python -m bench.canary [--quick]."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from pipeline import canary

Pair = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def noise(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A continuous metric: candidate = against + zero-mean noise."""
    against = rng.uniform(size=n)
    return against + rng.normal(0, 0.1, n), against


def binary(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """hit@k as retrievers give it: each question has its own difficulty, and both pipelines hit it with the same
    probability, independently (many zero differences, the rest +1 or -1)."""
    p = rng.beta(2, 1, size=n)
    return (rng.uniform(size=n) < p).astype(float), (rng.uniform(size=n) < p).astype(float)


def graded(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """recall@k of questions with one to three relevant documents, each found with the question's probability."""
    relevant = rng.integers(1, 4, size=n)
    p = rng.beta(2, 1, size=n)
    return rng.binomial(relevant, p) / relevant, rng.binomial(relevant, p) / relevant


SETTINGS: dict[str, Pair] = {"noise": noise, "hit (binary)": binary, "recall (graded)": graded}


def rates(pair: Pair, n: int, runs: int, seed: int) -> tuple[float, float, float]:
    """(share with p < 0.05, share whose 95% t interval excludes 0, seconds per run)."""
    rng = np.random.default_rng(seed)
    by_p = by_ci = 0
    t0 = time.perf_counter()
    for _ in range(runs):
        got = canary.paired(*pair(rng, n))
        by_p += got.p_value < 0.05
        by_ci += not got.ci_low <= 0 <= got.ci_high  # NaN (no spread, all zero) counts as not different
    return by_p / runs, by_ci / runs, (time.perf_counter() - t0) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200 runs per setting instead of 2000")
    args = parser.parse_args()
    runs = 200 if args.quick else 2000
    print(f"null pairs, {runs} seeded runs per row; nominal rate 0.05 (exact flips up to {canary.EXACT_MAX} non-zero "
          f"differences, else {canary.DRAWS:,} Monte Carlo draws)")
    print(f"{'setting':<18}{'questions':>10}{'p < 0.05':>10}{'t CI excl. 0':>14}{'ms/run':>8}")
    for seed, (name, pair) in enumerate(SETTINGS.items()):
        for n in (12, 40):
            by_p, by_ci, seconds = rates(pair, n, runs, seed)
            print(f"{name:<18}{n:>10}{by_p:>10.3f}{by_ci:>14.3f}{seconds * 1000:>8.1f}")


if __name__ == "__main__":
    main()

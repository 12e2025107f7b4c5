"""The answer-layer alert rules on null streams: how often `alerts.answer_alerts` raises an alert when nothing
changed. Per-question K-precision and faithfulness drawn each day from a fixed per-question Beta (seeded), 50
questions, one pipeline; every day evaluated with the history up to it, as the job does. Prints alert rows
per 90 days (an upper bound on pages: consecutive days of one condition count each, before the notifier's
confirmation and incident grouping).

    python -m bench.answers_null [--days 120] [--seeds 3] [--questions 50]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from pipeline import alerts, contract
from pipeline.config import AlertsConfig


def stream(seed: int, days: int, questions: int, decline_day: int | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    mean_k = rng.beta(8, 2, questions)  # each question's own typical K-precision (mean about 0.8)
    mean_f = rng.beta(9, 1.5, questions)
    start = pd.Timestamp("2026-01-01")
    rows = []
    for d in range(days):
        day = start + pd.Timedelta(days=d)
        k = rng.beta(mean_k * 20, (1 - mean_k) * 20)
        f = rng.beta(mean_f * 10, (1 - mean_f) * 10)
        if decline_day is not None and d >= decline_day:  # the check that the rules can fire at all
            k, f = k * 0.8, f * 0.8
        for q in range(questions):
            rows.append({contract.RUN_DATE: day, contract.PIPELINE: "logged", contract.QUESTION_ID: f"q{q:03d}",
                         "k_precision": k[q], "faithfulness": f[q], "answer_relevance": np.nan})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=120)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--decline-day", type=int, default=None,
                        help="from this day every value x 0.8 (not a null: shows the rules fire)")
    args = parser.parse_args()
    config = AlertsConfig()
    print(f"answer-layer rules on null streams: {args.questions} questions, {args.days} days, "
          f"alpha {config.alpha}, judge trusted")
    print(f"{'seed':>4}  {'alert rows':>10}  {'warning rows':>12}  {'alert days/90':>13}  seconds")
    total_alert_days = 0
    for seed in range(args.seeds):
        frame = stream(seed, args.days, args.questions, args.decline_day)
        t0 = time.perf_counter()
        counts = dict.fromkeys(contract.SEVERITIES, 0)
        alert_days = set()
        for today in sorted(frame[contract.RUN_DATE].unique()):
            today = pd.Timestamp(today)
            history = frame[frame[contract.RUN_DATE] <= today]
            for a in alerts.answer_alerts(today.date().isoformat(), today, history, config,
                                          {"faithfulness": True}):
                counts[a.severity] = counts.get(a.severity, 0) + 1
                if a.severity == contract.ALERT:
                    alert_days.add(today)
                    if args.decline_day is not None and len(alert_days) == 1:
                        first = (today - frame[contract.RUN_DATE].min()).days
                        print(f"      first alert {today.date()} (day {first}): {a.rule} {a.metric}")
        total_alert_days += len(alert_days)
        print(f"{seed:>4}  {counts[contract.ALERT]:>10}  {counts[contract.WARNING]:>12}  "
              f"{len(alert_days) * 90 / args.days:>13.2f}  {time.perf_counter() - t0:7.1f}")
    print(f"pooled: {total_alert_days * 90 / (args.days * args.seeds):.2f} days with an alert row per 90 days")


if __name__ == "__main__":
    main()

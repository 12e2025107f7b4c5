"""Alert rules over the stored series (drop, sigma band, floor, PSI, missing gold, failed feeds), the
alert records written to alerts.csv, and the Slack-compatible webhook notifier."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

import numpy as np
import pandas as pd

from pipeline import store
from pipeline.config import CRITICALITY, AlertsConfig
from pipeline.metrics import MEAN_NAMES

log = logging.getLogger(__name__)

# Rule names, as written to alerts.csv's `rule` column.
DROP = "drop"
SIGMA = "sigma"
FLOOR = "floor"
PSI = "psi"
GOLD_MISSING = "gold_missing"
FEEDS_FAILED = "feeds_failed"
RULES = (DROP, SIGMA, FLOOR, PSI, GOLD_MISSING, FEEDS_FAILED)

ALERT = "alert"
WARNING = "warning"
_SEVERITY_RANK = {WARNING: 0, ALERT: 1}

# The harmful direction of a metric: a fall for the relevance metrics, a rise for unjudged@k.
Direction = Literal["fall", "rise"]
FALL: Direction = "fall"
RISE: Direction = "rise"
LOWER_IS_BETTER = frozenset({"unjudged"})

# metrics.csv names -> per_question.csv columns (they differ only for mrr / rr).
PER_QUESTION_COLUMN = {mean: column for column, mean in MEAN_NAMES.items()}

# The drop rule needs this many earlier runs (or the whole window, if smaller): a mean of one or two
# runs is a noisy baseline. The sigma rule waits for the full window.
MIN_BASELINE = 3
SIGNIFICANCE = 0.05  # p below this: the message calls the change larger than question-to-question noise
SEED = 0  # the randomisation test's seed, so a message is the same on every re-run of a date
_PERMUTATION_CHUNK = 2000  # sign-flip rows drawn at once, bounding memory for large question sets

# drift.csv statistics read by the PSI rule. The rule fires on the mean PSI over the reference's
# principal components: the 0.1 / 0.2 thresholds are calibrated for one variable, and the maximum
# over n components would cross them by chance far more often. The maximum is quoted in the message.
PSI_STATISTIC = "psi_mean"
PSI_MAX = "psi_max"
PSI_EXPECTED = "psi_expected"  # PSI expected with no drift at all, given the sample sizes

CORPUS_WIDE = ""  # the `pipeline` of alerts that concern the corpus or the run, not one pipeline
ONGOING_PREFIX = "ongoing since "
MAX_QUESTION_IDS = 5  # question ids named in a gold_missing message


@dataclass(frozen=True)
class Alert:
    """One alerts.csv row. `new` is derived from the message: an alert that continues a condition
    already alerted on the previous run starts with "ongoing since <date>: ", so the CSV keeps the
    contract's columns and a row read back still tells whether it was new."""

    run_date: str
    rule: str
    pipeline: str
    metric: str
    value: float
    baseline: float
    change_pct: float
    threshold: float
    severity: str
    message: str

    @property
    def new(self) -> bool:
        return not self.message.startswith(ONGOING_PREFIX)

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the same condition from one run to the next."""
        return self.rule, self.pipeline, self.metric

    def row(self) -> dict:
        return {column: getattr(self, column) for column in store.ALERTS_COLUMNS}


def alerts_frame(alerts: Iterable[Alert]) -> pd.DataFrame:
    """The alerts as alerts.csv rows, with the contract's columns even when there are none (for
    `store.replace_date`, so a day without alerts also clears that date's earlier rows)."""
    return pd.DataFrame([a.row() for a in alerts], columns=list(store.ALERTS_COLUMNS))


def has_alerts(alerts: Iterable[Alert]) -> bool:
    """Whether any alert of severity "alert" (not merely a warning) fired: the `--fail-on-alert` test."""
    return any(a.severity == ALERT for a in alerts)


# --- pure rule functions ---------------------------------------------------------


def direction_of(metric: str) -> Direction:
    """The harmful direction of a metric name (without @k)."""
    return RISE if metric in LOWER_IS_BETTER else FALL


def parse_series(name: str) -> tuple[str, int]:
    """"recall@5" -> ("recall", 5); the metric must be one of metrics.csv's names."""
    metric, _, k = name.partition("@")
    if metric not in PER_QUESTION_COLUMN or not k.isdigit() or int(k) < 1:
        raise ValueError(f"{name!r} is not metric@k with a metric in {', '.join(PER_QUESTION_COLUMN)}")
    return metric, int(k)


def relative_change(today: float, baseline: float) -> float:
    """(today - baseline) / baseline; from a zero baseline any rise is +inf and no change is 0."""
    if baseline == 0:
        return 0.0 if today == 0 else math.copysign(math.inf, today)
    return (today - baseline) / abs(baseline)


def harmful(change: float, direction: Direction) -> float:
    """A signed change turned positive when it goes the harmful way."""
    return -change if direction == FALL else change


def sigma_distance(today: float, mean: float, std: float, direction: Direction) -> float:
    """Standard deviations between today and the mean, positive in the harmful direction.

    A value equal to the mean (within float noise) is 0 whatever the spread; with a zero spread
    any other value is infinitely far, so the band fires without dividing by zero."""
    if math.isclose(today, mean, rel_tol=1e-9, abs_tol=1e-12):
        return 0.0
    deviation = harmful(today - mean, direction)
    return math.copysign(math.inf, deviation) if std == 0 else deviation / std


def psi_severity(value: float, warning: float, alert: float) -> str | None:
    """"alert" at or above `alert`, "warning" at or above `warning`, else None."""
    if value >= alert:
        return ALERT
    return WARNING if value >= warning else None


def drop_threshold(config: AlertsConfig, series: str) -> float:
    """The relative drop that fires for a metric@k: its own `drop` setting, else the criticality preset."""
    return config.drop.get(series, CRITICALITY[config.criticality])


def paired_randomisation_test(differences: Sequence[float] | np.ndarray, permutations: int, seed: int,
                              direction: Direction) -> float:
    """One-sided sign-flip test that the mean paired difference goes the harmful way.

    Under the null a question's difference (today minus its own baseline) is as likely negative
    as positive, so each of `permutations` seeded draws flips every sign at random; the p-value
    is (draws whose mean is at least as extreme + 1) / (permutations + 1), never 0."""
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or d.size == 0 or not np.isfinite(d).all():
        raise ValueError("differences must be a non-empty 1-d sequence of finite numbers")
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    if direction not in (FALL, RISE):
        raise ValueError(f"direction must be {FALL!r} or {RISE!r}, got {direction!r}")
    x = d if direction == FALL else -d  # oriented so that harmful means negative
    observed = x.mean()
    tolerance = 1e-9 * float(np.abs(x).mean())  # a flip that reproduces `observed` counts despite rounding
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, permutations, _PERMUTATION_CHUNK):
        rows = min(_PERMUTATION_CHUNK, permutations - start)
        signs = rng.integers(0, 2, size=(rows, x.size)) * 2 - 1
        extreme += int(np.count_nonzero(signs @ x / x.size <= observed + tolerance))
    return (extreme + 1) / (permutations + 1)


# --- reading the frames ------------------------------------------------------------


def _days(frame: pd.DataFrame) -> pd.Series:
    return pd.to_datetime(frame[store.RUN_DATE])


def _iso(day: pd.Timestamp | date) -> str:
    return day.strftime("%Y-%m-%d")


@dataclass(frozen=True)
class Trailing:
    """The earlier runs forming a series' baseline, oldest first (today is never among them)."""

    days: tuple[pd.Timestamp, ...]
    values: np.ndarray

    @property
    def n(self) -> int:
        return len(self.days)

    @property
    def mean(self) -> float:
        return float(self.values.mean()) if self.n else math.nan

    @property
    def std(self) -> float:
        """Sample sd (ddof=1); exactly 0 for equal values, whose float mean may differ from them by a rounding."""
        if self.n < 2:
            return math.nan
        return 0.0 if np.ptp(self.values) == 0 else float(self.values.std(ddof=1))


def _series(metrics: pd.DataFrame, pipeline: str, metric: str, k: int, today: pd.Timestamp,
            window: int) -> tuple[float, Trailing, int]:
    """Today's value (NaN if absent), the last `window` earlier runs with a value, and today's number
    of questions in the mean (0 if absent)."""
    rows = metrics[(metrics["pipeline"] == pipeline) & (metrics["metric"] == metric) & (metrics["k"] == k)]
    values = pd.Series(rows["value"].to_numpy(dtype=float), index=_days(rows)).dropna().sort_index()
    current = values[values.index == today]
    earlier = values[values.index < today].tail(window)
    n_questions = rows.loc[_days(rows) == today, "n_questions"]
    return (float(current.iloc[-1]) if len(current) else math.nan,
            Trailing(tuple(earlier.index), earlier.to_numpy()),
            int(n_questions.iloc[-1]) if len(n_questions) and pd.notna(n_questions.iloc[-1]) else 0)


def question_differences(per_question: pd.DataFrame, pipeline: str, metric: str, k: int,
                         today: pd.Timestamp, baseline_days: Sequence[pd.Timestamp]) -> np.ndarray:
    """Per question: today's value minus the question's mean over the baseline runs.

    Questions without a value today or on every baseline run (no relevant document) are left out."""
    column = PER_QUESTION_COLUMN[metric]
    rows = per_question[(per_question["pipeline"] == pipeline) & (per_question["k"] == k)]
    days = _days(rows)
    current = rows[days == today].set_index("question_id")[column].astype(float)
    past = rows[days.isin(list(baseline_days))].groupby("question_id")[column].mean().astype(float)
    return (current - past).dropna().to_numpy()


# --- messages ----------------------------------------------------------------------------


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _evidence(differences: np.ndarray, permutations: int, direction: Direction) -> str:
    noun = "drop" if direction == FALL else "rise"
    if differences.size == 0:
        return f"no per-question rows to test the {noun} against question-to-question noise"
    p = paired_randomisation_test(differences, permutations, SEED, direction)
    test = f"paired randomisation test p={p:.2g}, {_plural(differences.size, 'question')}"
    verdict = "larger than" if p < SIGNIFICANCE else "within"
    return f"the {noun} is {verdict} question-to-question noise ({test})"


def _threshold_source(config: AlertsConfig, series: str) -> str:
    if series in config.drop:
        return f"{series}'s own drop setting"
    return f"{config.criticality} criticality"


# --- the rules over the frames -----------------------------------------------------------------


def _series_alerts(day: str, today: pd.Timestamp, pipeline: str, name: str, metrics: pd.DataFrame,
                   per_question: pd.DataFrame, config: AlertsConfig, watched: tuple[str, ...]) -> list[Alert]:
    """The drop, sigma and floor rules for one pipeline's metric@k."""
    metric, k = parse_series(name)
    value, trailing, n_questions = _series(metrics, pipeline, metric, k, today, config.window)
    if math.isnan(value):
        return []
    # A mean over n questions moves in steps of up to 1/n: a band narrower than one question's worth
    # would fire whenever a single question changes on an otherwise flat series.
    spread = max(trailing.std, 1 / n_questions) if n_questions else trailing.std
    direction = direction_of(metric)
    change = relative_change(value, trailing.mean) if trailing.n else math.nan
    threshold = drop_threshold(config, name)
    drops = (name in watched and trailing.n >= min(MIN_BASELINE, config.window)
             and harmful(change, direction) > threshold)
    distance = (sigma_distance(value, trailing.mean, spread, direction)
                if name in watched and trailing.n == config.window else math.nan)
    leaves_band = distance > config.sigma
    evidence = ""
    if drops or leaves_band:
        differences = question_differences(per_question, pipeline, metric, k, today, trailing.days)
        evidence = _evidence(differences, config.permutations, direction)
    verb, side = ("fell", "below") if value < trailing.mean else ("rose", "above")
    row = dict(run_date=day, pipeline=pipeline, metric=name, value=value, baseline=trailing.mean,
               change_pct=change * 100)
    alerts = []
    if drops:
        amount = f"{abs(change):.1%}" if math.isfinite(change) else "from zero"
        alerts.append(Alert(rule=DROP, threshold=threshold * 100, severity=ALERT, **row, message=(
            f"{name} of {pipeline} {verb} {amount} to {value:.3f} against its {trailing.n}-run mean "
            f"{trailing.mean:.3f} (threshold {_pct(threshold)}, {_threshold_source(config, name)}); {evidence}")))
    if leaves_band:
        width = (f"sd {trailing.std:.3f}" if spread == trailing.std else
                 f"sd {trailing.std:.3f}, widened to one question's worth 1/{n_questions}")
        how_far = (f"{distance:.1f} standard deviations {side} its {trailing.n}-run mean {trailing.mean:.3f} "
                   f"({width}, threshold {config.sigma:g} sd)" if math.isfinite(distance) else
                   f"{side} the constant {trailing.mean:.3f} of its previous {trailing.n} runs "
                   f"(no run-to-run variation, so any change leaves the {config.sigma:g}-sd band)")
        alerts.append(Alert(rule=SIGMA, threshold=config.sigma, severity=ALERT, **row,
                            message=f"{name} of {pipeline} {verb} to {value:.3f}, {how_far}; {evidence}"))
    floor = config.floors.get(name)
    if floor is not None and value < floor:
        context = f"; its {trailing.n}-run mean is {trailing.mean:.3f}" if trailing.n else ""
        alerts.append(Alert(rule=FLOOR, threshold=floor, severity=ALERT, **row, message=(
            f"{name} of {pipeline} is {value:.3f}, below its configured floor {floor:.3f}{context}")))
    return alerts


def _metric_alerts(day: str, today: pd.Timestamp, metrics: pd.DataFrame, per_question: pd.DataFrame,
                   config: AlertsConfig, ks: tuple[int, ...]) -> list[Alert]:
    """Drop and sigma over the watched series; floors over every series that has one."""
    watched = config.watched(ks)
    names = list(dict.fromkeys([*watched, *config.floors]))
    pipelines = metrics.loc[_days(metrics) == today, "pipeline"].drop_duplicates()
    return [alert for pipeline in pipelines for name in names
            for alert in _series_alerts(day, today, pipeline, name, metrics, per_question, config, watched)]


def _psi_alerts(day: str, today: pd.Timestamp, drift: pd.DataFrame, config: AlertsConfig) -> list[Alert]:
    rows = drift[_days(drift) == today].drop_duplicates("statistic", keep="last").set_index("statistic")
    if PSI_STATISTIC not in rows.index or pd.isna(rows.at[PSI_STATISTIC, "value"]):
        return []
    value = float(rows.at[PSI_STATISTIC, "value"])
    severity = psi_severity(value, config.psi_warning, config.psi_alert)
    if severity is None:
        return []
    threshold = config.psi_alert if severity == ALERT else config.psi_warning
    stat = rows.loc[PSI_STATISTIC]
    message = (f"embedding drift: {PSI_STATISTIC} is {value:.3f} against the reference of {stat['reference_date']}, "
               f"at or above the {severity} threshold {threshold:g}")
    if PSI_MAX in rows.index:
        message += f" (the most shifted component has {PSI_MAX} {rows.at[PSI_MAX, 'value']:.3f})"
    expected = float(rows.at[PSI_EXPECTED, "value"]) if PSI_EXPECTED in rows.index else math.nan
    if expected >= config.psi_warning:
        message += (f"; but the samples are too small for the threshold to mean much: with no drift at all "
                    f"PSI is expected to be about {expected:.3f} at {stat['n_reference']} reference and "
                    f"{stat['n_current']} current samples, itself at or above the warning threshold "
                    f"{config.psi_warning:g}")
    return [Alert(day, PSI, CORPUS_WIDE, PSI_STATISTIC, value, expected, math.nan, threshold, severity, message)]


def _gold_missing_alerts(day: str, today: pd.Timestamp, per_question: pd.DataFrame) -> list[Alert]:
    rows = per_question[_days(per_question) == today]
    if rows.empty:
        return []
    # Every pipeline and k carries the same gold_missing per question: read one of them.
    first = rows[(rows["pipeline"] == rows["pipeline"].iloc[0]) & (rows["k"] == rows["k"].min())]
    missing = first[first["gold_missing"].fillna(0) > 0]
    if missing.empty:
        return []
    total = int(missing["gold_missing"].sum())
    ids = list(missing["question_id"])
    named = ", ".join(ids[:MAX_QUESTION_IDS]) + (f" and {len(ids) - MAX_QUESTION_IDS} more"
                                                  if len(ids) > MAX_QUESTION_IDS else "")
    message = (f"{_plural(total, 'relevant document')} of the gold set "
               f"{'is' if total == 1 else 'are'} missing from the corpus, for {_plural(len(ids), 'question')} "
               f"({named}); their scores now measure missing content, not retrieval")
    return [Alert(day, GOLD_MISSING, CORPUS_WIDE, GOLD_MISSING, float(total), math.nan, math.nan, 0.0, ALERT,
                  message)]


def _feed_alerts(day: str, today: pd.Timestamp, runs: pd.DataFrame) -> list[Alert]:
    rows = runs[_days(runs) == today]
    if rows.empty:
        return []
    run = rows.iloc[-1]
    failed = int(0 if pd.isna(run["feeds_failed"]) else run["feeds_failed"])
    ok = int(0 if pd.isna(run["feeds_ok"]) else run["feeds_ok"])
    if failed == 0:
        return []
    if ok == 0:
        severity = ALERT
        message = (f"every feed failed ({_plural(failed, 'feed')}); today's metrics were measured on the "
                   f"corpus as it was, without any new documents")
    else:
        severity = WARNING
        message = (f"{failed} of {_plural(failed + ok, 'feed')} failed; today's corpus lacks their new "
                   f"documents")
    return [Alert(day, FEEDS_FAILED, CORPUS_WIDE, FEEDS_FAILED, float(failed), math.nan, math.nan, 0.0,
                  severity, message)]


def mark_ongoing(alerts: Sequence[Alert], today: pd.Timestamp, runs: pd.DataFrame,
                 previous: pd.DataFrame) -> list[Alert]:
    """Prefix "ongoing since <date>: " to alerts whose condition also fired on the previous run.

    The previous run is the latest earlier run date in runs.csv; the streak goes back over
    consecutive run dates on which the same (rule, pipeline, metric) fired, whatever its severity.
    An escalation (a warning yesterday, an alert today) stays new, so it is notified."""
    earlier = sorted({d for d in _days(runs) if d < today}, reverse=True)
    fired = {(d, rule, pipeline, metric): severity for d, rule, pipeline, metric, severity in zip(
        _days(previous), previous["rule"], previous["pipeline"].fillna(CORPUS_WIDE), previous["metric"],
        previous["severity"])}  # only earlier run dates are looked up, so rows of today never count
    marked = []
    for alert in alerts:
        streak = []
        for d in earlier:
            if (d, *alert.key) not in fired:
                break
            streak.append(d)
        if streak and _SEVERITY_RANK[fired[(streak[0], *alert.key)]] >= _SEVERITY_RANK[alert.severity]:
            alert = dataclasses.replace(alert, message=f"{ONGOING_PREFIX}{_iso(streak[-1])}: {alert.message}")
        marked.append(alert)
    return marked


def evaluate_alerts(run_date: date, metrics: pd.DataFrame, per_question: pd.DataFrame, drift: pd.DataFrame,
                    runs: pd.DataFrame, config: AlertsConfig, ks: tuple[int, ...],
                    previous: pd.DataFrame) -> list[Alert]:
    """Every alert of one run date, from the full histories (including that date's rows).

    `previous` is alerts.csv's history; rows of `run_date` itself in it are ignored, so re-running
    a date gives the same alerts. Nothing is read or written here."""
    today = pd.Timestamp(run_date)
    day = _iso(run_date)
    alerts = [
        *_metric_alerts(day, today, metrics, per_question, config, ks),
        *_psi_alerts(day, today, drift, config),
        *_gold_missing_alerts(day, today, per_question),
        *_feed_alerts(day, today, runs),
    ]
    return mark_ongoing(alerts, today, runs, previous)

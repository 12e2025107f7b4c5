"""Each configured source's freshness (the date of its last new item) and volume (new items per run): the
sources.csv series, and the two rules over it, a source silent past its usual gap and a source's volume spike."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd
from scipy import special  # scipy.stats costs 1.5 s to import; the two tails are these (tests check them)

from pipeline import series, store
from pipeline.config import AlertsConfig
from pipeline.contract import (ACTIVE_DAYS, GAP_DAYS, LAST_NEW, NEW_ITEMS, RUN_DATE, SOURCE, TOTAL_ITEMS,
                               USUAL_GAP_DAYS)
from pipeline.contract import FETCH_FAILED, FIRST_NEW
from pipeline.freshness import cadence_words


def source_rows(new_by_source: Sequence[tuple[str, str, int, int]], sources: Sequence[str], run_date: date,
                failed: Collection[str] = ()) -> list[dict]:
    """sources.csv's rows of `run_date`: one per configured source, in the configured order, a source that brought
    nothing included. `new_by_source`: `Corpus.new_by_source(run_date)`, (source, first seen, new, still present);
    `failed`: the sources whose fetch failed on the run.

    A source's days with new items are the run dates its documents were first seen on; its usual gap is the median
    gap between consecutive ones (empty with fewer than two). A source's first run brings its backlog (a folder's
    older dated files, a feed's current items): one day among the others."""
    day = store.iso_day(run_date)
    rows = []
    for name in sources:
        mine = [(seen, n, present) for source, seen, n, present in new_by_source if source == name and n > 0]
        days = [date.fromisoformat(seen) for seen, _, _ in mine]
        gaps = np.diff([d.toordinal() for d in days])
        last = days[-1] if days else None
        rows.append({RUN_DATE: day, SOURCE: name,
                     NEW_ITEMS: sum(n for seen, n, _ in mine if seen == day),
                     TOTAL_ITEMS: sum(present for _, _, present in mine),
                     LAST_NEW: store.iso_day(last) if last else "",
                     GAP_DAYS: (run_date - last).days if last else math.nan,
                     ACTIVE_DAYS: len(days),
                     USUAL_GAP_DAYS: float(np.median(gaps)) if len(gaps) else math.nan,
                     FIRST_NEW: store.iso_day(days[0]) if days else "",
                     FETCH_FAILED: int(name in failed)})
    return rows


# --- silence -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SilentSource:
    """A source whose days without a new item (`gap_days`) exceed its silence line (`line_days`)."""

    source: str
    last_new: str
    gap_days: int
    usual_gap_days: float
    line_days: float
    active_days: int
    rate: float = math.nan  # the share of its days with new items (`daily_rate`)
    n_sources: int = 1  # the sources tested on the run (Bonferroni)

    @property
    def message(self) -> str:
        from pipeline.alerts import plural  # the one wording of a count (alerts imports this module)

        gap = self.usual_gap_days
        return (f"source {self.source} silent since {self.last_new} (usually {cadence_words(gap)}): "
                f"no new item for {self.gap_days} days, more than {self.line_days:.3g} (the largest of the minimum, "
                f"the factor times its median gap of {plural(int(gap) if gap.is_integer() else gap, 'day')} and the "
                f"gap its rate of new items on {self.rate:.0%} of days leaves below alpha over "
                f"{plural(self.n_sources, 'source')}, over {self.active_days} days with new items)")


def daily_rate(active_days: int, first_new: str, last_new: str) -> float:
    """The share of a source's days that bring new items, smoothed: (k + 1/2) / (n + 1) for k days with new items
    after its first (the backlog) among the n days from its first to its last new item (the current gap left out:
    it is what is tested); NaN without two such days."""
    if not first_new or not last_new or active_days < 2:
        return math.nan
    n = (date.fromisoformat(last_new) - date.fromisoformat(first_new)).days
    return (active_days - 1 + 0.5) / (n + 1)


def rate_line(rate: float, alpha: float) -> float:
    """The days without a new item a source of this daily rate goes beyond with probability alpha: the g where
    (1 - rate) ** g = alpha (each day bringing items independently with probability `rate`); 0 when unknown."""
    if math.isnan(rate) or rate >= 1:
        return 0.0
    return math.log(alpha) / math.log1p(-rate)


def silence_line(usual_gap_days: float, config: AlertsConfig, rate: float = math.nan, n_sources: int = 1) -> float:
    """Days without a new item past which a source is silent: max(silence_min_days, silence_gap_factor x its usual
    gap, `rate_line` at silence_alpha / n_sources)."""
    return max(float(config.silence_min_days), config.silence_gap_factor * usual_gap_days,
               rate_line(rate, config.silence_alpha / n_sources))


def silent_sources(rows: pd.DataFrame, config: AlertsConfig) -> list[SilentSource]:
    """The sources of `rows` (sources.csv rows of one run) silent on it: their usual gap learned (at least
    `silence_min_history` days with new items), their fetch not failed on the run (`feeds_failed` reports it), and
    their days since the last new item beyond `silence_line` (Bonferroni over the sources so tested)."""
    tested = []
    for r in rows.itertuples(index=False):
        active, gap, usual = getattr(r, ACTIVE_DAYS), getattr(r, GAP_DAYS), getattr(r, USUAL_GAP_DAYS)
        if pd.isna(active) or int(active) < config.silence_min_history or pd.isna(gap) or pd.isna(usual):
            continue
        failed = getattr(r, FETCH_FAILED, 0)
        if not pd.isna(failed) and int(failed) == 1:
            continue
        first = getattr(r, FIRST_NEW, "")
        rate = daily_rate(int(active), first if isinstance(first, str) else "", getattr(r, LAST_NEW))
        tested.append((r, int(active), int(gap), float(usual), rate))
    out = []
    for r, active, gap, usual, rate in tested:
        line = silence_line(usual, config, rate, len(tested))
        if gap > line:
            out.append(SilentSource(getattr(r, SOURCE), getattr(r, LAST_NEW), gap, usual, line, active, rate,
                                    len(tested)))
    return out


# --- volume spikes -----------------------------------------------------------------------------------------


def upper_tail(x: int, mean: float, variance: float) -> float:
    """P(X >= x) for counts of this mean and variance: a negative binomial fitted by its moments when over-dispersed
    (variance > mean: r = mean^2 / (variance - mean), success probability mean / variance), else a Poisson of this
    mean. scipy.stats.nbinom.sf(x - 1, r, p) and poisson.sf(x - 1, mean), through scipy.special."""
    if x <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if variance > mean:
        r = mean * mean / (variance - mean)
        return float(special.betainc(x, r, 1 - mean / variance))
    return float(special.gammainc(x, mean))


@dataclass(frozen=True)
class VolumeSpike:
    """A source's new items on a run against its history (`n_runs` earlier runs, their `median`)."""

    source: str
    new_items: int
    median: float
    n_runs: int
    line: float  # spike_factor x max(median, 1): the practical size a spike passes
    p_value: float  # the upper tail, Holm-adjusted over the sources tested on the run
    n_sources: int

    @property
    def message(self) -> str:
        from pipeline.alerts import plural  # the one wording of a count (alerts imports this module)

        return (f"source {self.source}: {plural(self.new_items, 'new item')}, usually {self.median:g} (median of "
                f"{plural(self.n_runs, 'run')}); above {self.line:g} and p={self.p_value:.2g} after Holm over "
                f"{plural(self.n_sources, 'source')} (negative binomial fitted to those runs)")


def _history(frame: pd.DataFrame, source: str, today: pd.Timestamp, config: AlertsConfig) -> pd.Series:
    """A source's new items on its last `spike_window` runs before `today`, its backlog (its first day with new
    items) left out."""
    rows = frame[(frame[SOURCE] == source) & (frame[RUN_DATE] < today)].sort_values(RUN_DATE)
    backlog = (rows[ACTIVE_DAYS] == 1) & (rows[NEW_ITEMS] > 0)
    return rows.loc[~backlog, NEW_ITEMS].astype(float).tail(config.spike_window)


VARIANCE_CONFIDENCE = 0.9  # the fitted variance is the upper bound of its one-sided interval at this level


def _moments(history: pd.Series) -> tuple[float, float]:
    """The mean and the variance of the fitted count distribution: the history's mean, and the upper
    VARIANCE_CONFIDENCE bound of its variance (chi-square with n - 1 degrees of freedom) times (1 + 1/n), the
    variance of a new run around an estimated mean. With tens of runs the plain sample variance is often too small
    for over-dispersed counts, and its tail then pages on nothing (measured in the tests' null streams)."""
    n = len(history)
    mean, variance = float(history.mean()), float(history.var(ddof=1))
    upper = variance * (n - 1) / float(special.chdtri(n - 1, VARIANCE_CONFIDENCE))
    return mean, max(upper, mean) * (1 + 1 / n)


def volume_spikes(sources: pd.DataFrame, today: pd.Timestamp, config: AlertsConfig) -> list[VolumeSpike]:
    """The sources whose new items on `today` are far above their history: the negative binomial upper tail
    (`upper_tail`, moments of the last `spike_window` runs, at least `spike_min_history`) significant after Holm over
    the sources tested at `spike_alpha`, and above `spike_factor` x the history's median (at least 1)."""
    if sources.empty:
        return []
    frame = sources.assign(**{RUN_DATE: store.as_days(sources[RUN_DATE])})
    tested = []
    for r in frame[frame[RUN_DATE] == today].itertuples(index=False):
        name, x = getattr(r, SOURCE), getattr(r, NEW_ITEMS)
        history = _history(frame, name, today, config)
        if pd.isna(x) or len(history) < config.spike_min_history:
            continue
        tested.append((name, int(x), history, upper_tail(int(x), *_moments(history))))
    adjusted = series.holm([p for *_, p in tested]) if tested else []
    out = []
    for (name, x, history, _), p in zip(tested, adjusted):
        median = float(history.median())
        line = config.spike_factor * max(median, 1.0)
        if x > line and p < config.spike_alpha:
            out.append(VolumeSpike(name, x, median, len(history), line, p, len(tested)))
    return out


def last_new_line(sources: pd.DataFrame) -> str:
    """Each source's last new item on the latest run, in one line: "Sources' last new item: news 2025-10-30 (today),
    wire 2025-10-26 (4 days before; usually daily)"; "" without sources.csv rows."""
    from pipeline.alerts import plural  # the one wording of a count (alerts imports this module)

    if sources.empty:
        return ""
    frame = sources.assign(**{RUN_DATE: store.as_days(sources[RUN_DATE])})
    parts = []
    for r in frame[frame[RUN_DATE] == frame[RUN_DATE].max()].itertuples(index=False):
        last, gap, usual = getattr(r, LAST_NEW), getattr(r, GAP_DAYS), getattr(r, USUAL_GAP_DAYS)
        if not isinstance(last, str) or not last:
            parts.append(f"{getattr(r, SOURCE)} none yet")
            continue
        when = "the run's day" if gap == 0 else f"{plural(int(gap), 'day')} before"
        usually = f"; usually {cadence_words(float(usual))}" if gap and not pd.isna(usual) else ""
        parts.append(f"{getattr(r, SOURCE)} {last} ({when}{usually})")
    return "Sources' last new item: " + ", ".join(parts)


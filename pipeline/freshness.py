"""How old the data directory's history is: the usual cadence of its runs (learned from runs.csv) and whether the
latest run is overdue. One owner for the sentence every page's header, `driftwatch check` and the Prometheus
export give."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from pipeline import store
from pipeline.contract import RUN_DATE
from pipeline.demo import DEMO_CONFIG

OVERDUE_FACTOR = 1.5  # a history is stale when no run came within this many cadences of today
DEFAULT_CADENCE_DAYS = 1.0  # with fewer than two run dates: the daily job's


@dataclass(frozen=True)
class Freshness:
    """The latest run date against `today`. `cadence_days` is the median gap between consecutive run dates;
    `recorded` marks a history that is not a live monitor (the bundled demo): it is never stale."""

    last: date | None
    today: date
    cadence_days: float
    recorded: bool = False

    @property
    def age_days(self) -> int | None:
        return None if self.last is None else (self.today - self.last).days

    @property
    def stale(self) -> bool:
        """No run within OVERDUE_FACTOR x the cadence (never for a recorded history or one without runs)."""
        return (not self.recorded and self.age_days is not None
                and self.age_days > OVERDUE_FACTOR * self.cadence_days)

    @property
    def expected(self) -> str:
        """The cadence in words: "daily", "every 7 days"."""
        return cadence_words(self.cadence_days)

    @property
    def line(self) -> str:
        """"last run 2026-11-22 (3 days ago)"; stale: "no run since 2026-11-22 (expected daily)"."""
        if self.last is None:
            return "no run yet"
        if self.recorded:
            return f"recorded history (the demo): last run {self.last:%Y-%m-%d}"
        if self.stale:
            return f"no run since {self.last:%Y-%m-%d} (expected {self.expected}, {_ago(self.age_days)})"
        return f"last run {self.last:%Y-%m-%d} ({_ago(self.age_days)})"

    @property
    def sentence(self) -> str:
        """`line` as a sentence of its own (capitalised), as a page's header shows it."""
        return self.line[:1].upper() + self.line[1:]


def cadence_words(days: float) -> str:
    """A cadence in days in words: "daily", "every 7 days" (rounded to whole days)."""
    whole = round(days)
    return "daily" if whole <= 1 else f"every {whole} days"


def _ago(days: int) -> str:
    if days == 0:
        return "today"
    if days < 0:
        return f"{-days} days ahead of today's date"
    return "yesterday" if days == 1 else f"{days} days ago"


def cadence(runs: pd.DataFrame) -> float:
    """The median gap in days between consecutive run dates (DEFAULT_CADENCE_DAYS with fewer than two)."""
    if runs.empty:
        return DEFAULT_CADENCE_DAYS
    days = pd.Series(sorted(pd.to_datetime(runs[RUN_DATE]).dt.normalize().unique()))
    gaps = days.diff().dropna().dt.days
    return float(gaps.median()) if len(gaps) else DEFAULT_CADENCE_DAYS


def freshness(runs: pd.DataFrame, today: date | None = None, recorded: bool = False) -> Freshness:
    """The freshness of a runs.csv frame on `today` (default: the local date)."""
    today = today or date.today()
    last = None if runs.empty else pd.to_datetime(runs[RUN_DATE]).max().date()
    return Freshness(last, today, cadence(runs), recorded)


def is_recorded(data_dir: Path) -> bool:
    """Whether the directory holds the bundled demo's recorded history (its demo.toml), not a live monitor's."""
    return (Path(data_dir) / DEMO_CONFIG).exists()


def of_directory(data_dir: Path, runs: pd.DataFrame | None = None, today: date | None = None) -> Freshness:
    """The freshness of a data directory's runs.csv (`runs`: that frame when already read)."""
    runs = store.read_runs(Path(data_dir)) if runs is None else runs
    return freshness(runs, today, is_recorded(data_dir))

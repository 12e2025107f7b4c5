"""The Simulate page: where the sandbox lives, what it holds, and original against simulated series."""

from __future__ import annotations

import hashlib
import math
import tempfile
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from pipeline import contract, jsonl
from pipeline.alerts import plural
from pipeline.contract import PIPELINE, RUN_DATE, VALUE
from pipeline.sources import FEED_SUFFIXES

PACK_TYPES = FEED_SUFFIXES  # what the page's uploader accepts as a feed file to inject
# Where the sandbox lives is the dashboard's business: the page names no path (a path of the server's machine tells a
# reader nothing, and shows where its temporary folder is).
SANDBOX_NOTE = ("The scenario runs in a sandbox, a copy of the history outside the data directory: the change is "
                "applied on the start date and every later run date re-run. The production series are never written.")


def sandbox_dir(data_dir: Path) -> Path:
    """Where the dashboard keeps the simulation sandbox of a data directory: a folder of the system's temporary
    directory named after it (outside the data directory, as `simulate.prepare_sandbox` requires)."""
    resolved = Path(data_dir).resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / "driftwatch-sandboxes" / f"{resolved.name or 'data'}-{digest}"


@dataclass(frozen=True)
class SandboxInfo:
    path: Path
    description: str  # the scenario's own description, e.g. "simulation: injected 40 offtopic documents"
    start: date
    created: str


def sandbox_info(sandbox: Path, source: Path) -> SandboxInfo | None:
    """What the sandbox holds, when it holds a simulation of `source` (None otherwise)."""
    from pipeline.simulate import SANDBOX_FILE, Scenario

    path = Path(sandbox) / SANDBOX_FILE
    if not path.is_file() or not (Path(sandbox) / contract.RUNS).exists():
        return None
    try:
        meta = jsonl.loads_bounded(path.read_text(encoding="utf-8"), path)
        if Path(meta["source"]).resolve() != Path(source).resolve():
            return None
        raw = meta["scenario"]
        scenario = Scenario(**{**raw, "start": date.fromisoformat(raw["start"]),
                               "before": date.fromisoformat(raw["before"]) if raw.get("before") else None})
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return SandboxInfo(Path(sandbox), scenario.describe(), scenario.start, str(meta.get("created", "")))


def side_by_side(original: pd.DataFrame, simulated: pd.DataFrame | None, group: str) -> pd.DataFrame:
    """Two long series frames (run_date, <group>, value) joined per date and group, as `simulate.compare` joins
    the metric series of a source and its sandbox: run_date, <group>, value_original, value_simulated, change.
    Without a simulation the simulated values are NaN."""
    keys = [RUN_DATE, group]
    left = original[keys + [VALUE]]
    if simulated is None:
        both = left.rename(columns={VALUE: "value_original"}).assign(value_simulated=math.nan)
    else:
        both = left.merge(simulated[keys + [VALUE]], on=keys, suffixes=("_original", "_simulated"))
    both["change"] = both["value_simulated"] - both["value_original"]
    return both.sort_values(keys, kind="stable").reset_index(drop=True)


def delta_series(table: pd.DataFrame, start: date | None) -> pd.DataFrame:
    """Sandbox minus original per run date and pipeline from `start` on (rows of `side_by_side`): run_date,
    pipeline, value (the change), for a chart of what the scenario did."""
    rows = table[table["change"].notna()]
    if start is not None:
        rows = rows[rows[RUN_DATE] >= pd.Timestamp(start)]
    return rows[[RUN_DATE, PIPELINE, "change"]].rename(columns={"change": VALUE}).reset_index(drop=True)


def save_upload(name: str, data: bytes, folder: Path) -> Path:
    """An uploaded feed file written into `folder` under its own base name (which names it in the scenario's
    description and in any error about it), for `simulate` to read as the inject scenario's pack."""
    path = Path(folder) / (Path(name).name or "pack.xml")
    path.write_bytes(data)
    return path


def caught_lines(compared: pd.DataFrame) -> list[str]:
    """`simulate.compare_conditions`'s rows for reading, one line each: its answer, then which condition it is."""
    return [f"{r.answer}: {r.rule} on {_where(r.pipeline, r.series)}, {r.severity}, "
            f"{plural(r.runs, 'run')} fired in the sandbox" for r in compared.itertuples()]


def _where(pipeline: str, series: str) -> str:
    """"bm25 (mrr@5, ndcg@5)", "the corpus" for a corpus-wide condition (its one series is the corpus itself)."""
    if not pipeline:
        return "the corpus" if series in ("", contract.CORPUS_METRIC) else f"the corpus ({series})"
    return f"{pipeline} ({series})"

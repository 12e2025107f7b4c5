"""The Drift page: the verdict table of drift.csv, the statistics against their nulls, the corpus composition,
the window's novel content and the projection of the current window against the reference."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import shifts, store
from pipeline.alerts import DriftConfirmation, confirm_drift, drift_windows
from pipeline.config import Config, DriftConfig
from pipeline.contract import (CONTEXT, DRIFT, DRIFTED, EFFECT_FROM, NOT_ENOUGH_DATA, QUERY_PREFIX, REFERENCE_DATE,
                               RUN_DATE, STATISTIC, THRESHOLD, TOP1_COSINE, VALUE, VERDICT)
from pipeline.corpus import CORPUS_FILE, Corpus, text_hash
from pipeline.drift import threshold_phrase, value_line
from pipeline.views import _day


UNCATEGORISED = "(none)"


def drift_series(drift: pd.DataFrame, statistics: Sequence[str]) -> pd.DataFrame:
    """drift.csv rows of the given statistics: run_date, statistic, value (long; statistics in the order given)."""
    order = {s: i for i, s in enumerate(statistics)}
    rows = drift[drift[STATISTIC].isin(list(statistics))]
    rows = rows.assign(_order=rows[STATISTIC].map(order)).sort_values(["_order", RUN_DATE], kind="stable")
    return rows[[RUN_DATE, STATISTIC, VALUE]].reset_index(drop=True)


# The verdict first, so that a phone shows it without scrolling sideways; the threshold is on the value's own scale.
VERDICT_COLUMNS = ("verdict", "statistic", "value", "threshold", "p (Holm)", "threshold is", "null 95%", "what is new")


def drift_verdicts(drift_rows: pd.DataFrame, day: date | None = None) -> pd.DataFrame:
    """The Drift page's verdict table for one run (the latest when `day` is None): per statistic of the family,
    its verdict, its value, its threshold on the value's own scale (`pipeline.drift.value_line`: the null's mean, or for
    duplicates the reference's share, plus the effect-size line) and how it is made, the Holm-adjusted p-value,
    the null's 95% quantile at that run's sample sizes and, when drifted, what is new. Drifted = the value at or
    above its threshold and p below alpha. Context statistics are left out."""
    if drift_rows.empty:
        return pd.DataFrame(columns=list(VERDICT_COLUMNS))
    when = pd.Timestamp(day) if day is not None else drift_rows[RUN_DATE].max()
    rows = drift_rows[(drift_rows[RUN_DATE] == when) & (drift_rows[VERDICT].fillna("") != CONTEXT)]
    rows = rows[~rows[STATISTIC].astype(str).str.startswith(QUERY_PREFIX)]
    base, line = rows[EFFECT_FROM].astype(float), rows[THRESHOLD].astype(float)
    return pd.DataFrame({
        "verdict": rows[VERDICT].str.replace("_", " "), "statistic": rows[STATISTIC], "value": rows[VALUE],
        "threshold": [value_line(b, x) for b, x in zip(base, line)], "p (Holm)": rows["p_value"],
        "threshold is": [threshold_phrase(s, b, x) for s, b, x in zip(rows[STATISTIC], base, line)],
        "null 95%": rows["null_value"], "what is new": rows["detail"].fillna(""),
    }, columns=list(VERDICT_COLUMNS)).reset_index(drop=True)


def drift_window(drift: pd.DataFrame, day: date | None = None) -> dict[str, object]:
    """What one run's drift rows compared: current window start, reference window, sample sizes."""
    if drift.empty:
        return {}
    when = pd.Timestamp(day) if day is not None else drift[RUN_DATE].max()
    rows = drift[drift[RUN_DATE] == when]
    if rows.empty:
        return {}
    first = rows.iloc[0]
    return {"run_date": when.date(), "current_start": first["current_start"], "reference_start": first["reference_start"],
            "reference_end": first[REFERENCE_DATE], "n_current": first["n_current"], "n_reference": first["n_reference"]}


def drift_against_null(drift: pd.DataFrame, statistic: str) -> pd.DataFrame:
    """One statistic and its null's 95% quantile over time (long: run_date, statistic, value)."""
    rows = drift[drift[STATISTIC] == statistic].sort_values(RUN_DATE, kind="stable")
    value = rows[[RUN_DATE, VALUE]].assign(**{STATISTIC: statistic})
    null = rows[[RUN_DATE, "null_value"]].rename(columns={"null_value": VALUE}).assign(
        **{STATISTIC: f"{statistic}, no-drift 95%"})
    return pd.concat([value, null], ignore_index=True)[[RUN_DATE, STATISTIC, VALUE]]


def top1_statistics(drift: pd.DataFrame) -> dict[str, str]:
    """The question-top1 cosine statistics present (top1_cosine_<pipeline>), each with its pipeline."""
    prefix = f"{TOP1_COSINE}_"
    return {s: s.removeprefix(prefix) for s in sorted(drift[STATISTIC].unique()) if str(s).startswith(prefix)}


def reference_date(drift: pd.DataFrame, data_dir: Path | None = None) -> date | None:
    """The reference snapshot of the latest drift rows (reference.json's date when drift.csv has none)."""
    rows = drift[drift[REFERENCE_DATE].fillna("").astype(str) != ""]
    if len(rows):
        return date.fromisoformat(rows.sort_values(RUN_DATE, kind="stable")[REFERENCE_DATE].iloc[-1])
    return store.read_reference(data_dir) if data_dir is not None else None


def corpus_documents(data_dir: Path) -> pd.DataFrame:
    """Every document the corpus ever held: doc_id, first_seen, deleted_at (NaT while present), source and
    category (its first; "(none)" without one), from its latest version. Empty without a corpus."""
    columns = ["doc_id", "first_seen", "deleted_at", "source", "category"]
    rows: list = []
    if (Path(data_dir) / CORPUS_FILE).exists():
        with Corpus.in_dir(data_dir, readonly=True) as corpus:
            rows = corpus.lifetimes()
    frame = pd.DataFrame(rows, columns=columns)
    frame["first_seen"] = pd.to_datetime(frame["first_seen"], format="%Y-%m-%d")
    frame["deleted_at"] = pd.to_datetime(frame["deleted_at"], format="%Y-%m-%d")
    frame["category"] = frame["category"].replace("", UNCATEGORISED)
    return frame


def composition(documents: pd.DataFrame, dates: Iterable[date | pd.Timestamp], by: str) -> pd.DataFrame:
    """Documents present on each date per value of `by` ("source" or "category"): run_date, <by>, documents.
    A document is present from its first_seen date until the day before its deleted_at."""
    days = pd.DatetimeIndex(sorted({_day(d) for d in dates}))
    if documents.empty or days.empty:
        return pd.DataFrame({RUN_DATE: pd.Series(dtype="datetime64[ns]"), by: pd.Series(dtype=object),
                             "documents": pd.Series(dtype="int64")})
    added = documents.groupby(["first_seen", by]).size().unstack(fill_value=0)
    gone = documents.dropna(subset=["deleted_at"]).groupby(["deleted_at", by]).size().unstack(fill_value=0)
    change = added.sub(gone, fill_value=0) if len(gone) else added
    level = change.sort_index().cumsum()
    level = level.reindex(level.index.union(days)).ffill().fillna(0).loc[days]
    level.index.name, level.columns.name = RUN_DATE, by
    out = level.stack().rename("documents").astype("int64").reset_index()
    return out.sort_values([by, RUN_DATE], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class Window:
    """A span of run dates, both ends included: the documents first seen in it are the window's new content."""

    start: date
    end: date

    def label(self) -> str:
        return f"{self.start:%Y-%m-%d}" if self.start == self.end else f"{self.start:%Y-%m-%d} to {self.end:%Y-%m-%d}"


def windows(drift: pd.DataFrame, day: date | None = None) -> tuple[Window, Window] | None:
    """The reference and current windows one run's drift rows compared (the latest run when `day` is None)."""
    found = drift_window(drift, day)
    try:
        dates = [date.fromisoformat(str(found[key])[:10]) for key in ("reference_start", "reference_end",
                                                                         "current_start")]
    except (KeyError, ValueError):
        return None
    return Window(dates[0], dates[1]), Window(dates[2], found["run_date"])


DRIFTED_CONFIRMED = "drifted"  # the conclusion's tones
DRIFTED_NOT_CONFIRMED = "drifted, not confirmed"
STABLE_TONE = "stable"
NOT_ENOUGH_TONE = "not enough data"


def confirmation(drift: pd.DataFrame, day: date | pd.Timestamp, config: DriftConfig) -> DriftConfirmation:
    """Whether the corpus drift of the run `day` pages, by the drift rule's own test (`alerts.confirm_drift`)."""
    return confirm_drift(drift_windows(drift), pd.Timestamp(day), config)


def named_shift(drift: pd.DataFrame, day: date | pd.Timestamp, confirmed: DriftConfirmation) -> str:
    """What came in with the run's drifted window and the topic growing over the windows that confirm it, as the
    drift alert's message says it (`shifts.named_shift`)."""
    return shifts.named_shift(drift, pd.Timestamp(day), [w.run_date for w in confirmed.confirming])


def conclusion(verdicts: pd.DataFrame, confirmed: DriftConfirmation, config: DriftConfig,
               named: str = "") -> tuple[str, str]:
    """The verdict table in a sentence, and its tone: "drifted" (confirmed: the drift rule pages), "drifted, not
    confirmed" (the rule's warning), "stable" or "not enough data". `confirmed`: `confirmation` of the run;
    `named`: what came in (`named_shift`)."""
    if verdicts.empty:
        return NOT_ENOUGH_TONE, "No drift statistics for this run yet."
    drifted = verdicts[verdicts["verdict"] == DRIFTED]
    if len(drifted):
        names = ", ".join(drifted["statistic"])
        new = next((d for d in drifted["what is new"] if d), "")  # the details repeat one another: the first
        new = new if len(new) <= 300 else new[:299] + "…"
        sentence = (f"Drifted: {names} passed both the null and the effect line" + (f"; {named}" if named else "")
                    + (f". New: {new}" if new else ""))
        tone = DRIFTED_CONFIRMED if confirmed.confirmed else DRIFTED_NOT_CONFIRMED
        return tone, f"{sentence}. {confirmed.describe(config)}."
    if (verdicts["verdict"] == NOT_ENOUGH_DATA.replace("_", " ")).all():
        return NOT_ENOUGH_TONE, "Not enough new chunks in the window to test against the reference."
    return STABLE_TONE, ("Stable: no statistic is both significant after Holm's correction and past its effect line "
                         "(the window's new content is like the reference's).")


def in_window(documents: pd.DataFrame, window: Window) -> pd.DataFrame:
    """The documents first seen within the window."""
    seen = documents["first_seen"]
    return documents[(seen >= pd.Timestamp(window.start)) & (seen <= pd.Timestamp(window.end))]


def window_composition(documents: pd.DataFrame, reference: Window, current: Window, by: str) -> pd.DataFrame:
    """New documents per value of `by` (source or category) in the reference and the current window, with
    their shares: <by>, reference, current, reference_share, current_share, change (of the share); largest
    change first."""
    counts = pd.concat([in_window(documents, reference)[by].value_counts().rename("reference"),
                        in_window(documents, current)[by].value_counts().rename("current")], axis=1).fillna(0)
    counts = counts.astype("int64")
    out = counts.assign(reference_share=counts["reference"] / max(1, counts["reference"].sum()),
                        current_share=counts["current"] / max(1, counts["current"].sum()))
    out["change"] = out["current_share"] - out["reference_share"]
    out = out.rename_axis(by).reset_index()
    return out.sort_values(["change", by], ascending=[False, True], kind="stable").reset_index(drop=True)


def novel_documents(documents: pd.DataFrame, reference: Window, current: Window) -> pd.DataFrame:
    """The documents new in the current window, those from a source or category the reference window lacks
    first: doc_id, first_seen, source, category, new_source, new_category."""
    before = in_window(documents, reference)
    rows = in_window(documents, current)
    rows = rows.assign(new_source=~rows["source"].isin(set(before["source"])),
                       new_category=~rows["category"].isin(set(before["category"])))
    rows = rows.assign(_novel=rows["new_source"].astype(int) + rows["new_category"].astype(int))
    rows = rows.sort_values(["_novel", "source", "category", "first_seen", "doc_id"],
                            ascending=[False, True, True, True, True], kind="stable")
    return rows[["doc_id", "first_seen", "source", "category", "new_source", "new_category"]].reset_index(drop=True)


@dataclass(frozen=True)
class Projection:
    """Reference and current chunk embeddings on the reference's first two principal components."""

    points: pd.DataFrame  # side ("reference" / "current"), x, y, chunk_id, doc_id
    reference_date: date
    current_date: date
    explained: tuple[float, float]  # share of the reference's variance along each axis
    n_missing: int  # sampled chunks without a cached embedding, left out


def embedding_projection(data_dir: Path, config: Config, reference: Window, current: Window,
                         cap: int | None = None) -> Projection:
    """The chunks the drift statistics compared: each window's entered documents (the reference less the drifted
    windows it leaves out, `windows.left_out`), chunked as the job chunks them and sampled by the same seeded
    draw of whole documents (`drift.kept_rows`, at most `cap` chunks, `drift.sample_cap` by default), with the
    vectors the job cached under the configured embedder, on the reference's first two principal components.
    Read-only: a chunk without a cached vector is left out and counted rather than embedded (embed_cached would
    load the model and write the cache)."""
    from datetime import timedelta

    from pipeline import drift, windows
    from pipeline.chunking import chunk_documents
    from pipeline.drift import project
    from pipeline.embeddings import Embedder

    key = Embedder(config.embedder).key
    d = config.drift
    left_out = windows.left_out(store.read(data_dir, DRIFT), current.end)
    sides: dict[str, tuple[np.ndarray, list]] = {}
    missing = 0
    with Corpus.in_dir(data_dir, readonly=True) as corpus:
        for side, window, seed in (("reference", reference, d.seed), ("current", current, drift.current_seed(d))):
            versions = corpus.entered_versions(window.start - timedelta(days=1), window.end)
            if side == "reference":
                versions = windows.without(versions, left_out)
            chunked: dict = {}
            chunk_documents(config, corpus.read_versions(versions), chunked)
            per_version = [chunked.get((doc_id, h), []) for doc_id, h, _ in versions]
            chunks = [c for some in per_version for c in some]
            keep = drift.kept_rows([len(some) for some in per_version], cap or d.sample_cap, seed,
                                   d.max_chunks_per_document)
            chosen = [chunks[i] for i in keep]
            hashes = [text_hash(c.text) for c in chosen]
            found = corpus.cached_embeddings(key, hashes)
            present = [(c, found[h]) for c, h in zip(chosen, hashes) if h in found]
            missing += len(chosen) - len(present)
            vectors = np.stack([v for _, v in present]) if present else np.zeros((0, 0), dtype=np.float32)
            sides[side] = (vectors, [c for c, _ in present])
    (ref, ref_chunks), (cur, cur_chunks) = sides["reference"], sides["current"]
    empty = pd.DataFrame({"side": pd.Series(dtype=object), "x": pd.Series(dtype=float), "y": pd.Series(dtype=float),
                          "chunk_id": pd.Series(dtype=object), "doc_id": pd.Series(dtype=object)})
    if len(ref) < 3 or len(cur) < 1 or ref.shape[1] != cur.shape[1]:
        return Projection(empty, reference.end, current.end, (math.nan, math.nan), missing)
    ref_xy, cur_xy = project(ref, cur, 2)
    total = float(np.var(ref.astype(np.float64), axis=0).sum())
    explained = tuple(float(v) / total if total else math.nan for v in np.var(ref_xy, axis=0))
    explained = (explained + (math.nan, math.nan))[:2]
    parts = []
    for side, xy, chunks in (("reference", ref_xy, ref_chunks), ("current", cur_xy, cur_chunks)):
        y = xy[:, 1] if xy.shape[1] > 1 else np.zeros(len(xy))
        parts.append(pd.DataFrame({"side": side, "x": xy[:, 0], "y": y, "chunk_id": [c.id for c in chunks],
                                   "doc_id": [c.doc_id for c in chunks]}))
    return Projection(pd.concat(parts, ignore_index=True), reference.end, current.end, explained, missing)




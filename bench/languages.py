"""The language_share statistic's false alarms: on seeded null windows whose documents are misread at a given rate,
and on the real ordered streams (../shared/data/news-2025-autumn, ../shared/data/peps-stream: each day's documents
against the 14 days before, as the job's windows, the window grown back a day at a time to hold 10 documents), with
the tests' foreign-language pack mixed into each real news day for the detection rate. Alone, without the family's
Holm correction (which only makes it stricter). Run: python -m bench.languages [--news DIR] [--peps DIR]."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from pipeline import contract, drift, shifts
from pipeline.config import DriftConfig
from pipeline.sources import dated_files, read_feed

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
FOREIGN = ROOT / "tests" / "data" / "news-slice" / "offtopic_foreign.xml"
PER_DAYS = 90
MIN_CURRENT_DOCUMENTS = 10  # the current window grows back a day at a time until it holds this many documents


def verdict(languages: list[str], n_ref: int, config: DriftConfig, seed: int) -> drift.Verdict:
    """language_share alone (decided at alpha with its effect line), drawn again at page_permutations when drifted."""
    n = len(languages)
    for draws in (config.permutations, config.page_permutations):
        split = drift._labels(np.arange(n), n_ref, draws, np.random.default_rng(seed))
        found = drift.language_shares(languages, split, config.language_min_documents)
        [decided] = drift.decide([found], config.alpha, drift.effect_thresholds(config))
        if decided.verdict != contract.DRIFTED:
            return decided
    return decided


def null_table(config: DriftConfig, sims: int) -> None:
    print(f"\n## Seeded null windows ({sims} each): documents read as English, else German, French or Spanish")
    print("| reference docs | current docs | misread rate | p < alpha | drifted | drifted per 90 windows |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n_ref, n_cur, misread in ((60, 25, 0.02), (60, 25, 0.1), (200, 13, 0.05), (40, 3, 0.05), (400, 40, 0.2)):
        rng = np.random.default_rng(n_ref * 1000 + n_cur)
        low = drifted = 0
        for i in range(sims):
            languages = rng.choice(["en", "de", "fr", "es"], n_ref + n_cur,
                                   p=[1 - misread, misread / 2, misread / 4, misread / 4]).tolist()
            v = verdict(languages, n_ref, config, i)
            low += v.p_value < config.alpha
            drifted += v.verdict == contract.DRIFTED
        print(f"| {n_ref} | {n_cur} | {misread:g} | {low / sims:.3f} | {drifted / sims:.4f} | "
              f"{drifted / sims * PER_DAYS:.2f} |")


def read_days(folder: Path) -> dict[date, list[str]]:
    """Each day's documents' languages (title and text, as the job reads them)."""
    out: dict[date, list[str]] = {}
    for day, path in dated_files(folder, date.max):
        docs = read_feed(path.read_bytes(), source=folder.name, location=str(path)).documents
        out.setdefault(day, []).extend(shifts.language(shifts.document_text(d.title, d.text)) for d in docs)
    return out


def windows(days: dict[date, list[str]], config: DriftConfig):
    """(day, reference languages, current languages) of each day with a reference, as the job's windows."""
    ordered = sorted(days)
    for i, day in enumerate(ordered):
        start = day
        while sum(len(days.get(start + timedelta(days=j), [])) for j in range((day - start).days + 1)) < \
                MIN_CURRENT_DOCUMENTS and (day - start).days < config.max_window_days - 1:
            start -= timedelta(days=1)
        current = [x for j in range((day - start).days + 1) for x in days.get(start + timedelta(days=j), [])]
        reference = [x for j in range(1, config.reference_days + 1) for x in days.get(start - timedelta(days=j), [])]
        if len(reference) >= MIN_CURRENT_DOCUMENTS and current:
            yield day, reference, current


def stream_table(streams: dict[str, dict[date, list[str]]], config: DriftConfig, foreign: list[str]) -> None:
    print("\n## Real ordered streams: each day's window against the 14 days before it")
    print("| stream | documents | read as not English | windows | p < alpha | drifted | drifted per 90 days | "
          "drifted days |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, days in streams.items():
        every = [x for v in days.values() for x in v]
        other = Counter(x for x in every if x != "en")
        found = [(day, verdict([*ref, *cur], len(ref), config, 0)) for day, ref, cur in windows(days, config)]
        low = sum(v.p_value < config.alpha for _, v in found)
        drifted = [f"{day} ({v.detail})" for day, v in found if v.verdict == contract.DRIFTED]
        print(f"| {name} | {len(every)} | {sum(other.values())} ({dict(other.most_common(4))}) | {len(found)} | "
              f"{low} | {len(drifted)} | {len(drifted) * PER_DAYS / len(found):.2f} | {'; '.join(drifted) or '-'} |")
    news = streams["news"]
    hits = [verdict([*ref, *cur, *foreign], len(ref), config, 0).verdict == contract.DRIFTED
            for _, ref, cur in windows(news, config)]
    print(f"\nThe {len(foreign)} items of tests/data/news-slice/offtopic_foreign.xml ({dict(Counter(foreign))}) mixed "
          f"into each real news day's window: drifted on {sum(hits)} of {len(hits)} windows.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.languages", description=__doc__.splitlines()[0])
    parser.add_argument("--news", type=Path, default=SHARED / "news-2025-autumn")
    parser.add_argument("--peps", type=Path, default=SHARED / "peps-stream")
    parser.add_argument("--sims", type=int, default=1000)
    args = parser.parse_args(argv)
    config = DriftConfig()
    print(f"settings: {config.language_effect=}, {config.language_min_documents=}, {config.alpha=}, "
          f"{config.permutations=}, {config.page_permutations=}")
    null_table(config, args.sims)
    foreign = [shifts.language(shifts.document_text(d.title, d.text))
               for d in read_feed(FOREIGN.read_bytes(), source="foreign", location=str(FOREIGN)).documents]
    stream_table({"news": read_days(args.news / "daily"), "peps": read_days(args.peps / "daily")}, config, foreign)
    return 0


if __name__ == "__main__":
    sys.exit(main())

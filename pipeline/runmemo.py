"""The no-op day: a run whose inputs did not change (the corpus on the run date, the settings, the questions,
each drift window's documents and near-copy pools) reads the builtin pipelines' rankings and the corpus drift
from the memo (pipeline/memo.py) instead of computing them."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date

from pipeline import memo
from pipeline.config import Config
from pipeline.corpus import Corpus, IngestCounts
from pipeline.gold import GoldQuestion
from pipeline.retrieval import Ranking
from pipeline.windows import Windows, WindowVerdicts, _chunk_counts, _window_versions, without

log = logging.getLogger(__name__)


def _retrieval_key(config: Config, gold: Sequence[GoldQuestion], corpus_digest: str) -> str:
    return memo.key(kind="retrieval", config=config.config_hash(), corpus=corpus_digest,
                    questions=[q.question for q in gold])


def _pool_digest(keys: Sequence[tuple[str, str, str]], seen_by: date) -> str:
    """The corpus the near copies of a window are looked for in (the run's documents first seen by the window's
    end), as the digest of what the run's corpus holds beyond it: the documents first seen later."""
    day = seen_by.isoformat()
    return memo.digest((doc_id, h) for doc_id, h, first_seen in keys if first_seen > day)


def _drift_key(config: Config, corpus_digest: str, digests: Mapping[str, str], left_out: Sequence) -> str:
    """The inputs of `window_verdicts`: the run's corpus, each window's documents and each side's near-copy
    pool (`digests`: reference, current, reference_pool, current_pool), the drifted windows the reference leaves
    out, under the same settings."""
    return memo.key(kind="drift", config=config.config_hash(), corpus=corpus_digest, **digests,
                    left_out=[[f"{a:%Y-%m-%d}", f"{b:%Y-%m-%d}"] for a, b in left_out])


def _memo_windows(config: Config, corpus: Corpus, run_date: date) -> Windows | None:
    """The windows of `window_verdicts` by SQL and the chunk cache's counts, none of the documents read. None
    when a document of the current window is not in the chunk cache (the full run splits it)."""
    def count(versions: list[tuple[str, str, str]]) -> int | None:
        counts = _chunk_counts(config, corpus, versions, {}, read=False)
        return None if counts is None else sum(counts)

    return _window_versions(config, corpus, run_date, count)


@dataclass(frozen=True)
class Memoized:
    """What a run reads from the memo instead of computing: the builtin pipelines' rankings and more."""

    rankings: dict[str, list[Ranking]]
    top1: list[tuple[str, float]]
    hnsw: list[dict]  # signals.csv rows of the HNSW recall, run_date blank
    chunks_total: int
    present: set[str]
    drift: WindowVerdicts


def _rankings_memo(rankings: Mapping[str, Sequence[Ranking]]) -> dict:
    return {p: [[list(r.doc_ids), list(r.scores), list(r.chunk_ids)] for r in ranked] for p, ranked in rankings.items()}


def _rankings_from_memo(value: dict) -> dict[str, list[Ranking]]:
    return {p: [Ranking(tuple(d), tuple(s), tuple(c)) for d, s, c in ranked] for p, ranked in value.items()}


def memoized(config: Config, corpus: Corpus, run_date: date, gold: Sequence[GoldQuestion],
              counts: IngestCounts) -> Memoized | None:
    """The memo's results when every input of the run's retrieval and corpus drift is what they were computed
    from, else None (the run computes them).

    `counts`: the run date's; a corpus that changed on the run date cannot be the one of a memo computed for an
    earlier date, which saves reading its keys to find out. At the memo's generation (nothing written to the
    documents since), a snapshot, window or near-copy pool whose dates moved over no document's date is the
    memo's: its digest is taken, not computed from the corpus's keys (which cost 0.5 s at 100,000 documents)."""
    if not memo.enabled():
        return None
    kept, drifted = memo.load(config.data_dir, "retrieval"), memo.load(config.data_dir, "drift")
    if kept is None or drifted is None:
        return None
    found, stored = kept[1], drifted[1]
    if found.get("run_date", "") < run_date.isoformat() and counts.new + counts.updated + counts.deleted:
        return None
    try:
        unchanged = found.get("generation") == stored.get("generation") == corpus.generation()
        same_corpus = unchanged and not corpus.dated_between(found["run_date"], run_date)
        keys: list[tuple[str, str, str]] | None = None
        if same_corpus:
            corpus_digest = found["corpus"]
            present = corpus.present((d for q in gold for d in q.relevant_ids), run_date)
        else:
            keys = corpus.snapshot_keys(run_date)
            corpus_digest = memo.digest(k[:2] for k in keys)
            present = {k[0] for k in keys}
        if kept[0] != _retrieval_key(config, gold, corpus_digest):
            return None
        windows = _memo_windows(config, corpus, run_date)
        if windows is None:
            return None
        reference, current = windows.reference, windows.current
        current_keys = [(doc_id, h) for doc_id, h, _ in windows.versions]
        old = stored["windows"]  # [start, end] of each window and the near-copy pools' dates, as computed
        reference_same = (unchanged and not corpus.dated_between(old["reference"][0], reference.start)
                          and not corpus.dated_between(old["reference"][1], reference.end))
        digests = {"current": memo.digest(current_keys),
                   "reference": (stored["digests"]["reference"] if reference_same else
                                 memo.digest((doc_id, h) for doc_id, h, _ in without(
                                     corpus.entered_versions(reference.start, reference.end), windows.left_out)))}
        for name, seen_by in (("reference_pool", reference.end), ("current_pool", current.end)):
            if same_corpus and not corpus.dated_between(old[name], seen_by, first_seen_only=True):
                digests[name] = stored["digests"][name]
            else:
                keys = keys if keys is not None else corpus.snapshot_keys(run_date)
                digests[name] = _pool_digest(keys, seen_by)
        if drifted[0] != _drift_key(config, corpus_digest, digests, windows.left_out):
            return None
        return Memoized(_rankings_from_memo(found["rankings"]), [(n, float(v)) for n, v in found["top1"]],
                        list(found["hnsw"]), int(found["chunks_total"]), present,
                        WindowVerdicts.from_memo(stored, windows))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning("%s: a damaged memo (%s): computing anew", config.data_dir / memo.MEMO_DIR, exc)
        return None


def keep(config: Config, corpus: Corpus, run_date: date, gold: Sequence[GoldQuestion],
               keys: Sequence[tuple[str, str, str]], rankings: Mapping[str, Sequence[Ranking]],
               top1: list[tuple[str, float]], hnsw: list[dict], chunks_total: int, found: WindowVerdicts) -> None:
    if not memo.enabled():
        return
    generation = corpus.generation()
    corpus_digest = memo.digest(k[:2] for k in keys)
    memo.save(config.data_dir, "retrieval", _retrieval_key(config, gold, corpus_digest),
              {"run_date": run_date.isoformat(), "generation": generation, "corpus": corpus_digest,
               "rankings": _rankings_memo(rankings), "top1": [[n, v] for n, v in top1],
               "hnsw": [{**r, "run_date": ""} for r in hnsw], "chunks_total": chunks_total})
    digests = {"reference": memo.digest(found.reference_keys), "current": memo.digest(found.current_keys),
               "reference_pool": _pool_digest(keys, found.reference.end),
               "current_pool": _pool_digest(keys, found.current.end)}
    windows = {"reference": [found.reference.start.isoformat(), found.reference.end.isoformat()],
               "reference_pool": found.reference.end.isoformat(), "current_pool": found.current.end.isoformat()}
    memo.save(config.data_dir, "drift", _drift_key(config, corpus_digest, digests, found.left_out),
              {**found.memo(), "generation": generation, "digests": digests, "windows": windows})

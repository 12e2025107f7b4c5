"""`driftwatch check`: validate a config, reach every source (and target) once, load the gold set and report which
of its document ids the sources carry, without writing anything: no series, the data directory untouched."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

from pipeline import answers, folder_source, freshness, store
from pipeline.config import Config, require_sources
from pipeline.corpus import CORPUS_FILE
from pipeline.corpus import check_file as check_corpus
from pipeline.errors import DriftwatchError
from pipeline.freshness import Freshness
from pipeline.gold import GoldQuestion, load_gold
from pipeline.redact import redact
from pipeline.sources import Caps, collect

# Every dated file of a folder and every entry of a file, whatever its date: check looks at all a source holds.
EVERYTHING = date.max - timedelta(days=1)
MAX_LISTED = 10  # missing gold ids listed by name; the rest are counted


@dataclass(frozen=True)
class Probe:
    """One source, target or model reached once: whether it answered, and what it carried."""

    kind: str  # "url", "file", "folder", "documents", "model", or a target's kind
    name: str
    location: str
    ok: bool
    detail: str  # what was found, or why it failed
    doc_ids: frozenset[str] = frozenset()  # document ids it returned (gold coverage)


@dataclass(frozen=True)
class GoldCoverage:
    questions: int
    found: frozenset[str]
    missing: dict[str, tuple[str, ...]]  # question id -> its relevant ids that nothing returned

    @property
    def n_missing(self) -> int:
        """Distinct document ids missing (one may be relevant to several questions)."""
        return len({d for ids in self.missing.values() for d in ids})


@dataclass(frozen=True)
class CheckReport:
    config: Config
    probes: tuple[Probe, ...]
    gold: GoldCoverage
    notes: tuple[str, ...] = field(default=())
    freshness: Freshness | None = None  # the data directory's history (None before its first run)

    @property
    def problems(self) -> list[str]:
        failed = [f"{p.kind} {p.name}: {p.detail}" for p in self.probes if not p.ok]
        if self.freshness is not None and self.freshness.stale:
            failed.append(f"history: {self.freshness.line}")
        if self.gold.n_missing:
            failed.append(f"{self.gold.n_missing} gold document id(s) found in no source")
        return failed

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_inputs(config: Config) -> list[GoldQuestion]:
    """What a run would refuse as bad input (exit 2), checked read-only: sources configured, the gold set, the
    store's files, the corpus file, the query log and the answer layer's logged answers and labels. Returns the
    gold set."""
    require_sources(config)
    gold = load_gold(config.gold)
    answers.check_inputs(config, gold)
    store.validate(config.data_dir)
    check_corpus(config.data_dir / CORPUS_FILE)
    if config.drift.query_log is not None:
        from pipeline.drift import read_query_log

        read_query_log(config.drift.query_log, date.today(), config.drift.query_window_days)
    return gold


def probe_sources(config: Config) -> list[Probe]:
    """Fetch or read every source once, with the fetch deadline and no stored validators (a full GET)."""
    probes = []
    for source in config.sources:
        if source.documents is not None:
            kind, location = "documents", str(source.documents)
            outcomes = folder_source.scan(source.name, source.documents, EVERYTHING, {}, Caps.of(config.fetch),
                                          source.include).outcomes
        else:
            if source.url is not None:
                kind, location = "url", source.url
            else:
                kind, location = ("folder" if source.path.is_dir() else "file"), str(source.path)
            outcomes = collect(source.name, url=source.url, path=source.path, run_date=EVERYTHING, http_cache={},
                               timeout=config.fetch.timeout, max_bytes=config.fetch.max_bytes,
                               user_agent=config.fetch.user_agent, caps=Caps.of(config.fetch))
        errors = [o.error for o in outcomes if not o.ok]
        ids = frozenset(d.id for o in outcomes for d in o.documents)
        files = f" in {len(outcomes)} files" if kind == "folder" else ""
        detail = "; ".join(errors[:3]) + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else "") if errors \
            else f"{sum(len(o.documents) for o in outcomes)} documents{files}"
        probes.append(Probe(kind, source.name, location, not errors, detail, ids))
    return probes


def probe_models(config: Config) -> list[Probe]:
    """The embedder (and the reranker when a pipeline uses it) located, not loaded: a local folder, the model
    cache or the hub asked once with a deadline."""
    from pipeline.embeddings import locate_model
    from pipeline.retrieval import RERANKER

    wanted = [("embedder", config.embedder.model, "embedding model")]
    if "hybrid_rerank" in config.retrieval.pipelines:
        wanted.append(("reranker", config.rerank.model, RERANKER))
    probes = []
    for name, model, what in wanted:
        try:
            found = locate_model(model, what)
        except DriftwatchError as exc:
            probes.append(Probe("model", name, model, False, str(exc)))
            continue
        where = f"local: {found.location}" if found.local else "on the hub (downloaded on first use)"
        probes.append(Probe("model", name, model, True, where))
    return probes


def probe_targets(config: Config, gold: Sequence[GoldQuestion]) -> list[Probe]:
    """Every configured external target asked the gold questions once (`targets.probe`); a builtin target is
    the sources' corpus and adds no line of its own."""
    from pipeline import targets

    return [Probe(p.kind, p.name, _target_location(config, p.name), p.ok, p.message, frozenset(p.gold_found))
            for p in targets.probe(config, gold) if p.kind != "builtin"]


def _target_location(config: Config, name: str) -> str:
    t = next(t for t in config.targets if t.name == name)
    return str(t.url or t.function or t.path or "")


def coverage(gold: Sequence[GoldQuestion], probes: Iterable[Probe]) -> GoldCoverage:
    returned = frozenset().union(*(p.doc_ids for p in probes))
    relevant = {q.id: q.relevant_ids for q in gold}
    missing = {qid: tuple(d for d in ids if d not in returned) for qid, ids in relevant.items()}
    found = frozenset(d for ids in relevant.values() for d in ids if d in returned)
    return GoldCoverage(len(gold), found, {qid: ids for qid, ids in missing.items() if ids})


def check(config: Config, today: date | None = None) -> CheckReport:
    """Validate (DriftwatchError on bad input), then reach every source, model and target once, and say how old
    the data directory's history is on `today` (default: the local date): a stale one is a problem."""
    gold = validate_inputs(config)
    probes = [*probe_sources(config), *probe_models(config), *probe_targets(config, gold)]
    notes = []
    if not (config.data_dir / CORPUS_FILE).exists():
        notes.append(f"no corpus yet in {config.data_dir}: the first run creates it")
    fresh = freshness.of_directory(config.data_dir, today=today)
    return CheckReport(config, tuple(probes), coverage(gold, probes), tuple(notes),
                       None if fresh.last is None else fresh)


def table(report: CheckReport) -> str:
    """The report as text: the config, one row per source, model and target, and the gold coverage."""
    cfg = report.config
    lines = [f"config {Path(cfg.file).resolve()}: valid", f"  data_dir {cfg.data_dir}", f"  gold     {cfg.gold}"]
    if report.freshness is not None:
        lines.append(f"  history  {report.freshness.line}{' (STALE)' if report.freshness.stale else ''}")
    lines += [f"  note: {note}" for note in report.notes]
    width = max([len(p.name) for p in report.probes] + [6])
    kinds = max([len(p.kind) + 1 for p in report.probes] + [8])
    lines += ["", f"  {'status':<8}{'kind':<{kinds}}{'name':<{width + 2}}detail"]
    for p in report.probes:
        lines.append(f"  {'ok' if p.ok else 'FAILED':<8}{p.kind:<{kinds}}{p.name:<{width + 2}}{p.detail}")
        if not p.ok or p.kind in ("url", "file", "folder", "documents"):
            lines.append(f"  {'':<{8 + kinds}}{'':<{width + 2}}{p.location}")
    g = report.gold
    total = len(g.found) + g.n_missing
    lines += ["", f"gold set: {g.questions} questions, {len(g.found)} of {total} relevant document ids found"]
    shown = [(qid, d) for qid, ids in g.missing.items() for d in ids]
    for qid, doc_id in shown[:MAX_LISTED]:
        lines.append(f"  missing {doc_id!r} (question {qid})")
    if len(shown) > MAX_LISTED:
        lines.append(f"  ... and {len(shown) - MAX_LISTED} more missing")
    problems = report.problems
    lines += ["", "check passed: every source answered, every gold document id was found and the history is "
                  "not overdue" if not problems
              else f"check failed: {len(problems)} problem(s)"]
    return redact("\n".join(lines))  # sources' URLs and upstream replies: printed, so never in clear

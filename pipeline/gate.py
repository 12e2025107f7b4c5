"""The CI quality gate: evaluate a gold set over a fixed document set, compare with a baseline report."""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone
from pathlib import Path

from pipeline import answers, contract, jsonl, store
from pipeline.config import Config, ExportConfig, GenerationConfig, SourceConfig, TargetConfig, candidates, target_list
from pipeline.corpus import Corpus
from pipeline.demo import clear_history
from pipeline.errors import DriftwatchError
from pipeline.gold import load_gold
from pipeline.job import run_day
from pipeline.metrics import GATED, MEAN_NAMES, RETRIEVAL_METRICS
from pipeline.targets import run_file

# Every entry of the documents counts, whatever its date: a dated folder is read up to this date.
ALL_DATES = date(2200, 1, 1)  # within pandas timestamps (which end in 2262)
REPORT_VERSION = 2  # 2 added the fingerprint
MINIMUM_METRIC = "recall"  # what --min-recall-at-k bounds
# What a baseline must share with a report to be compared with it; the settings may differ (that is what is gated).
PROTOCOL = {"gold": "gold set", "documents": "document set"}
WORK_MARKER = "eval-work.json"  # marks a --work-dir as one the gate may clear


class GateError(DriftwatchError):
    """A gate that cannot be judged: an unreadable baseline, one made at another k, over another gold set or
    other documents."""


@dataclass(frozen=True)
class Verdict:
    """What was checked and passed (with the figures), why the gate failed, and what was not gated."""

    checked: tuple[str, ...]
    reasons: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.reasons


def _digest(lines: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _clear_work_dir(work_dir: Path) -> None:
    """A work directory keeps only its embedding cache from one evaluation to the next."""
    with store.run_lock(work_dir):
        clear_history(work_dir, WORK_MARKER, GateError)
        (work_dir / WORK_MARKER).write_text(json.dumps({"made_by": "python -m pipeline eval"}) + "\n",
                                            encoding="utf-8")


def gated_targets(config: Config, names: Sequence[str], docs: Sequence[Path], run_date: date) -> tuple[TargetConfig, ...]:
    """The targets named (each once), with a runs target's {date} filled in with `run_date`; GateError for a
    name the config lacks, or builtin targets without --docs."""
    known = {t.name: t for t in target_list(config)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise GateError(f"{config.file or 'the configuration'}: no target {unknown[0]!r} (targets: {', '.join(known)})")
    chosen = [known[n] for n in dict.fromkeys(names)]
    if not docs and any(t.kind == "builtin" for t in chosen):
        raise GateError("a builtin target is evaluated over --docs: give the feed files or folders")
    return tuple(replace(t, path=run_file(t, run_date)) if t.kind == "runs" else t for t in chosen)


def evaluate_documents(config: Config, gold: Path, docs: Sequence[Path], k: int, work_dir: Path | None = None,
                       targets: Sequence[str] | None = None, run_date: date | None = None,
                       generation: bool = False) -> dict:
    """Run every configured pipeline (or the `targets` named) over exactly `docs` (feed files or folders) and
    return the report dict. An external target answers from its own index: it needs no `docs`; a runs target
    reads the results logged for `run_date` (default today). A target that fails makes the gate unjudgeable.

    With `generation` the answer layer of [generation] runs too (its report under "answers"); without it the
    gate never calls a generator or a judge.

    With `work_dir` the embedding cache (and the judge's cache) stays there between evaluations; the previous
    evaluation's documents and series are cleared first. The report's fingerprint names the gold set (its bytes), the documents
    scored (ids and content hashes; for external targets only, their names) and the settings (config hash).
    """
    if targets:
        config = config.replace(targets=gated_targets(config, targets, docs, run_date or date.today()))
    if generation and config.generation.mode == "off":
        raise GateError(f"{config.file or 'the configuration'}: eval --generation needs a [generation] section "
                        "with mode = \"logged\" or \"generate\"")
    ks = tuple(sorted(set(config.retrieval.k) | {k}))
    with tempfile.TemporaryDirectory(prefix="driftwatch-eval-") as tmp:
        data_dir = Path(work_dir) if work_dir else Path(tmp)
        _clear_work_dir(data_dir)
        cfg = config.replace(
            data_dir=data_dir, gold=Path(gold),
            sources=tuple(SourceConfig(name=f"docs{i}", path=Path(d)) for i, d in enumerate(docs)),
            retrieval=replace(config.retrieval, k=ks,
                              candidate_depth=max(config.retrieval.candidate_depth, max(ks))),
            corpus=replace(config.corpus, max_age_days=None),  # every document counts, however old
            drift=replace(config.drift, evidently=False, query_log=None),
            alerts=replace(config.alerts, webhook_url=None, floors={}, drop={}, metrics=()),
            export=ExportConfig(),  # a gate's throwaway store is published nowhere
            generation=_gate_generation(config, Path(gold), run_date or date.today(), Path(tmp)) if generation
            else GenerationConfig(),
        )
        result = run_day(cfg, ALL_DATES, notify=False)
        with Corpus.in_dir(data_dir) as corpus:
            documents = _digest(f"{s.document.id}\t{s.content_hash}" for s in corpus.snapshot(ALL_DATES))
    if not docs:  # external targets only: the corpus holds what they returned, which is what is judged
        documents = _digest(f"target {t.name}" for t in config.targets)
    if result.run["feeds_failed"]:
        raise GateError(result.failed_feeds[0].error)
    shadow = candidates(config)
    failed = [o for o in result.failed_targets if o.name not in shadow]  # a candidate never fails the gate
    if failed:
        raise GateError(f"cannot gate: {failed[0].message}")
    return {
        "version": REPORT_VERSION, "k": k, "gold": str(gold), "docs": [str(d) for d in docs],
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "model": result.run["model"],
        "fingerprint": {"gold": hashlib.sha256(Path(gold).read_bytes()).hexdigest()[:16], "documents": documents,
                        "config": config.config_hash()},
        "docs_total": result.run["docs_total"], "chunks_total": result.run["chunks_total"],
        "pipelines": _pipelines(result, k),
        **({"candidates": shadow} if shadow else {}),  # evaluated and shown, never gated by default
        **({"answers": answers_report(result.answers, config.generation)} if result.answers is not None else {}),
    }


def _gate_generation(config: Config, gold: Path, day: date, tmp: Path) -> GenerationConfig:
    """[generation] for the gate's run, whose date is not a calendar date: logged answers are those of `day`
    (the --date, default today), copied undated into `tmp`."""
    g = config.generation
    if g.mode != "logged":
        return g
    records = answers.read_logged(g.logged, load_gold(gold), day)
    path = tmp / "logged-answers.jsonl"
    path.write_text("".join(json.dumps({"question_id": r.question_id, "answer": r.answer, "reference": r.reference,
                                        "contexts": [{"id": c.id, "text": c.text} for c in r.contexts]}) + "\n"
                            for r in records), encoding="utf-8")
    return replace(g, logged=path)


def answers_report(run: answers.AnswerRun, generation: GenerationConfig) -> dict:
    """The answer layer in a report: per pipeline, each source:metric's value, n and undetermined; and whether
    each judged metric's judge is trusted (its kappa against the labels of this evaluation), with why."""
    out: dict[str, dict] = {}
    for row in run.generation:
        entry = out.setdefault(row["pipeline"], {"means": {}, "n": {}, "undetermined": {}})
        name = f"{row['source']}:{row['metric']}"
        value = row["value"]
        entry["means"][name] = None if isinstance(value, float) and math.isnan(value) else value
        entry["n"][name], entry["undetermined"][name] = row["n"], row["undetermined"]
    import pandas as pd

    frame = pd.DataFrame(run.agreement, columns=contract.AGREEMENT_COLUMNS)
    trust = answers.trusted_metrics(frame, generation.judge_name) if generation.judging else {}
    return {"pipelines": out, "trust": {m: {"trusted": ok, "why": why} for m, (ok, why) in trust.items()},
            "events": run.events}


def _pipelines(result, k: int) -> dict[str, dict]:
    """Per pipeline: the means at k and each question's values at k."""
    pipelines: dict[str, dict] = {}
    for row in result.metrics:
        if row["k"] == k:
            pipelines.setdefault(row["pipeline"], {"means": {}, "questions": {}})["means"][row["metric"]] = row["value"]
    for row in result.per_question:
        if row["k"] == k:
            values = {MEAN_NAMES[m]: row[m] for m in MEAN_NAMES}
            values["first_relevant_rank"] = row["first_relevant_rank"]
            pipelines[row["pipeline"]]["questions"][row["question_id"]] = values
    return pipelines


def load_report(path: Path) -> dict:
    try:
        report = jsonl.loads_bounded(Path(path).read_text(encoding="utf-8"), path, GateError)
    except FileNotFoundError:
        raise GateError(f"{path}: baseline report not found") from None
    except UnicodeDecodeError as exc:
        raise GateError(f"{path}: not a JSON report: {exc}") from None
    if not isinstance(report, dict) or "pipelines" not in report:
        raise GateError(f"{path}: not a driftwatch eval report")
    if report.get("version") != REPORT_VERSION:
        raise GateError(f"{path}: an eval report of version {report.get('version')}, this driftwatch reads "
                        f"version {REPORT_VERSION}: make the baseline again")
    fingerprint = report.get("fingerprint")
    if not isinstance(fingerprint, dict) or not {*PROTOCOL, "config"} <= fingerprint.keys():
        raise GateError(f"{path}: the report has no fingerprint (gold, documents, config) to compare with")
    return report


def comparable(report: dict, baseline: dict) -> list[str]:
    """Refuse (GateError) a baseline made at another k, with another gold set or over other documents;
    return notes on what else differs (the settings, which is what a gate compares)."""
    if baseline["k"] != report["k"]:
        raise GateError(f"the baseline report was made at k={baseline['k']}, this one at k={report['k']}")
    old, new = baseline["fingerprint"], report["fingerprint"]
    differs = [part for part in PROTOCOL if old[part] != new[part]]
    if differs:
        what = "; ".join(f"{PROTOCOL[part]} {old[part]} in the baseline, {new[part]} here" for part in differs)
        raise GateError(f"the baseline report was made with another {' and '.join(PROTOCOL[p] for p in differs)} "
                        f"({what}; the baseline's gold {baseline['gold']}, docs {' '.join(baseline['docs'])}): "
                        "refused, a gate compares like with like")
    if old["config"] != new["config"]:
        return [f"settings differ from the baseline's (config {old['config']} -> {new['config']}, model "
                f"{baseline['model']} -> {report['model']}): their effect is what is judged"]
    return []


def _undefined(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _minimum(report: dict, pipeline: str, minimum: float) -> tuple[bool, str]:
    name = f"{MINIMUM_METRIC}@{report['k']} of {pipeline}"
    value = report["pipelines"][pipeline]["means"].get(MINIMUM_METRIC)
    if _undefined(value):
        return False, f"{name} is undefined (NaN): it cannot be held to the minimum {minimum:.4f}"
    if value < minimum:
        return False, f"{name} is {value:.4f}, below the minimum {minimum:.4f}"
    return True, f"{name} is {value:.4f}, at least the minimum {minimum:.4f}"


def _drops(report: dict, baseline: dict, pipeline: str, max_drop: float) -> tuple[list[str], list[str]]:
    """(checked, reasons) for each gated mean of `pipeline` against the baseline's."""
    k = report["k"]
    before, after = baseline["pipelines"][pipeline]["means"], report["pipelines"][pipeline]["means"]
    reasons, changes = [], []
    for metric in GATED:
        old, new = before.get(metric), after.get(metric)
        if _undefined(old) or _undefined(new):
            where = "this report" if _undefined(new) else "the baseline"
            reasons.append(f"{metric}@{k} of {pipeline} is undefined (NaN) in {where}: the drop cannot be checked")
        elif old - new > max_drop + 1e-12:
            reasons.append(f"{metric}@{k} of {pipeline} dropped {old - new:.4f} "
                           f"({old:.4f} -> {new:.4f}), more than the allowed {max_drop:.4f}")
        else:
            changes.append((new - old, metric, old, new))
    if reasons or not changes:
        return [], reasons
    change, metric, old, new = min(changes)
    return [f"no metric@{k} of {pipeline} dropped more than {max_drop:.4f} (the worst change: {metric} "
            f"{change:+.4f}, {old:.4f} -> {new:.4f})"], []


# What eval's --min-faithfulness and the like bound: the report's answers metric (source:metric).
ANSWER_MINIMUMS = {"faithfulness": "judge:faithfulness", "answer_relevance": "judge:answer_relevance",
                   "k_precision": "heuristic:k_precision"}


def judge_answers(report: dict, minimums: dict[str, float]) -> tuple[list[str], list[str], list[str]]:
    """(checked, reasons, notes) of the answer minimums: each pipeline's mean at least the minimum; a judged
    metric whose judge is not trusted (kappa under generation.min_kappa, or no labels) is noted, never failed."""
    checked, reasons, notes = [], [], []
    section = report.get("answers")
    if section is None:
        return [], [f"{', '.join(minimums)} gated, but the report has no answers (run eval --generation)"], []
    for metric, minimum in minimums.items():
        trust = section["trust"].get(metric)
        if metric in answers.JUDGED_WATCHED and not section["trust"]:
            reasons.append(f"{metric} is gated but no judge ran ([generation] judge, base_url)")
            continue
        if trust is not None and not trust["trusted"]:
            notes.append(f"{metric} not gated: {trust['why']}")
            continue
        for pipeline, values in section["pipelines"].items():
            value = values["means"].get(ANSWER_MINIMUMS[metric])
            name = f"{metric} of {pipeline} answers"
            if value is None:
                reasons.append(f"{name} is undefined (no answer was scored): it cannot be held to {minimum:.4f}")
            elif value < minimum:
                reasons.append(f"{name} is {value:.4f}, below the minimum {minimum:.4f} "
                               f"({values['undetermined'][ANSWER_MINIMUMS[metric]]} undetermined)")
            else:
                checked.append(f"{name} is {value:.4f}, at least the minimum {minimum:.4f}")
    return checked, reasons, notes


def judge(report: dict, *, min_recall: float | None, max_drop: float | None, baseline: dict | None,
          pipelines: Sequence[str] | None = None, answer_minimums: dict[str, float] | None = None) -> Verdict:
    """Judge each gated pipeline (`pipelines`; by default every pipeline of the report and of the baseline but the
    candidates, which are shown and never gated unless named).

    It fails when its recall@k is under `min_recall`, when any gated mean fell by more than `max_drop`
    (absolute) against the same pipeline in `baseline`, when a value it needs is NaN, or when the pipeline
    is missing from the report. A pipeline the baseline lacks is noted, not failed.
    """
    notes = comparable(report, baseline) if baseline is not None else []
    shadow = {*report.get("candidates", {}), *(baseline or {}).get("candidates", {})}
    gated = list(pipelines or dict.fromkeys(p for p in [*report["pipelines"], *(baseline or {}).get("pipelines", {})]
                                            if p not in shadow))
    checked, reasons = [], []
    for pipeline in gated:
        if pipeline not in report["pipelines"]:
            reasons.append(f"{pipeline} is gated but was not evaluated (evaluated: {', '.join(report['pipelines'])})")
            continue
        if min_recall is not None:
            ok, text = _minimum(report, pipeline, min_recall)
            (checked if ok else reasons).append(text)
        if baseline is None or max_drop is None:
            continue
        if pipeline not in baseline["pipelines"]:
            notes.append(f"{pipeline} is not in the baseline: its drop was not checked")
            continue
        passed, failed = _drops(report, baseline, pipeline, max_drop)
        checked += passed
        reasons += failed
    if max_drop is not None and baseline is None:
        notes.append("no baseline report: the drop check was skipped")
    if answer_minimums:
        more = judge_answers(report, answer_minimums)
        checked, reasons, notes = checked + more[0], reasons + more[1], notes + more[2]
    elif min_recall is None and max_drop is None:
        notes.append("nothing was gated: give --min-recall-at-k and/or --max-drop")
    return Verdict(tuple(checked), tuple(reasons), tuple(notes))


def table(report: dict, baseline: dict | None = None) -> str:
    """A row per pipeline and question, then the means (with the baseline's and the change when given)."""
    k = report["k"]
    head = f"{'pipeline':<14}{'question':<12}{'hit':>7}{'recall':>9}{'mrr':>8}{'ndcg':>8}{'rank':>6}"
    lines = [f"gold set evaluation at k={k}", head, "-" * len(head)]
    for pipeline, values in report["pipelines"].items():
        for qid, v in values["questions"].items():
            rank = v["first_relevant_rank"] or "-"
            lines.append(f"{pipeline:<14}{qid:<12}{v['hit']:>7.3f}{v['recall']:>9.3f}{v['mrr']:>8.3f}"
                         f"{v['ndcg']:>8.3f}{rank:>6}")
    lines += ["", f"{'pipeline':<14}{'metric':<12}{'value':>9}{'baseline':>10}{'change':>9}"]
    for pipeline, values in report["pipelines"].items():
        before = (baseline or {}).get("pipelines", {}).get(pipeline, {}).get("means", {})
        for metric in RETRIEVAL_METRICS:
            new = values["means"][metric]
            old = before.get(metric)
            tail = f"{old:>10.4f}{new - old:>+9.4f}" if old is not None else f"{'-':>10}{'':>9}"
            lines.append(f"{pipeline:<14}{metric + '@' + str(k):<12}{new:>9.4f}{tail}")
    for pipeline, values in report.get("answers", {}).get("pipelines", {}).items():
        lines += ["", f"{'answers':<14}{'source:metric':<30}{'value':>9}{'n':>5}{'undet.':>8}"]
        for name, value in values["means"].items():
            shown = f"{value:>9.4f}" if value is not None else f"{'-':>9}"
            lines.append(f"{pipeline:<14}{name:<30}{shown}{values['n'][name]:>5}{values['undetermined'][name]:>8}")
    return "\n".join(lines)

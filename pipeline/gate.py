"""The CI quality gate: evaluate a gold set over a fixed document set, compare with a baseline report."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone
from pathlib import Path

from pipeline.config import Config, SourceConfig
from pipeline.job import run_day
from pipeline.metrics import MEAN_NAMES

# Every entry of the documents counts, whatever its date: a dated folder is read up to this date.
ALL_DATES = date(2200, 1, 1)  # within pandas timestamps (which end in 2262)
REPORT_VERSION = 1
GATED = ("hit", "recall", "precision", "mrr", "ndcg")  # higher is better; unjudged is reported, not gated


class GateError(DriftwatchError):
    """A baseline report that cannot be compared (unreadable, other k, other gold set)."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: list[str]


def evaluate_documents(config: Config, gold: Path, docs: Sequence[Path], k: int, work_dir: Path | None = None) -> dict:
    """Run every configured pipeline over `docs` (feed files or folders) and return the report dict."""
    ks = tuple(sorted(set(config.retrieval.k) | {k}))
    with tempfile.TemporaryDirectory(prefix="driftwatch-eval-") as tmp:
        data_dir = Path(work_dir) if work_dir else Path(tmp)
        cfg = config.replace(
            data_dir=data_dir, gold=Path(gold),
            sources=tuple(SourceConfig(name=f"docs{i}", path=Path(d)) for i, d in enumerate(docs)),
            retrieval=replace(config.retrieval, k=ks,
                              candidate_depth=max(config.retrieval.candidate_depth, max(ks))),
            drift=replace(config.drift, evidently=False, query_log=None),
            alerts=replace(config.alerts, webhook_url=None, floors={}, drop={}, metrics=()),
        )
        result = run_day(cfg, ALL_DATES, notify=False)
    if result.run["feeds_failed"]:
        raise GateError(result.failed_feeds[0].error)
    pipelines: dict[str, dict] = {}
    for row in result.metrics:
        if row["k"] == k:
            pipelines.setdefault(row["pipeline"], {"means": {}, "questions": {}})["means"][row["metric"]] = row["value"]
    for row in result.per_question:
        if row["k"] == k:
            values = {MEAN_NAMES[m]: row[m] for m in MEAN_NAMES}
            values["first_relevant_rank"] = row["first_relevant_rank"]
            pipelines[row["pipeline"]]["questions"][row["question_id"]] = values
    return {
        "version": REPORT_VERSION, "k": k, "gold": str(gold), "docs": [str(d) for d in docs],
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": result.run["model"], "config_hash": config.config_hash(),
        "docs_total": result.run["docs_total"], "chunks_total": result.run["chunks_total"],
        "pipelines": pipelines,
    }


def load_report(path: Path) -> dict:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GateError(f"{path}: baseline report not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GateError(f"{path}: not a JSON report: {exc}") from None
    if not isinstance(report, dict) or report.get("version") != REPORT_VERSION or "pipelines" not in report:
        raise GateError(f"{path}: not a driftwatch eval report (version {REPORT_VERSION})")
    return report


def judge(report: dict, *, min_recall: float | None, max_drop: float | None, baseline: dict | None) -> Verdict:
    """Fail when the best pipeline's recall@k is under `min_recall`, or when any gated mean of any
    pipeline fell by more than `max_drop` (absolute) against the same pipeline in `baseline`."""
    k = report["k"]
    reasons = []
    recalls = {p: v["means"]["recall"] for p, v in report["pipelines"].items()}
    best = max(recalls, key=lambda p: recalls[p])
    if min_recall is not None and not recalls[best] >= min_recall:
        reasons.append(f"best recall@{k} is {recalls[best]:.4f} ({best}), below the minimum {min_recall:.4f}")
    if baseline is not None and max_drop is not None:
        if baseline["k"] != k:
            raise GateError(f"the baseline report was made at k={baseline['k']}, this one at k={k}")
        for pipeline, values in report["pipelines"].items():
            before = baseline["pipelines"].get(pipeline)
            if before is None:
                continue
            for metric in GATED:
                old, new = before["means"].get(metric), values["means"][metric]
                if old is None or (isinstance(old, float) and math.isnan(old)):
                    continue
                if old - new > max_drop + 1e-12:
                    reasons.append(f"{metric}@{k} of {pipeline} dropped {old - new:.4f} "
                                   f"({old:.4f} -> {new:.4f}), more than the allowed {max_drop:.4f}")
    return Verdict(not reasons, reasons)


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
        for metric in GATED + ("unjudged",):
            new = values["means"][metric]
            old = before.get(metric)
            tail = f"{old:>10.4f}{new - old:>+9.4f}" if old is not None else f"{'-':>10}{'':>9}"
            lines.append(f"{pipeline:<14}{metric + '@' + str(k):<12}{new:>9.4f}{tail}")
    return "\n".join(lines)

"""One run date of the answer layer: validate its inputs, get the records (logged, or generated from a target's
top k), score them (heuristics, then the judge when configured), compare with the labels, and write the files."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import contract, store
from pipeline.answers.client import Client, JudgeError
from pipeline.answers.inputs import check_logged, read_labels, read_logged
from pipeline.answers.judge import context_block, generate_answers, judge_records
from pipeline.answers.records import AnswerRecord, Context
from pipeline.answers.series import (agreement_rows, full_record, generation_rows, per_answer_row, replace_judgement,
                                     score_records)
from pipeline.answers.stored import trusted_metrics, write_records
from pipeline.config import target_list
from pipeline.gold import GoldQuestion
from pipeline.redact import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnswerRun:
    """One run date's answer layer: the rows of its three CSVs, its answers/ objects and what to note."""

    generation: list[dict]
    per_answer: list[dict]
    agreement: list[dict]
    records: list[dict]
    events: list[str]


SUMMARY = (("judge", "faithfulness"), ("judge", "answer_relevance"), ("heuristic", "k_precision"),
           ("heuristic", "unsupported_facts"), ("heuristic", "refusal_with_gold"), ("heuristic", "retrieval_miss"),
           ("heuristic", "generation_miss"))


def summary(run: AnswerRun) -> str:
    """One line of the run's answer layer for the command line: per pipeline the main means (with how many
    records had no value), then the events."""
    parts = []
    for pipeline in dict.fromkeys(r["pipeline"] for r in run.generation):
        rows = {(r["source"], r["metric"]): r for r in run.generation if r["pipeline"] == pipeline}
        shown = [f"{metric} {rows[key]['value']:.3f}" + (f" ({rows[key]['undetermined']} of {rows[key]['n']} "
                                                         "undetermined)" if rows[key]["undetermined"] else "")
                 for key in SUMMARY if key in rows for metric in [key[1]]]
        parts.append(f"{pipeline} " + ", ".join(shown))
    return "; ".join(parts + run.events) or "no answers"


def check_inputs(config, gold: Sequence[GoldQuestion]) -> None:
    """Everything the answer layer reads, validated before a run writes: the logged answers, the labels, the
    API key variable. Raises AnswersError or JudgeError."""
    g = config.generation
    if g.mode == "off":
        return
    if g.mode == "logged":
        check_logged(g.logged, gold)
    if g.labels is not None:
        read_labels(g.labels)
    if g.api_key_env and (g.mode == "generate" or g.judging) and not os.environ.get(g.api_key_env):
        raise JudgeError(f"generation.api_key_env: the environment variable {g.api_key_env} is not set")


def _contexts_of(ranking, documents: Mapping[str, str], k: int) -> tuple[Context, ...]:
    texts = list(ranking.texts) + [None] * (len(ranking.doc_ids) - len(ranking.texts))
    return tuple(Context(d, t if t else documents.get(d, "")) for d, t in list(zip(ranking.doc_ids, texts))[:k])


def run_answers(config, run_date: date, gold: Sequence[GoldQuestion], rankings: Mapping[str, Sequence],
                documents: Mapping[str, str], encode: Callable[[Sequence[str]], np.ndarray]) -> AnswerRun | None:
    """The answer layer of one run: the records (logged, or generated from the top k of generation.pipeline's
    `rankings`, with `documents` giving each doc id's text), the heuristics, the judge when configured, the
    labels' agreement. None when generation.mode is off. An endpoint that fails never stops it: the records
    it could not judge are undetermined:unreachable or not_judged, and `events` says so."""
    g = config.generation
    if g.mode == "off":
        return None
    day = run_date.isoformat()
    events: list[str] = []
    client = None
    try:
        if g.base_url is not None and (g.mode == "generate" or g.judging):
            client = Client(g, config.data_dir)
        if g.mode == "logged":
            records = read_logged(g.logged, gold, run_date)
        else:
            records = _generate(config, client, gold, rankings, documents, events)
        scored = score_records(records, gold, g.citations_required, encode)
        if g.judging and client is not None and scored:
            done = judge_records(client, g.judge_name, [s.record for s in scored], encode)
            scored = [replace_judgement(s, j) for s, j in zip(scored, done.judgements)]
            events.append(done.summary(g.judge_name))
            if done.not_judged or done.unreachable:
                log.warning("%s: %s", day, redact(events[-1]))
    finally:
        if client is not None:
            client.close()
    labels = read_labels(g.labels) if g.labels is not None else []
    agreement_rows_ = agreement_rows(day, scored, labels, g.judge_name, g.min_kappa,
                                     str(g.labels) if g.labels is not None else "")
    if g.judging:
        history = store.read(config.data_dir, contract.AGREEMENT)
        history = history[store.as_days(history[contract.RUN_DATE]) < pd.Timestamp(run_date)]
        today = pd.DataFrame(agreement_rows_, columns=contract.AGREEMENT_COLUMNS).astype({"run_date": "datetime64[ns]"})
        trust = trusted_metrics(pd.concat([history, today], ignore_index=True), g.judge_name)
        events += [why for ok, why in trust.values() if not ok]
    return AnswerRun(generation_rows(day, scored), [per_answer_row(day, s) for s in scored], agreement_rows_,
                     [full_record(day, s) for s in scored], events)


def _generate(config, client, gold: Sequence[GoldQuestion], rankings: Mapping[str, Sequence],
              documents: Mapping[str, str], events: list[str]) -> list[AnswerRecord]:
    g = config.generation
    pipeline = g.pipeline or next(t.name for t in target_list(config) if not t.candidate)  # a watched one
    ranked = rankings.get(pipeline)
    if ranked is None:
        events.append(f"answers: target {pipeline} returned no rankings; nothing generated")
        return []
    drafts = [AnswerRecord(q.id, q.question, "", _contexts_of(r, documents, g.k), pipeline)
              for q, r in zip(gold, ranked)]
    answers = generate_answers(client, [(d.question_id, d.question) for d in drafts],
                               [context_block(d) for d in drafts])
    failed = sum(a is None for a in answers)
    if failed:
        events.append(f"answers: {failed} of {len(drafts)} could not be generated ({g.base_url})")
    return [replace(d, answer=a) for d, a in zip(drafts, answers) if a is not None]


def write_run(data_dir: Path, run_date: date, run: AnswerRun) -> None:
    """The run's answer files: answers/DATE.jsonl, then generation.csv, per_answer.csv and agreement.csv."""
    day = run_date.isoformat()
    write_records(data_dir, day, run.records)
    store.replace_date(data_dir, contract.PER_ANSWER, day, run.per_answer)
    store.replace_date(data_dir, contract.GENERATION, day, run.generation)
    store.replace_date(data_dir, contract.AGREEMENT, day, run.agreement)

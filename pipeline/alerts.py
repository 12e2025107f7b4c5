"""Alert rules over the stored series and the alert records written to alerts.csv.

Retrieval: `drop` (the last runs against the window before them) and `slow_drift` (a moving mean against
the reference period), each needing a practically large change AND a paired per-question test significant
after Holm's correction over the watched series; `floor` (a configured limit). Corpus: `drift` (the verdicts
of drift.csv), `deleted` (a run that removes a large share of the corpus), `config_change` (the embedder
or the settings changed), `gold_missing` and `feeds_failed`; `targets_failed` (a watched retriever that
could not be scored on a run: no metric rows, never a zero score). Sources: `source_silent` and `source_spike`
(pipeline/source_health.py decides them). Notification lives in `notify.py`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date

import pandas as pd

from pipeline import PROJECT_URL, contract, series, shifts, store
from pipeline.config import AlertsConfig, DriftConfig
from pipeline.contract import (ALERT, CONFIG_CHANGE, CORPUS_METRIC, CORPUS_WIDE, DELETED, DRIFT_RULE, DRIFTED, DROP,
                               FEEDS_FAILED, FLOOR, GOLD_MISSING, QUERY_PREFIX, SEVERITIES, SLOW_DRIFT, STABLE,
                               TARGETS_FAILED, WARNING)
from pipeline.contract import SOURCE_SILENT, SOURCE_SPIKE
from pipeline.contract import SEGMENT_DROP, SEGMENT_RULES, SEGMENT_SLOW_DRIFT
from pipeline.contract import INDEX_GHOST, INDEX_GOLD_MISSING, INDEX_MIXED_GENERATIONS, INDEX_STALE
from pipeline.contract import GOLD_SHADOWED
from pipeline.drift import threshold_phrase, value_line
from pipeline.source_health import silent_sources, volume_spikes
from pipeline.metrics import ANSWER_WATCHED, REGISTRY, parse_series

_SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}

MAX_QUESTION_IDS = 5  # question ids named in a gold_missing message
NEAR_ALPHA = 10  # normal p-values under this many alphas are drawn exactly before Holm
# A condition quiet for this many runs is new when it fires again. Slow drift measures the distance to a fixed
# reference: once it has paged, it stays one condition until the reference moves or it is quiet for a month.
REARM_RUNS = {SLOW_DRIFT: 30}
DEFAULT_REARM_RUNS = 3
SEED = 0  # the Monte Carlo null's seed, so a re-run of a date gives the same alerts

INCIDENT_PER_PIPELINE = frozenset({DROP, SLOW_DRIFT})



# --- the runbook: what to do when a rule fires (docs/runbook.md is generated from it: `python -m pipeline.docgen`) --

RUNBOOK_PAGE = "runbook.md"  # in docs/
# Where a condition's line links to: the runbook's heading of its rule (a heading's anchor is the rule's name).
RUNBOOK_URL = f"{PROJECT_URL}/blob/main/docs/{RUNBOOK_PAGE}"


@dataclass(frozen=True)
class RunbookEntry:
    """One rule's entry: what it means, the next step in one line (shown on the condition's line in the
    dashboard) and the steps in full (the runbook page)."""

    rule: str
    meaning: str
    next_step: str
    steps: tuple[str, ...]

    @property
    def url(self) -> str:
        return f"{RUNBOOK_URL}#{self.rule}"


RUNBOOK: dict[str, RunbookEntry] = {e.rule: e for e in (
    RunbookEntry(DROP, "a pipeline's watched series fell against the runs just before, beyond the practical "
                       "threshold and significantly after Holm's correction",
                 "open the Questions page for the run before the drop and see which documents pushed gold "
                 "documents out of the top k",
                 ("Questions page: pick the run before the drop as `then`; the questions that lost their gold "
                  "document name the documents that replaced them.",
                  "Drift page for the drop's first run: did new sources, categories or near-duplicates come in?",
                  "Near-duplicates of gold documents: deduplicate the source, or add the copies to the gold set's "
                  "relevant ids.",
                  "A change you made on purpose (a new model, new chunking): acknowledge the condition on the "
                  "Alerts page with your name and why.")),
    RunbookEntry(SLOW_DRIFT, "a pipeline's smoothed series moved away from its reference period (the first runs), "
                             "a decline a trailing window absorbs",
                 "compare the reference period with today on the Trends page, then find what entered the "
                 "corpus since (Drift page)",
                 ("Trends page: the dotted reference mean against today's smoothed value.",
                  "Drift page, Corpus composition over time: which sources or categories grew since the reference.",
                  "If the new corpus is the new normal, pin a new reference (`alerts.reference_start` in the "
                  "config) and acknowledge the condition; otherwise fix the source.")),
    RunbookEntry(FLOOR, "a metric@k passed the limit configured in `alerts.floors`",
                 "look at the series on the Trends page and at the questions that fail on the Questions page",
                 ("Trends page: when did the series cross its floor, and did a run note coincide?",
                  "Questions page: the questions that fail today, and the documents they retrieve instead.",
                  "If the floor is wrong for the corpus as it is now, change `alerts.floors` in the config.")),
    RunbookEntry(DRIFT_RULE, "the corpus's new chunks differ from the reference window's (drift.csv verdicts: "
                             "significant after Holm and above the effect line)",
                 "open the Drift page on the run: which source or category came in, and the novel documents",
                 ("Drift page on the run: the verdicts, What came in (by source and category) and the novel "
                  "documents.",
                  "An off-topic or spam source: remove it from `[[sources]]`; near copies: deduplicate.",
                  "A lasting change you accept: pin the reference window to the new corpus with "
                  "`driftwatch rebaseline --date D`, and acknowledge the condition.")),
    RunbookEntry(DELETED, "a run removed more than `drift.max_deleted_share` of the corpus",
                 "check the feeds and the retention setting (`corpus.max_age_days`) before the next run",
                 ("runs.csv / Overview: docs_deleted of the run and its note.",
                  "A feed that stopped carrying its archive, or a retention setting that is too short: restore "
                  "the feed or raise `corpus.max_age_days`.")),
    RunbookEntry(CONFIG_CHANGE, "the embedder or a measured setting differs from the previous run's: scores "
                                "before and after are not comparable",
                 "confirm the change was intended; if so, pin a new reference and acknowledge the condition",
                 ("The message names the setting that changed; `git log` the config.",
                  "Intended: pin the reference (`driftwatch rebaseline --date D` and `alerts.reference_start`) "
                  "and acknowledge. Not intended: restore the config and re-run the date.")),
    RunbookEntry(GOLD_MISSING, "relevant documents of the gold set are not in the corpus",
                 "list the corpus's documents (`driftwatch check` names the missing ids) and fix the gold set's ids",
                 ("`driftwatch check` lists the gold document ids no source carries.",
                  "A document not yet published: wait for it; an id that changed: correct the gold set "
                  "(a new version, not an edit in place).")),
    RunbookEntry(FEEDS_FAILED, "sources could not be fetched or read on the run",
                 "run `driftwatch check` to reach every source once and read why each failed",
                 ("`driftwatch check` prints each source's error (DNS, HTTP status, parse error).",
                  "A moved feed: update its `url`; a transient outage: the next run fetches it again.")),
    RunbookEntry(TARGETS_FAILED, "a watched retriever could not be scored on the run: it has no metrics that day",
                 "read the message's reason and reach the target with `driftwatch check`",
                 ("`driftwatch check` asks every target the gold questions once and prints its error.",
                  "Fix the endpoint, credentials (the environment variables its headers name) or the logged "
                  "results file, then re-run the date.")),
    RunbookEntry(SOURCE_SILENT, "a source brought no new item for longer than its usual gap: more than "
                                "max(`alerts.silence_min_days`, `alerts.silence_gap_factor` x its median gap between "
                                "days with new items, the gap its daily rate of new items makes less likely than "
                                "`alerts.silence_alpha` over the sources); a failed fetch is `feeds_failed` instead",
                 "open the source's feed or folder: is it still published, and does the run read it?",
                 ("sources.csv / Overview: the source's last new item and its usual gap.",
                  "A feed that answers but no longer changes (a 304, the same items): the publisher stopped or "
                  "moved it; update its `url`. A folder: the export that drops its dated files stopped.",
                  "A source that is quiet on purpose (a holiday, a retired feed): acknowledge the condition, or "
                  "remove it from `[[sources]]`.")),
    RunbookEntry(SOURCE_SPIKE, "a source's new items on the run are far above its history: significant against a "
                               "negative binomial fitted to its last runs (Holm over the sources) and above "
                               "`alerts.spike_factor` x their median",
                 "look at what the source brought on the run (Drift page, What came in): a flood, a replay, spam?",
                 ("Drift page on the run: the new documents by source, and whether the drift statistics moved.",
                  "A feed replaying its archive or duplicating items: deduplicate or fix the feed.",
                  "A real news burst: nothing to do; the spike is a warning only.")),
)}


RUNBOOK.update({e.rule: e for e in (
    RunbookEntry(SEGMENT_DROP, "the questions of one segment (a gold tag, or the source or category of their gold "
                               "documents) fell over the last runs against the runs just before, more than the rest "
                               "did: a segment x rest permutation test of the questions' changes, Holm-corrected over "
                               "every segment and series",
                 "open the Segments page on the segment and drill down to its questions",
                 ("Segments page: the segment's row of the heatmap, and its questions' outcomes on the runs around "
                  "the drop.",
                  "The message names the rest for contrast: a segment that fell alone points at what it shares (its "
                  "wording for paraphrase questions, a source, a category), not at the corpus as a whole.",
                  "Questions page: which documents replaced the segment's gold documents in the top k.")),
    RunbookEntry(SEGMENT_SLOW_DRIFT, "the smoothed series of one segment's questions moved away from its reference "
                                     "period more than the rest's did, a decline the overall mean can hide",
                 "open the Segments page on the segment and compare its questions then and now",
                 ("Segments page: when the segment's row began to fade, and which of its questions lost their hits.",
                  "Drift page: what entered the corpus since the reference, in the segment's topic or source.",
                  "A change you accept: pin a new reference (`alerts.reference_start`) and acknowledge the "
                  "condition.")),
)})


# The index health of a vector store read as a corpus (pipeline/index_health.py; docs/targets.md).
RUNBOOK.update({e.rule: e for e in (
    RunbookEntry(INDEX_GHOST, "the store holds records of documents the corpus (the configured sources) does not "
                              "hold on the run date: deleted or expired documents the indexing job never removed",
                 "delete the named documents' records from the store, or find why the sources dropped them",
                 ("index_health.csv: the store's ghost count by day and a few of their document ids (`examples`).",
                  "A document deleted at the source: the indexing job's delete path did not run; delete its "
                  "records (by document id) and fix the job. A document the sources still carry under another id: "
                  "the store and the feeds disagree on ids; make the indexing job use the feed's ids.",
                  "Retrieval can return a ghost: its text is no longer true, and it takes a place in the top k.")),
    RunbookEntry(INDEX_STALE, "records whose stored text changed while their vector did not (from the previous "
                              "snapshot), or whose re-embedding is further than `index_health.stale_cosine` from "
                              "the stored vector",
                 "re-embed the named records with the collection's model and write their vectors",
                 ("index_health.csv: the stale count and a few record ids; a record stays stale until its vector "
                  "changes.",
                  "The indexing job updated the payload (the text) without re-embedding: re-embed on every text "
                  "change. Retrieval finds such a record by its old text.")),
    RunbookEntry(INDEX_MIXED_GENERATIONS, "records outside the collection's main embedding generation: another model "
                                          "stamp, dimension or norm, or records whose vectors sit in another space "
                                          "than their text neighbours' (neighbourhood signatures: another model of "
                                          "the same dimension, a rotated or re-trained one), or a re-embedded sample "
                                          "between `index_health.stale_cosine` and `index_health.generation_cosine` "
                                          "(another backend or quantisation of the model)",
                 "re-embed the named generation with the collection's model, or finish the migration",
                 ("The message says how the generations were told apart and how many records each holds.",
                  "A migration half done (a new model, truncate_dim, ONNX int8): vectors of two spaces are compared "
                  "with one query vector and rank wrongly; re-embed the minority, or the whole collection with the "
                  "new model and switch queries with it.")),
    RunbookEntry(INDEX_GOLD_MISSING, "gold documents that the corpus holds on the run date have no record in the "
                                     "store",
                 "index the named documents into the store, then re-run the date",
                 ("index_health.csv: the gold_absent count and the document ids.",
                  "A document the indexing job skipped or deleted: re-index it. The questions that need it cannot "
                  "be answered from the store until then.")),
)})


# The judging loop's warning (pipeline/judging/pool.py; docs/judging.md).
RUNBOOK.update({e.rule: e for e in (
    RunbookEntry(GOLD_SHADOWED, "a near copy of a gold document whose text differs from it (a changed fact) ranked "
                                "above the gold document in a target's top k: the question may now be answered from "
                                "the copy's facts",
                 "judge the shadow in the queue (Judge page or `driftwatch judge`), and find where the copy came from",
                 ("The warning names the question, the gold document, the shadow and the sentences that differ.",
                  "pool.csv: the shadow's row (reason `shadow`) and its rank against the gold document's.",
                  "A corrected article: judge it relevant and the maintained qrels follow. A planted or stale copy "
                  "(poisoning, a mirror): remove it from the sources, and judge it not relevant.")),
)})


def runbook(rule: str) -> RunbookEntry:
    """The runbook entry of a rule (KeyError for a rule the contract does not name)."""
    return RUNBOOK[rule]


def condition_of(rule: str, pipeline: str, metric: str) -> tuple[str, ...]:
    """`Alert.condition` of an alerts.csv row: (rule, pipeline) for a pipeline's drop or slow drift, (rule, pipeline,
    segment) for a segment rule (whichever of its series), else (rule, pipeline, metric)."""
    # An answer metric is its own condition: a pipeline's retrieval drop does not hide its answers' drop.
    per_pipeline = rule in INCIDENT_PER_PIPELINE and metric not in ANSWER_WATCHED
    if rule in SEGMENT_RULES:  # metric is "hit@5 tag:paraphrase": one condition per pipeline and segment
        return rule, pipeline, metric.partition(" ")[2]
    return (rule, pipeline) if per_pipeline else (rule, pipeline, metric)


@dataclass(frozen=True)
class Alert:
    """One alerts.csv row. `since` is the first run date of the condition's streak (the run date itself
    when it is new); `p_value` the rule's adjusted p where it has one."""

    run_date: str
    rule: str
    pipeline: str
    metric: str
    value: float
    baseline: float
    change_pct: float
    threshold: float
    severity: str
    message: str
    since: str = ""
    p_value: float = math.nan

    @property
    def new(self) -> bool:
        return not self.since or self.since == self.run_date

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the same alerts.csv row from one run to the next."""
        return self.rule, self.pipeline, self.metric

    @property
    def condition(self) -> tuple[str, ...]:
        """What identifies the same condition (one incident, paged once) from one run to the next: a
        pipeline's drop or slow drift, whichever of its watched series shows it on a given day (hit@5 and
        recall@5 coincide with one relevant document per question; mrr and ndcg move together); any other
        rule per metric."""
        return condition_of(self.rule, self.pipeline, self.metric)

    def row(self) -> dict:
        return {column: getattr(self, column) for column in contract.ALERTS_COLUMNS}


def alerts_frame(alerts: Iterable[Alert]) -> pd.DataFrame:
    """The alerts as alerts.csv rows, with the contract's columns even when there are none (for
    `store.replace_date`, so a day without alerts also clears that date's earlier rows)."""
    return pd.DataFrame([a.row() for a in alerts], columns=list(contract.ALERTS_COLUMNS))


def has_alerts(alerts: Iterable[Alert]) -> bool:
    """Whether any alert of severity "alert" (not merely a warning) fired: the `--fail-on-alert` test."""
    return any(a.severity == ALERT for a in alerts)


def is_new(alerts: pd.DataFrame) -> pd.Series:
    """alerts.csv rows that start their condition (since is empty or the run date itself)."""
    since = alerts["since"].fillna("").astype(str)
    return (since == "") | (since == alerts[contract.RUN_DATE].dt.strftime("%Y-%m-%d"))


# --- reading the frames ------------------------------------------------------------


def _days(frame: pd.DataFrame) -> pd.Series:
    return store.as_days(frame[contract.RUN_DATE])


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _threshold_source(config: AlertsConfig, name: str) -> str:
    return f"{name}'s own drop setting" if name in config.drop else f"{config.criticality} criticality"


# --- retrieval rules -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tested:
    key: series.SeriesKey
    rule: str
    test: series.Contrast
    confirm: series.Contrast | None = None  # the drop rule's confirmation block (None: not confirmed)
    p_value: float = math.nan  # Holm-adjusted


def _drop_candidates(matrix: series.Matrix, key: series.SeriesKey, today: pd.Timestamp,
                     config: AlertsConfig) -> tuple[series.Contrast | None, series.Contrast | None]:
    """Today against the window before it, and the confirmation block of the last `confirm_days` runs
    against the window before the block, where each run of the block is large on its own."""
    hib = key.metric.higher_is_better
    today_test = series.drop_contrast(matrix, today, config, hib)
    if config.confirm_days == 1 or today_test is None:
        return today_test, today_test
    block = series.drop_contrast(matrix, today, config, hib, block=config.confirm_days)
    if block is None:
        return today_test, None
    threshold = series.drop_threshold(config, key.name)
    each = [series.contrast(matrix, [day], [1.0], block.baseline_days, hib) for day in block.tested]
    large = all(t is not None and t.relative_harm > threshold for t in each)
    return today_test, block if large else None


def _p(test: series.Contrast, key: series.SeriesKey, config: AlertsConfig) -> float:
    """The test's p-value: the normal tail, drawn exactly (Monte Carlo, seeded) where the decision could turn
    on it: a practically large change whose normal p is near alpha or below. The normal tail is too small
    in the far tails at tens of questions; the draws are not."""
    if test.relative_harm > series.drop_threshold(config, key.name) and test.p_value < NEAR_ALPHA * config.alpha:
        return test.permutation_p(config.permutations, SEED, stop_above=config.alpha)
    return test.p_value


@dataclass(frozen=True)
class AnswerKey(series.SeriesKey):
    """An answer metric's series: per_answer.csv's values per question, without a k."""

    @property
    def name(self) -> str:
        return self.metric.name


ANSWER_K = 0  # the k of the answer series in the per-question frame the rules read


def answer_series(per_answer: pd.DataFrame) -> pd.DataFrame:
    """per_answer.csv in the shape the rules read (per_question's: run_date, pipeline, k, question_id and a
    column per metric)."""
    frame = per_answer[[contract.RUN_DATE, contract.PIPELINE, contract.QUESTION_ID, *ANSWER_WATCHED]].copy()
    frame[contract.K] = ANSWER_K
    return frame


def _retrieval_tests(per_question: pd.DataFrame, pipelines: Sequence[str], today: pd.Timestamp,
                     config: AlertsConfig, ks: Sequence[int]) -> list[_Tested]:
    """The drop and slow-drift tests of every watched series, with Holm-adjusted p-values per rule."""
    return _tests(per_question, series.keys(config, ks, pipelines), today, config)


def _tests(per_question: pd.DataFrame, keys: Sequence[series.SeriesKey], today: pd.Timestamp,
           config: AlertsConfig) -> list[_Tested]:
    return tests_of(series.question_matrices(per_question, keys), today, config)


def tests_of(matrices: Mapping[series.SeriesKey, series.Matrix], today: pd.Timestamp,
             config: AlertsConfig) -> list[_Tested]:
    """The drop and slow-drift tests of every series' matrix, Holm-adjusted per rule over the series given (the
    family), the drop's confirmation block in a family of its own."""
    start = series.reference_start(config)
    drops, slows = [], []
    for key, matrix in matrices.items():
        if matrix.empty or today not in matrix.days:
            continue
        today_test, confirm = _drop_candidates(matrix, key, today, config)
        if today_test is not None:
            drops.append(_Tested(key, DROP, today_test, confirm))
        slow = series.slow_contrast(matrix, today, config, key.metric.higher_is_better, start)
        if slow is not None:
            slows.append(_Tested(key, SLOW_DRIFT, slow))
    adjusted = []
    for family in (drops, slows):
        # The confirmation block is tested in its own family, at the same alpha.
        p = series.holm([_p(t.test, t.key, config) for t in family])
        adjusted += [dataclasses.replace(t, p_value=q) for t, q in zip(family, p)]
    confirmable = [t for t in adjusted if t.rule == DROP and t.confirm is not None]
    for t, q in zip(confirmable, series.holm([_p(t.confirm, t.key, config) for t in confirmable])):
        adjusted[adjusted.index(t)] = dataclasses.replace(t, confirm=t.confirm if q < config.alpha else None)
    return adjusted


def _describe(test: series.Contrast, name: str, pipeline: str) -> str:
    verb = "fell" if test.difference < 0 else "rose"
    amount = f"{abs(test.change):.1%}" if math.isfinite(test.change) else "from zero"
    return f"{name} of {pipeline} {verb} {amount} to {test.value:.3f}"


def _noise(test: series.Contrast, p: float, n_tests: int) -> str:
    return (f"paired test over {plural(test.n_questions, 'question')}: {test.z:.1f} null sds "
            f"(sd {test.sd:.3f}), p={p:.2g} after Holm over {n_tests} watched series")


def _retrieval_alerts(day: str, tests: list[_Tested], config: AlertsConfig) -> list[Alert]:
    alerts = []
    n = {rule: sum(t.rule == rule for t in tests) for rule in (DROP, SLOW_DRIFT)}
    for t in tests:
        threshold = series.drop_threshold(config, t.key.name)
        if not series.fires(t.test, threshold, t.p_value, config.alpha):
            continue
        test, name, pipeline = t.test, t.key.name, t.key.pipeline
        where = f"threshold {_pct(threshold)}, {_threshold_source(config, name)}; {_noise(test, t.p_value, n[t.rule])}"
        if t.rule == DROP:
            confirmed = t.confirm is not None
            severity = ALERT if confirmed else WARNING
            shown = t.confirm if confirmed else test
            span = (f"for {plural(len(shown.tested), 'run')} " if confirmed and len(shown.tested) > 1 else "")
            message = (f"{_describe(test, name, pipeline)} {span}against the mean {shown.baseline:.3f} of the "
                       f"{plural(len(shown.baseline_days), 'run')} before ({where})")
            if not confirmed and config.confirm_days > 1:
                message += f"; an alert once it holds {plural(config.confirm_days, 'run')}"
            p = t.p_value
        else:
            severity, shown, p = ALERT, test, t.p_value
            message = (f"slow drift: the moving mean of {name} of {pipeline} is {test.value:.3f}, "
                       f"{_pct(abs(test.change))} {'below' if test.difference < 0 else 'above'} its reference "
                       f"{test.baseline:.3f} (runs {store.iso_day(test.baseline_days[0])} to "
                       f"{store.iso_day(test.baseline_days[-1])}; {where})")
        alerts.append(Alert(day, t.rule, pipeline, name, test.value, shown.baseline, test.change * 100,
                            threshold * 100, severity, message, p_value=p))
    return alerts


def _floor_alerts(day: str, today: pd.Timestamp, metrics: pd.DataFrame, config: AlertsConfig) -> list[Alert]:
    """A configured floor: a limit below which (above, for unjudged) a series alerts whatever its history."""
    rows = metrics[_days(metrics) == today]
    alerts = []
    for name, floor in config.floors.items():
        info, k = parse_series(name)
        for _, row in rows[(rows[contract.METRIC] == info.name) & (rows[contract.K] == k)].iterrows():
            value = float(row[contract.VALUE])
            crossed = value < floor if info.higher_is_better else value > floor
            if math.isnan(value) or not crossed:
                continue
            side = "below" if info.higher_is_better else "above"
            pipeline = row[contract.PIPELINE]
            alerts.append(Alert(day, FLOOR, pipeline, name, value, math.nan, math.nan, floor, ALERT,
                                f"{name} of {pipeline} is {value:.3f}, {side} its configured limit {floor:.3f}"))
    return alerts


# --- corpus rules --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DriftWindow:
    """One run's drift verdicts of one family (the corpus's statistics, or the query log's): the first day of
    its current window, whether any statistic drifted, and the smallest Holm-adjusted p of those that did."""

    run_date: pd.Timestamp
    current_start: pd.Timestamp
    drifted: bool
    min_p: float = math.inf
    # (statistic without its family's prefix, Holm-adjusted p) of each drifted statistic; empty: `min_p` is any's
    drifted_p: tuple[tuple[str, float], ...] = ()

    def page_p(self, statistics: Sequence[str]) -> float:
        """The smallest Holm-adjusted p of a drifted statistic among those that may page on their own day."""
        if not self.drifted_p:
            return self.min_p
        return min((p for name, p in self.drifted_p if name in statistics), default=math.inf)


@dataclass(frozen=True)
class DriftConfirmation:
    """Whether a drifted window pages: `confirmed` by the one-day page level or by `windows` (today's and the
    earlier disjoint windows looked at, newest first) of which `n_drifted` drifted without paging before."""

    confirmed: bool
    page_level: bool
    windows: tuple[DriftWindow, ...]
    n_drifted: int  # the windows that confirm: today's and the earlier drifted ones that did not page themselves
    confirming: tuple[DriftWindow, ...] = ()

    def describe(self, config: DriftConfig) -> str:
        if self.page_level:
            return f"Confirmed on its own day: Holm-adjusted p below the page level {config.page_alpha:g}"
        dates = ", ".join(f"{w.run_date:%Y-%m-%d}" for w in self.confirming)
        seen = f"{self.n_drifted} of the last {plural(len(self.windows), 'disjoint window')} ({dates})"
        if self.confirmed:
            return f"Confirmed: drifted in {seen}"
        return (f"Drifted, not confirmed: a warning until drifted in {config.confirm_windows} of the last "
                f"{config.confirm_of} disjoint windows (now {seen}) or below the one-day page level p < "
                f"{config.page_alpha:g}")


def drift_windows(drift: pd.DataFrame, prefix: str = "") -> list[DriftWindow]:
    """Per run date, the verdict of the drift family whose statistic names start with `prefix` ("" for the
    corpus's, "query_" for the query log's), oldest first; runs without a verdict (not enough data) are left
    out: they neither confirm nor break a drift."""
    if drift.empty or "verdict" not in drift.columns:
        return []
    names = drift[contract.STATISTIC].astype(str)
    is_query = names.str.startswith(QUERY_PREFIX)
    rows = drift[(is_query if prefix else ~is_query) & drift["verdict"].isin([DRIFTED, STABLE])]
    if rows.empty:
        return []
    frame = pd.DataFrame({"run_date": _days(rows), "current_start": pd.to_datetime(rows["current_start"]),
                          "drifted": rows["verdict"] == DRIFTED, "p": rows["p_value"].astype(float),
                          "name": rows[contract.STATISTIC].astype(str).str.removeprefix(prefix)})
    out = []
    for day, group in frame.groupby("run_date", sort=True):
        drifted = group[group["drifted"]]
        out.append(DriftWindow(day, group["current_start"].iloc[0], bool(len(drifted)),
                               float(drifted["p"].min()) if len(drifted) else math.inf,
                               tuple(zip(drifted["name"], drifted["p"].astype(float)))))
    return out


def confirm_drift(windows: Sequence[DriftWindow], today: pd.Timestamp, config: DriftConfig) -> DriftConfirmation:
    """Whether the drift of `today`'s window pages: at the one-day page level (its smallest Holm-adjusted p of a
    drifted statistic of `page_statistics` below `page_alpha`), or when `confirm_windows` of the last `confirm_of`
    disjoint current windows drifted: today's, then the latest run whose window ended before today's began, and so on back. Only
    disjoint windows count, so one burst seen by two overlapping windows is not its own confirmation; and a window
    whose drift already paged confirms no later one, so a burst that paged on its day cannot make an ordinary
    excursion days later page "since" the burst.

    `windows`: `drift_windows`."""
    ordered = sorted(windows, key=lambda w: w.run_date)
    paged: dict[pd.Timestamp, bool] = {}
    found = DriftConfirmation(False, False, (), 0)
    for i, now in enumerate(ordered):  # oldest first: whether each earlier window paged decides the later ones
        if now.run_date > today:
            break
        found = DriftConfirmation(False, False, (), 0)
        if now.drifted:
            chain = [now]
            for w in reversed(ordered[:i]):
                if len(chain) == config.confirm_of:
                    break
                if w.run_date < chain[-1].current_start:
                    chain.append(w)
            confirming = (now, *(w for w in chain[1:] if w.drifted and not paged[w.run_date]))
            page_level = now.page_p(config.page_statistics) < config.page_alpha
            found = DriftConfirmation(page_level or len(confirming) >= config.confirm_windows, page_level,
                                      tuple(chain), len(confirming), confirming)
        paged[now.run_date] = found.confirmed
    return found if today in paged else DriftConfirmation(False, False, (), 0)


def _drift_alerts(day: str, today: pd.Timestamp, drift: pd.DataFrame, config: DriftConfig) -> list[Alert]:
    """One alert naming every statistic of the run whose verdict is drifted (significant after Holm over
    the run's statistics and above its effect-size line), with what is new: an alert when confirmed (see
    `confirm_drift`, per family: the corpus's statistics and the query log's), else a warning. It opens with what
    came in (`shifts.named_shift`: the run's named_shift row, and the topic growing over the windows confirming it)."""
    if "verdict" not in drift.columns:
        return []
    rows = drift[(_days(drift) == today) & (drift["verdict"] == DRIFTED)]
    if rows.empty:
        return []
    confirmations = [confirm_drift(drift_windows(drift, prefix), today, config) for prefix in ("", QUERY_PREFIX)]
    drifted = [c for c in confirmations if c.windows]
    confirmed = [c for c in drifted if c.confirmed]
    parts = [f"{r.statistic} {r.value:.3f} (threshold {value_line(r.effect_from, r.threshold):.3f}: "
             f"{threshold_phrase(r.statistic, r.effect_from, r.threshold)}; null 95% {r.null_value:.3f}, "
             f"p={r.p_value:.2g})" for r in rows.itertuples()]
    details = [str(d) for d in rows["detail"].fillna("") if str(d)]
    first = rows.iloc[0]
    window = f"{first['reference_start']} to {first['reference_date']}"
    named = shifts.named_shift(drift, today, [w.run_date for w in confirmations[0].confirming])
    lead = f"corpus drift: {named}. The" if named else "corpus drift: the"
    message = (f"{lead} {plural(int(first['n_current']), 'chunk')} new in this window differ from the "
               f"{int(first['n_reference'])} of the reference ({window}): " + "; ".join(parts))
    message += ". " + "; ".join(c.describe(config) for c in (confirmed or drifted))
    if details:
        message += ". New: " + " | ".join(dict.fromkeys(details))
    return [Alert(day, DRIFT_RULE, CORPUS_WIDE, CORPUS_METRIC, float(first["value"]), float(first["null_value"]),
                  math.nan, float(first["threshold"]), ALERT if confirmed else WARNING, message,
                  p_value=float(rows["p_value"].min()))]


def _previous_run(runs: pd.DataFrame, today: pd.Timestamp) -> pd.Series | None:
    earlier = runs[_days(runs) < today].sort_values(contract.RUN_DATE)
    return earlier.iloc[-1] if len(earlier) else None


def _deleted_alerts(day: str, today: pd.Timestamp, runs: pd.DataFrame, drift_config: DriftConfig) -> list[Alert]:
    rows, previous = runs[_days(runs) == today], _previous_run(runs, today)
    if rows.empty or previous is None or pd.isna(previous[contract.DOCS_TOTAL]) or not previous[contract.DOCS_TOTAL]:
        return []
    deleted = rows.iloc[-1]["docs_deleted"]
    share = float(deleted) / float(previous[contract.DOCS_TOTAL]) if pd.notna(deleted) else 0.0
    if share <= drift_config.max_deleted_share:
        return []
    return [Alert(day, DELETED, CORPUS_WIDE, "docs_deleted", float(deleted), float(previous[contract.DOCS_TOTAL]),
                  -share * 100, drift_config.max_deleted_share * 100, ALERT,
                  f"{plural(int(deleted), 'document')} ({share:.0%} of the corpus) were deleted in this run, more "
                  f"than {drift_config.max_deleted_share:.0%}: retrieval now misses what they held")]


def _config_alerts(day: str, today: pd.Timestamp, runs: pd.DataFrame) -> list[Alert]:
    """The embedder (alert) or another measured setting (warning) differs from the previous run's."""
    rows, previous = runs[_days(runs) == today], _previous_run(runs, today)
    if rows.empty or previous is None:
        return []
    run = rows.iloc[-1]
    known = lambda column: all(pd.notna(r[column]) and str(r[column]) for r in (run, previous))  # noqa: E731
    if known("model") and run["model"] != previous["model"]:
        return [Alert(day, CONFIG_CHANGE, CORPUS_WIDE, "model", math.nan, math.nan, math.nan, math.nan, ALERT,
                      f"the embedder changed from {previous['model']} to {run['model']} since the run of "
                      f"{store.iso_day(pd.Timestamp(previous[contract.RUN_DATE]))}: embeddings and scores before and "
                      f"after are not comparable; pin a new reference once the change is intended")]
    if known("config_hash") and run["config_hash"] != previous["config_hash"]:
        return [Alert(day, CONFIG_CHANGE, CORPUS_WIDE, "config_hash", math.nan, math.nan, math.nan, math.nan,
                      WARNING, f"the settings that shape retrieval changed (config hash {previous['config_hash']} "
                      f"-> {run['config_hash']}): a change in the series from this run may be the settings")]
    return []


def _gold_missing_alerts(day: str, today: pd.Timestamp, per_question: pd.DataFrame) -> list[Alert]:
    rows = per_question[_days(per_question) == today]
    if rows.empty:
        return []
    # Every pipeline and k carries the same gold_missing per question: read one of them.
    first = rows[(rows["pipeline"] == rows["pipeline"].iloc[0]) & (rows["k"] == rows["k"].min())]
    missing = first[first["gold_missing"].fillna(0) > 0]
    if missing.empty:
        return []
    total = int(missing["gold_missing"].sum())
    ids = list(missing["question_id"])
    named = ", ".join(ids[:MAX_QUESTION_IDS]) + (f" and {len(ids) - MAX_QUESTION_IDS} more"
                                                  if len(ids) > MAX_QUESTION_IDS else "")
    message = (f"{plural(total, 'relevant document')} of the gold set "
               f"{'is' if total == 1 else 'are'} missing from the corpus, for {plural(len(ids), 'question')} "
               f"({named}); their scores now measure missing content, not retrieval")
    return [Alert(day, GOLD_MISSING, CORPUS_WIDE, GOLD_MISSING, float(total), math.nan, math.nan, 0.0, ALERT,
                  message)]


def _feed_alerts(day: str, today: pd.Timestamp, runs: pd.DataFrame) -> list[Alert]:
    rows = runs[_days(runs) == today]
    if rows.empty:
        return []
    run = rows.iloc[-1]
    failed = int(0 if pd.isna(run["feeds_failed"]) else run["feeds_failed"])
    ok = int(0 if pd.isna(run["feeds_ok"]) else run["feeds_ok"])
    if failed == 0:
        return []
    if ok == 0:
        severity = ALERT
        message = (f"every feed failed ({plural(failed, 'feed')}); today's metrics were measured on the "
                   f"corpus as it was, without any new documents")
    else:
        severity = WARNING
        message = (f"{failed} of {plural(failed + ok, 'feed')} failed; today's corpus lacks their new "
                   f"documents")
    return [Alert(day, FEEDS_FAILED, CORPUS_WIDE, FEEDS_FAILED, float(failed), math.nan, math.nan, 0.0,
                  severity, message)]


def _target_alerts(day: str, today: pd.Timestamp, targets: pd.DataFrame | None) -> list[Alert]:
    """One alert per target that failed on the run (targets.csv), naming why."""
    if targets is None or targets.empty:
        return []
    failed = targets[(_days(targets) == today) & (targets["status"] == contract.TARGET_FAILED)]
    return [Alert(day, TARGETS_FAILED, target, TARGETS_FAILED, math.nan, math.nan, math.nan, math.nan, ALERT,
                  f"target {target} ({kind}) could not be scored: {message}; it has no metrics for this run")
            for target, kind, message in zip(failed["target"], failed["kind"], failed["message"])]


def _source_alerts(day: str, today: pd.Timestamp, sources: pd.DataFrame | None, config: AlertsConfig
                   ) -> list[Alert]:
    """A source silent past its usual gap (an alert) and a source's volume spike (a warning), each naming the
    source (the alert's `metric`); see pipeline/source_health.py."""
    if sources is None or sources.empty:
        return []
    rows = sources[_days(sources) == today]
    silent = [Alert(day, SOURCE_SILENT, CORPUS_WIDE, s.source, float(s.gap_days), s.usual_gap_days, math.nan,
                    s.line_days, ALERT, s.message) for s in silent_sources(rows, config)]
    spikes = [Alert(day, SOURCE_SPIKE, CORPUS_WIDE, s.source, float(s.new_items), s.median,
                    (s.new_items / s.median - 1) * 100 if s.median else math.nan, s.line, WARNING, s.message,
                    p_value=s.p_value) for s in volume_spikes(sources, today, config)]
    return silent + spikes


def mark_ongoing(alerts: Sequence[Alert], today: pd.Timestamp, runs: pd.DataFrame,
                 previous: pd.DataFrame) -> list[Alert]:
    """Set each alert's `since`: the first run date of its streak.

    The streak goes back over earlier run dates (runs.csv) on which the same condition (`Alert.condition`:
    a pipeline's drop or slow drift in any of its series, else the same rule, pipeline and metric) fired at a
    severity at least today's, bridging gaps of fewer than REARM_RUNS runs (3; 30 for slow drift): a
    condition flickering around its threshold pages once, not every time it comes back. An escalation (a
    warning before, an alert today) starts a new streak, so it is notified."""
    earlier = sorted({d for d in _days(runs) if d < today}, reverse=True)
    fired: dict[tuple, str] = {}  # only earlier run dates are looked up, so rows of today never count
    for d, rule, pipeline, metric, severity in zip(
            _days(previous), previous["rule"], previous["pipeline"].fillna(CORPUS_WIDE),
            previous["metric"].fillna(""), previous["severity"]):
        where = (d, *condition_of(rule, pipeline, metric))
        if _SEVERITY_RANK[severity] >= _SEVERITY_RANK[fired.get(where, WARNING)]:
            fired[where] = severity
    marked = []
    for alert in alerts:
        since, gap = today, 0
        for d in earlier:
            severity = fired.get((d, *alert.condition))
            if severity is not None and _SEVERITY_RANK[severity] < _SEVERITY_RANK[alert.severity]:
                break
            gap = gap + 1 if severity is None else 0
            if gap >= REARM_RUNS.get(alert.rule, DEFAULT_REARM_RUNS):
                break
            if severity is not None:
                since = d
        marked.append(dataclasses.replace(alert, since=store.iso_day(since)))
    return marked


def answer_alerts(day: str, today: pd.Timestamp, per_answer: pd.DataFrame | None, config: AlertsConfig,
                  trusted: dict[str, bool] | None = None) -> list[Alert]:
    """The drop and slow-drift rules over the answer metrics of per_answer.csv (the same tests and thresholds
    as the retrieval series, at the criticality's threshold), Holm over the answer series. A judged
    metric that `trusted` does not mark True (its judge's kappa against the labels) is not tested, nor
    K-precision when `trusted` marks it False (the heuristics' kappa is below the gate)."""
    if per_answer is None or per_answer.empty:
        return []
    # K-precision is watched unless its heuristics failed their agreement gate (answers.heuristic_trust).
    watched = [m for m in ANSWER_WATCHED if (trusted or {}).get(m, m == "k_precision")]
    pipelines = list(dict.fromkeys(per_answer.loc[_days(per_answer) == today, contract.PIPELINE]))
    keys = [AnswerKey(p, REGISTRY[m], ANSWER_K) for p in pipelines for m in watched]
    return _retrieval_alerts(day, _tests(answer_series(per_answer), keys, today, config), config)


def evaluate_alerts(run_date: date, metrics: pd.DataFrame, per_question: pd.DataFrame, drift: pd.DataFrame,
                    runs: pd.DataFrame, config: AlertsConfig, ks: tuple[int, ...],
                    previous: pd.DataFrame, drift_config: DriftConfig | None = None,
                    targets: pd.DataFrame | None = None, per_answer: pd.DataFrame | None = None,
                    trusted: dict[str, bool] | None = None, sources: pd.DataFrame | None = None,
                    more: Sequence[Alert] = ()) -> list[Alert]:
    """Every alert of one run date, from the full histories (including that date's rows).

    `previous` is alerts.csv's history; rows of `run_date` itself in it are ignored, so re-running
    a date gives the same alerts. `more`: alerts of the date found elsewhere (the segment rules,
    pipeline/segments.py), marked ongoing with the rest. Nothing is read or written here."""
    today = pd.Timestamp(run_date)
    day = store.iso_day(run_date)
    pipelines = list(dict.fromkeys(metrics.loc[_days(metrics) == today, contract.PIPELINE]))
    tests = _retrieval_tests(per_question, pipelines, today, config, ks)
    alerts = [
        *_retrieval_alerts(day, tests, config),
        *_floor_alerts(day, today, metrics, config),
        *_drift_alerts(day, today, drift, drift_config or DriftConfig()),
        *_deleted_alerts(day, today, runs, drift_config or DriftConfig()),
        *_config_alerts(day, today, runs),
        *_gold_missing_alerts(day, today, per_question),
        *_feed_alerts(day, today, runs),
        *_target_alerts(day, today, targets),
        *answer_alerts(day, today, per_answer, config, trusted),
        *_source_alerts(day, today, sources, config),
        *more,
    ]
    return mark_ongoing(alerts, today, runs, previous)

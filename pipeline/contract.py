"""The data directory's contract, the boundary between the job and the app: every CSV's file name, columns and
column types, and the values the columns carry (run and target statuses, drift verdicts and statistic names,
alert rules and severities). `docs/concepts.md` is its full text.

Standard library only (nothing at all, in fact): config and alerts import it at their own import."""

from __future__ import annotations

# --- files --------------------------------------------------------------------------------------------------

RUNS = "runs.csv"
METRICS = "metrics.csv"
PER_QUESTION = "per_question.csv"
DRIFT = "drift.csv"
ALERTS = "alerts.csv"
SIGNALS = "signals.csv"
TARGETS = "targets.csv"
GENERATION = "generation.csv"  # the answer layer (pipeline/answers/): per run and metric
PER_ANSWER = "per_answer.csv"  # per answered question
AGREEMENT = "agreement.csv"  # judge or heuristic against human labels
SOURCES = "sources.csv"  # each configured source's freshness and volume per run (pipeline/source_health.py)
ANSWERS_DIR = "answers"  # answers/YYYY-MM-DD.jsonl: the full answer records (text, contexts, claims)

# --- columns ------------------------------------------------------------------------------------------------

RUNS_COLUMNS = (
    "run_date", "run_id", "started_at", "finished_at", "status", "feeds_ok", "feeds_failed",
    "docs_new", "docs_updated", "docs_deleted", "docs_total", "chunks_total", "chunks_embedded",
    "seconds", "model", "config_hash", "events",
)
METRICS_COLUMNS = ("run_date", "pipeline", "k", "metric", "value", "n_questions")
PER_QUESTION_COLUMNS = (
    "run_date", "pipeline", "k", "question_id", "hit", "recall", "precision", "rr", "ndcg",
    "unjudged", "first_relevant_rank", "top1_score", "retrieved", "gold_missing",
)
# threshold: the statistic's effect-size line, a margin; effect_from: the value that margin is measured from (the
# null's mean; for duplicates, the reference window's share), so that effect_from + threshold is the line on the
# value's own scale (pipeline/drift.py `value_line`).
DRIFT_COLUMNS = ("run_date", "statistic", "value", "reference_date", "n_reference", "n_current",
                 "reference_start", "current_start", "p_value", "null_value", "threshold", "verdict", "detail",
                 "effect_from")
ALERTS_COLUMNS = (
    "run_date", "rule", "pipeline", "metric", "value", "baseline", "change_pct", "threshold",
    "severity", "message", "since", "p_value",
)
# The label-free early warnings (pipeline/signals.py); question_id is empty on a per-run row.
SIGNALS_COLUMNS = ("run_date", "pipeline", "k", "question_id", "signal", "value")
# One row per configured target and run: ok, or failed and why (a failed target has no metric rows that day).
TARGETS_COLUMNS = ("run_date", "target", "kind", "status", "n_questions", "seconds", "message")

# The answer layer (see pipeline/answers/ and docs/answers.md).
GENERATION_COLUMNS = ("run_date", "pipeline", "source", "metric", "value", "n", "undetermined")
PER_ANSWER_COLUMNS = (
    "run_date", "pipeline", "question_id", "gold_in_context", "faithfulness", "faithfulness_state", "n_claims",
    "n_supported", "n_contradicted", "answer_relevance", "reverse_relevance", "noncommittal", "k_precision",
    "unsupported", "citations_invalid", "citation_missing", "refusal", "qa_cosine", "layer",
)
AGREEMENT_COLUMNS = ("run_date", "metric", "judge", "level", "n", "agreement", "kappa", "tpr", "fpr", "tp", "fp",
                     "fn", "tn", "trusted", "labels_file")

# One row per configured source and run, a source that brought nothing included (pipeline/source_health.py).
SOURCES_COLUMNS = ("run_date", "source", "new_items", "total_items", "last_new", "gap_days", "active_days",
                   "usual_gap_days", "first_new", "fetch_failed")

# The segments (pipeline/segments.py): a gold tag, or the source or category of a question's gold documents.
SEGMENTS = "segments.csv"  # each segment's metric means per run, pipeline and k, with its n
SEGMENT_QUESTIONS = "segment_questions.csv"  # which questions each segment held on the run
SEGMENTS_COLUMNS = ("run_date", "pipeline", "k", "segment", "metric", "value", "n_questions")
SEGMENT_QUESTIONS_COLUMNS = ("run_date", "segment", "question_id")
SEGMENT = "segment"

SCHEMAS: dict[str, tuple[str, ...]] = {
    RUNS: RUNS_COLUMNS,
    METRICS: METRICS_COLUMNS,
    PER_QUESTION: PER_QUESTION_COLUMNS,
    DRIFT: DRIFT_COLUMNS,
    ALERTS: ALERTS_COLUMNS,
    SIGNALS: SIGNALS_COLUMNS,
    TARGETS: TARGETS_COLUMNS,
    GENERATION: GENERATION_COLUMNS,
    PER_ANSWER: PER_ANSWER_COLUMNS,
    AGREEMENT: AGREEMENT_COLUMNS,
    SOURCES: SOURCES_COLUMNS,
    SEGMENTS: SEGMENTS_COLUMNS,
    SEGMENT_QUESTIONS: SEGMENT_QUESTIONS_COLUMNS,
}

# Columns appended to a file's contract after stores were written with it: a file whose header ends before them
# (written by an earlier driftwatch) is read with them empty, and the next run rewrites it with them
# (pipeline/store.py `upgrade`). Only ever appended at the end, so an old row is the new one minus empty fields.
# sources.csv: the source's first day with new items (its rate of new items is learned from it) and whether its fetch
# failed on the run (feeds_failed reports it; it is not also called silent).
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {DRIFT: ("effect_from",), SOURCES: ("first_new", "fetch_failed")}

# Column types: the columns not listed here are numbers (float).
TEXT_COLUMNS = frozenset({
    "run_id", "started_at", "finished_at", "status", "model", "config_hash", "events", "pipeline", "metric",
    "question_id", "retrieved", "statistic", "reference_date", "rule", "severity", "message", "reference_start",
    "current_start", "verdict", "detail", "since", "signal", "target", "kind", "source", "faithfulness_state",
    "unsupported", "citations_invalid", "layer", "judge", "level", "labels_file", "last_new", SEGMENT,
    "first_new"})
# The free-text columns that may carry a URL or an upstream reply: redacted on every write (pipeline/redact.py).
UPSTREAM_TEXT_COLUMNS = frozenset({"events", "message", "detail"})
INT_COLUMNS = frozenset({
    "feeds_ok", "feeds_failed", "docs_new", "docs_updated", "docs_deleted", "docs_total", "chunks_total",
    "chunks_embedded", "k", "n_questions", "first_relevant_rank", "gold_missing", "n_reference", "n_current",
    "new_items", "total_items", "active_days", "fetch_failed"})

# Column names that code selects on (the tuples above are the files' full contracts).
RUN_DATE = "run_date"
PIPELINE, K, METRIC, VALUE = "pipeline", "k", "metric", "value"
QUESTION_ID, FIRST_RANK, RETRIEVED = "question_id", "first_relevant_rank", "retrieved"
STATISTIC, REFERENCE_DATE, VERDICT = "statistic", "reference_date", "verdict"
THRESHOLD, EFFECT_FROM = "threshold", "effect_from"
RULE, SEVERITY, MESSAGE = "rule", "severity", "message"
EVENTS, DOCS_TOTAL = "events", "docs_total"
SOURCE, GOLD_IN_CONTEXT, LAYER = "source", "gold_in_context", "layer"
NEW_ITEMS, TOTAL_ITEMS, LAST_NEW, GAP_DAYS = "new_items", "total_items", "last_new", "gap_days"
ACTIVE_DAYS, USUAL_GAP_DAYS = "active_days", "usual_gap_days"
FIRST_NEW, FETCH_FAILED = "first_new", "fetch_failed"

# Longest document or question id accepted (characters): ids land in every CSV row and in messages.
MAX_ID_LENGTH = 512

# --- values: runs.csv and targets.csv ----------------------------------------------------------------------

# Run status values written to runs.csv.
STATUS_OK = "ok"
STATUS_DEGRADED = "degraded"  # some feeds failed
STATUS_NO_FEEDS = "no_feeds"  # every feed failed: evaluated on the corpus as it was
STATUS_PARTIAL = "partial"  # the run's deadline passed and left work undone (named in events); see job.run_day
# Target status values written to targets.csv.
TARGET_OK = "ok"
TARGET_FAILED = "failed"

# --- values: drift.csv (pipeline/drift.py defines how each is reached) --------------------------------------

# Verdicts.
DRIFTED = "drifted"  # significant after Holm over the run's statistics AND above its effect-size line
STABLE = "stable"
NOT_ENOUGH_DATA = "not_enough_data"  # too few new (or reference) chunks to say anything
CONTEXT = "context"  # shown beside the verdicts, not part of them (Evidently, top-1 cosine)

# Statistics with a null (the family a run's verdicts are corrected over), in drift.csv order.
PSI_MEAN = "psi_mean"  # mean PSI over the principal components
KS_MAX = "ks_max"  # largest KS distance over the components
CLASSIFIER_ACCURACY = "classifier_accuracy"  # kNN domain classifier (balanced, leave one out)
NOVEL_SHARE = "novel_share"  # new chunks with no close neighbour in the reference
DUPLICATE_SHARE = "duplicate_share"  # new chunks with a near copy elsewhere in the corpus
NEW_CATEGORY_SHARE = "new_category_share"  # new chunks in categories the reference lacks
NEW_SOURCE_SHARE = "new_source_share"  # new chunks from sources the reference lacks
# The documents' languages, current against reference (total variation of the shares; a G-test on documents).
LANGUAGE_SHARE = "language_share"
DRIFT_FAMILY = (PSI_MEAN, KS_MAX, CLASSIFIER_ACCURACY, NOVEL_SHARE, DUPLICATE_SHARE, NEW_CATEGORY_SHARE,
                NEW_SOURCE_SHARE, LANGUAGE_SHARE)
# Context statistics (verdict `context`).
EVIDENTLY_MODEL_AUC = "evidently_model_auc"  # Evidently's own bootstrap decides its flag
EVIDENTLY_DRIFTED = "evidently_drifted"
TOP1_COSINE = "top1_cosine"  # per dense pipeline
# What came in with a drifted window (pipeline/shifts.py), only on a run whose corpus window drifted: the share of
# its new documents holding a top term, and in `detail` the top terms, languages, new categories and sources.
NAMED_SHIFT = "named_shift"
QUERY_PREFIX = "query_"  # the query log's statistics: this prefix and a corpus statistic's name

# --- values: alerts.csv -------------------------------------------------------------------------------------

# Rule names (`rule`).
DROP = "drop"
SLOW_DRIFT = "slow_drift"
FLOOR = "floor"
DRIFT_RULE = "drift"  # the verdicts of drift.csv (DRIFT is that file's name)
DELETED = "deleted"
CONFIG_CHANGE = "config_change"
GOLD_MISSING = "gold_missing"
FEEDS_FAILED = "feeds_failed"
TARGETS_FAILED = "targets_failed"
SOURCE_SILENT = "source_silent"  # a source without a new item for longer than its usual gap (pipeline/source_health.py)
SOURCE_SPIKE = "source_spike"  # a source's new items far above its history
# The drop and slow-drift rules over a segment's questions (pipeline/segments.py; Holm over segments and series).
SEGMENT_DROP = "segment_drop"
SEGMENT_SLOW_DRIFT = "segment_slow_drift"
SEGMENT_RULES = (SEGMENT_DROP, SEGMENT_SLOW_DRIFT)
RULES = (DROP, SLOW_DRIFT, FLOOR, DRIFT_RULE, DELETED, CONFIG_CHANGE, GOLD_MISSING, FEEDS_FAILED, TARGETS_FAILED,
         SOURCE_SILENT, SOURCE_SPIKE, *SEGMENT_RULES)

# Severities (`severity`), least severe first.
WARNING = "warning"
ALERT = "alert"
SEVERITIES = (WARNING, ALERT)

CORPUS_WIDE = ""  # the `pipeline` of alerts that concern the corpus or the run, not one pipeline
CORPUS_METRIC = "corpus"  # the `metric` of the drift alert (its statistics are named in the message)

# --- segments (pipeline/segments.py): a gold tag, or the source or category of a question's gold documents ------
# (their files and columns are with the others above)

# A segment's name is its kind and its value: "tag:paraphrase", "source:peps", "category:Standards Track".
SEGMENT_TAG, SEGMENT_SOURCE, SEGMENT_CATEGORY = "tag", "source", "category"
SEGMENT_KINDS = (SEGMENT_TAG, SEGMENT_SOURCE, SEGMENT_CATEGORY)

# --- the canary (pipeline/canary.py): a candidate target against the target it would replace -------------------

CANARY = "canary.csv"  # per run, candidate and headline metric at default_k: the paired per-question difference
CANARY_COLUMNS = ("run_date", "candidate", "against", "metric", "k", "n_questions", "mean_diff", "ci_low", "ci_high",
                  "p_value")
SCHEMAS[CANARY] = CANARY_COLUMNS
CANDIDATE, AGAINST, N_QUESTIONS = "candidate", "against", "n_questions"
MEAN_DIFF, CI_LOW, CI_HIGH, P_VALUE = "mean_diff", "ci_low", "ci_high", "p_value"
TEXT_COLUMNS = TEXT_COLUMNS | {CANDIDATE, AGAINST}
TARGET = "target"  # targets.csv's column naming the target (a candidate's rows there never page either)

# --- index health of a vector store read as a corpus (pipeline/index_health.py) -----------------------------------

INDEX_HEALTH = "index_health.csv"  # one row per store, run and finding: its count and a few examples
INDEX_HEALTH_COLUMNS = ("run_date", "store", "finding", "count", "n_records", "examples")
SCHEMAS.update({INDEX_HEALTH: INDEX_HEALTH_COLUMNS})
STORE, FINDING, COUNT, N_RECORDS, EXAMPLES = "store", "finding", "count", "n_records", "examples"
TEXT_COLUMNS = TEXT_COLUMNS | {STORE, FINDING, EXAMPLES}
INT_COLUMNS = INT_COLUMNS | {COUNT, N_RECORDS}
# Findings (`finding`): records since the store's previous snapshot, then what is wrong with the records.
FOUND_ADDED, FOUND_DELETED, FOUND_CHANGED = "added", "deleted", "changed"
GHOST = "ghost"  # records of documents the corpus (the configured sources) does not hold on the run date
STALE = "stale"  # the stored text changed but the vector did not, or its re-embedding is far from the vector
MIXED_GENERATIONS = "mixed_generations"  # records outside the collection's main embedding generation
GOLD_ABSENT = "gold_absent"  # gold documents without a record in the store
FINDINGS = (FOUND_ADDED, FOUND_DELETED, FOUND_CHANGED, GHOST, STALE, MIXED_GENERATIONS, GOLD_ABSENT)
# The rule naming each finding that is a problem (alerts.csv `rule`; its `pipeline` is the store, `metric` the finding).
INDEX_GHOST, INDEX_STALE = "index_ghost", "index_stale"
INDEX_MIXED_GENERATIONS, INDEX_GOLD_MISSING = "index_mixed_generations", "index_gold_missing"
INDEX_RULES = {GHOST: INDEX_GHOST, STALE: INDEX_STALE, MIXED_GENERATIONS: INDEX_MIXED_GENERATIONS,
               GOLD_ABSENT: INDEX_GOLD_MISSING}
RULES = (*RULES, *INDEX_RULES.values())

# --- the judging loop (pipeline/judging/): the pool, the judgments ledger, the maintained qrels --------------------

# The pool: per run, the unjudged documents in any target's top `[judging] pool_depth`, with why each is there. One row
# per run, question, document and reason; `pipeline` lists the targets that ranked it (space separated), `rank` is its
# best rank among them (1-based; 0 for a gold document that left the corpus); `gold_doc_id` names the gold document the
# reason concerns (outranked, shadowed, changed, deleted); `content_hash` is the document's text hash on the run date
# (empty for a deleted one): a judgment holds for that text only; `detail` is the shadow's differing sentences.
POOL = "pool.csv"
POOL_COLUMNS = ("run_date", "question_id", "doc_id", "reason", "pipeline", "rank", "gold_doc_id", "content_hash",
                "detail")
SCHEMAS[POOL] = POOL_COLUMNS
DOC_ID, REASON, RANK, GOLD_DOC_ID, CONTENT_HASH, DETAIL = (
    "doc_id", "reason", "rank", "gold_doc_id", "content_hash", "detail")
TEXT_COLUMNS = TEXT_COLUMNS | {DOC_ID, REASON, GOLD_DOC_ID, CONTENT_HASH}
INT_COLUMNS = INT_COLUMNS | {RANK}
# `reason`: why a document is in the pool.
NEW_IN_TOP_K = "new_in_top_k"  # unjudged, and not in the question's top pool_depth on the previous run
OUTRANKS_GOLD = "outranks_gold"  # unjudged, and ranked above a gold document of the question
SHADOW = "shadow"  # a near copy of a gold document whose text differs from it (a changed fact)
GOLD_CHANGED = "gold_changed"  # the gold document's own text changed since it was judged (or since the first run)
GOLD_DELETED = "gold_deleted"  # the gold document left the corpus
POOL_REASONS = (NEW_IN_TOP_K, OUTRANKS_GOLD, SHADOW, GOLD_CHANGED, GOLD_DELETED)
# The warning of a shadow that outranks its gold document on the run (alerts.csv `rule`; `pipeline` the target).
GOLD_SHADOWED = "gold_shadowed"
RULES = (*RULES, GOLD_SHADOWED)

# The judgments ledger: append-only JSONL in the data directory, one judgment a line (pipeline/judging/ledger.py).
JUDGMENTS = "judgments.jsonl"
JUDGMENT_KEYS = ("question_id", "doc_id", "grade", "judge", "time", "content_hash")
JUDGMENT_GRADES = (0, 1, 2)  # as the gold set grades: 0 not relevant, 1 relevant, 2 highly relevant
LLM_JUDGE_PREFIX = "llm:"  # judge "llm:<model>": a suggestion, never counted as a human judgment
# Drafted questions for new documents (pipeline/judging/questions.py): append-only JSONL, the latest line of an id wins;
# `provenance` generated (drafted, not reviewed), reviewed (accepted in review), rejected, or human (written by a
# person). Accepted questions (reviewed or human) join the maintained qrels from the day they are accepted: the run
# searches them with the gold set and writes their rows to added_per_question.csv (per_question.csv's columns), so the
# frozen per_question.csv and its series never change.
QUESTIONS = "questions.jsonl"
PROVENANCE_GENERATED, PROVENANCE_REVIEWED, PROVENANCE_REJECTED, PROVENANCE_HUMAN = (
    "generated", "reviewed", "rejected", "human")
PROVENANCES = (PROVENANCE_GENERATED, PROVENANCE_REVIEWED, PROVENANCE_REJECTED, PROVENANCE_HUMAN)
PROVENANCES_ACCEPTED = (PROVENANCE_REVIEWED, PROVENANCE_HUMAN)
# A questions.jsonl line: `id` ("q-" and a hash: never a gold id), the `question`, its source document (`doc_id`,
# `content_hash` of the text it was drafted from), `run_date` (the date the document was first seen), `provenance`,
# `time` (UTC, when the line was written), `judge` (the drafting model as llm:<model>, or the reviewer), and the round
# trip: `retriever` (tfidf-documents), `found_rank` (the source document's rank for the question, null when not in
# its top 10) and `flagged` (not found: kept, but shown as such in review).
QUESTION_KEYS = ("id", "question", "doc_id", "content_hash", "run_date", "provenance", "time", "judge", "retriever",
                 "found_rank", "flagged")
ADDED_PER_QUESTION = "added_per_question.csv"
SCHEMAS[ADDED_PER_QUESTION] = PER_QUESTION_COLUMNS
# The maintained qrels (pipeline/judging/qrels.py): the frozen gold set plus the humans' latest judgments and the
# accepted drafted questions. Each distinct content (its hash) is a version; qrels_versions.csv gains a row when the
# maintained qrels change and never rewrites one. Its `run_date` is the latest run date of the history when the
# version was made (the first run date whose series it scored), so the file stays sorted by date as every CSV of the
# store; `created` the time (UTC) it was recorded; `n_questions` the questions, `n_judgments` the human judgments
# applied, `n_relevant` the (question, document) pairs graded relevant; `qrels_hash` the SHA-256 of its sorted content.
QRELS_VERSIONS = "qrels_versions.csv"
QRELS_VERSIONS_COLUMNS = ("run_date", "version", "created", "n_questions", "n_judgments", "n_relevant", "qrels_hash")
# The maintained series: every metric of metrics.csv per run date, pipeline and k, re-scored over the whole history
# from the stored rankings (per_question.csv `retrieved`, and added_per_question.csv's rows) with the current maintained
# qrels; `version` names the qrels version that scored it. Rewritten whole when the qrels change.
MAINTAINED_METRICS = "maintained_metrics.csv"
MAINTAINED_METRICS_COLUMNS = (*METRICS_COLUMNS, "version")
SCHEMAS.update({QRELS_VERSIONS: QRELS_VERSIONS_COLUMNS, MAINTAINED_METRICS: MAINTAINED_METRICS_COLUMNS})
VERSION, CREATED, N_JUDGMENTS, N_RELEVANT, QRELS_HASH = "version", "created", "n_judgments", "n_relevant", "qrels_hash"
TEXT_COLUMNS = TEXT_COLUMNS | {CREATED, QRELS_HASH}
INT_COLUMNS = INT_COLUMNS | {VERSION, N_JUDGMENTS, N_RELEVANT}

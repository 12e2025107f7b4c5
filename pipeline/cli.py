"""The command line: `driftwatch run|backfill ...` (or `python -m pipeline ...`); domain errors become one message
and an exit code."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path

from pipeline import contract, redact
from pipeline.config import PIPELINES, load_config, require_sources
from pipeline.errors import DriftwatchError
from pipeline.metrics import HEADLINE, default_k, series_name
from pipeline.simulate import SCENARIOS
from pipeline.store import LockError

EXIT_OK = 0
EXIT_ALERT = 1
EXIT_BAD_INPUT = 2
EXIT_LOCKED = 3
EXIT_PIPE_CLOSED = 141  # the reader of stdout went away (`... | head`): as a shell reports a process SIGPIPE ended

_BAD_INPUT = (DriftwatchError,)  # every domain error: one message, exit 2
DASHBOARD_PORT = 8501  # Streamlit's own default
DASHBOARD_ADDRESS = "server.address"  # the option of .streamlit/config.toml the dashboard is served on
# The README quick start's dashboard command (tests/test_docs.py checks it is there): the demo names it when it was
# built, from the checkout's root, where that command reads.
CHECKOUT_DASHBOARD = "streamlit run app.py"
DEMO_DATA_DIR = "data/demo-store"  # relative to the working directory, like every path given on the command line

log = logging.getLogger("pipeline")


def _date(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {value!r}") from None


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $DRIFTWATCH_CONFIG, then ./monitor.toml)")
    parser.add_argument("--data-dir", help="data directory, overriding the config's data_dir")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")


def prog() -> str:
    """How driftwatch was invoked, for help and hints: the installed command or `python -m pipeline`."""
    return "driftwatch" if Path(sys.argv[0]).name == "driftwatch" else "python -m pipeline"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog(),
                                     description="driftwatch: retrieval-quality drift monitor for RAG systems.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="the daily job: ingest, index, evaluate the gold set, write the series",
                         description="Ingest the feeds, index the corpus, evaluate every pipeline at every k and "
                                     "write runs.csv, metrics.csv and per_question.csv for one date "
                                     "(re-running a date replaces its rows).")
    run.add_argument("--date", type=_date, default=None, help="run date (default: today, UTC)")
    run.add_argument("--event", default="", help="a note stored with the run in runs.csv (e.g. 'new chunker')")
    run.add_argument("--fail-on-alert", action="store_true",
                     help="exit 1 when an alert of severity 'alert' fired in this run")
    run.add_argument("--accept-edits", action="store_true",
                     help="trust the store's files as they are, even if edited outside driftwatch since the last "
                          "run (the run names the edits in its events); see accept-edits")
    _common(run)

    back = sub.add_parser("backfill", help="one run per day over a range of dates (dated sources replay history)",
                          description="Run the daily job for every date from --start to --end inclusive.")
    back.add_argument("--start", type=_date, required=True, help="first date (YYYY-MM-DD)")
    back.add_argument("--end", type=_date, required=True, help="last date (YYYY-MM-DD)")
    back.add_argument("--fail-on-alert", action="store_true",
                      help="exit 1 when an alert of severity 'alert' fired in any of the runs")
    _common(back)

    rebase = sub.add_parser("rebaseline", help="pin the drift statistics' reference window to end on a date",
                            description="Make the chunks that entered in the drift.reference_days days up to --date "
                                        "the reference window that every later run's new chunks are compared with "
                                        "(instead of the rolling days just before each run's window).")
    rebase.add_argument("--date", type=_date, required=True, help="the reference window's last day (YYYY-MM-DD)")
    _common(rebase)

    gate = sub.add_parser("eval", help="the CI gate: evaluate a gold set over documents, compare with a baseline",
                          description="Evaluate every configured pipeline on --gold over exactly --docs, print a "
                                      "table, write a JSON report; exit 1 when a gated pipeline's recall@k is below "
                                      "the minimum, a metric of it dropped more than --max-drop against --baseline, "
                                      "or a value it needs is NaN; exit 2 when the baseline cannot be compared "
                                      "(another k, gold set or document set).")
    gate.add_argument("--gold", required=True, help="gold set (JSONL)")
    gate.add_argument("--docs", nargs="+", default=[],
                      help="feed files or folders of feed files (for the builtin pipelines; an external target "
                           "answers from its own index)")
    gate.add_argument("--target", action="append", default=None,
                      help="a target of --config to evaluate and gate (repeatable; default: every builtin pipeline)")
    gate.add_argument("--date", type=_date, default=None,
                      help="the date whose logged results a runs target reads (default: today)")
    gate.add_argument("--k", type=int, default=None,
                      help="the cutoff the gate judges (default: the config's default k, the largest retrieval.k "
                           "not above 5, else the smallest: 5 with the default k)")
    gate.add_argument("--pipeline", action="append", choices=PIPELINES, default=None,
                      help="a pipeline to gate (repeatable; default: every pipeline evaluated or in the baseline)")
    gate.add_argument("--min-recall-at-k", type=float, default=None, help="minimum recall@k of each gated pipeline")
    gate.add_argument("--max-drop", type=float, default=None,
                      help="largest allowed absolute drop of any metric@k of a gated pipeline against the baseline")
    gate.add_argument("--baseline", default=None, help="a report from an earlier eval (e.g. of the main branch)")
    gate.add_argument("--baseline-optional", action="store_true",
                      help="a missing --baseline file skips the drop check instead of exiting 2 (a first run)")
    gate.add_argument("--generation", action="store_true",
                      help="also run the answer layer of [generation] (logged or generated answers, the judge); "
                           "for a schedule or on demand, not every pull request")
    gate.add_argument("--min-faithfulness", type=float, default=None,
                      help="minimum judged faithfulness of the answers (with --generation; only a trusted judge gates)")
    gate.add_argument("--min-answer-relevance", type=float, default=None,
                      help="minimum judged answer relevance (with --generation; only a trusted judge gates)")
    gate.add_argument("--min-k-precision", type=float, default=None,
                      help="minimum K-precision of the answers (with --generation; the offline heuristic)")
    gate.add_argument("--out", default=None, help="where to write this run's JSON report")
    gate.add_argument("--work-dir", default=None,
                      help="keep the embedding cache here between runs (each run scores only its --docs)")
    gate.add_argument("--config", help="settings (default ./monitor.toml if present, else built-in defaults)")
    gate.add_argument("-v", "--verbose", action="store_true", help="log debug detail")

    demo = sub.add_parser("demo", help="build the bundled demo history (a month of daily news with a drift event)",
                          description="Backfill the bundled demo corpus into its own data directory: daily runs "
                                      "from 2026-10-24, with near-duplicate and off-topic documents flowing in "
                                      "from the drift day. Other settings come from --config when it exists.")
    demo.add_argument("--days", type=int, default=30, help="number of daily runs (1-30, default 30)")
    demo.add_argument("--drift-day", type=_date, default=None, help="when the drift packs start (default 2026-11-13)")
    demo.add_argument("--data-dir", default=DEMO_DATA_DIR, help=f"where to build it (default {DEMO_DATA_DIR})")
    demo.add_argument("--config", help="settings to use (default ./monitor.toml if present, else built-in defaults)")
    demo.add_argument("-v", "--verbose", action="store_true", help="log debug detail")

    docs = sub.add_parser("documents", help="list the corpus's documents and their ids, for writing a gold set",
                          description="List the documents of the data directory's corpus (title, source, date, "
                                      "id) as it stood on --date (default: the last run), newest first: the ids "
                                      "to put in gold.jsonl's relevant lists.")
    docs.add_argument("--search", default=None, metavar="TEXT", help="only documents whose title or text holds TEXT (any case)")
    docs.add_argument("--date", type=_date, default=None, metavar="D", help="the corpus as of this run date (default: the last)")
    docs.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    _common(docs)

    sim = sub.add_parser("simulate", help="run a drift scenario in a sandbox copy of a data directory",
                         description="Copy a data directory (never written) into --out, apply a scenario on "
                                     "--date and re-run every later date there, for side-by-side comparison.")
    sim.add_argument("--scenario", required=True, choices=SCENARIOS, help="what to simulate")
    sim.add_argument("--out", required=True, help="the sandbox directory (new, empty, or an earlier sandbox)")
    sim.add_argument("--date", type=_date, default=None,
                     help="the day the change happens (default: the alert window's length in runs before the "
                          "source's last run, so that the rules can answer)")
    sim.add_argument("--n", type=int, default=40, help="offtopic / near-duplicates: documents to inject")
    sim.add_argument("--pack", default=None,
                     help="inject: a feed file (RSS, Atom or JSON Feed) whose every entry is injected")
    sim.add_argument("--share", type=float, default=None, help="delete: share of the documents to remove")
    sim.add_argument("--before", type=_date, default=None, help="delete: remove documents published before it")
    sim.add_argument("--model", default=None, help="embedder: another model name or folder")
    sim.add_argument("--truncate-dim", type=int, default=None, help="embedder: keep the first N dimensions")
    sim.add_argument("--seed", type=int, default=0, help="seed for sampled documents")
    sim.add_argument("--metric", default="recall", help="the metric compared in the printed table")
    _common(sim)
    sim.set_defaults(data_dir=None)

    rep = sub.add_parser("report", help="the weekly review as a self-contained HTML file",
                         description="Write one ISO week's review (each metric's weekly mean against the previous "
                                     "week, the alerts fired, the most regressed questions, corpus changes) as a "
                                     "self-contained HTML file: the same file the dashboard's Weekly review "
                                     "page downloads.")
    rep.add_argument("--week", default=None, help="ISO week, e.g. 2026-W48 (default: the latest week with runs)")
    rep.add_argument("--out", default=None,
                     help="the HTML file to write (default: reports/review-<week>.html in the data directory)")
    _common(rep)

    evr = sub.add_parser("evidently-report", help="a run's drift window as an Evidently HTML report",
                         description="Build an Evidently report of the run on --date: the embedding drift by "
                                     "Evidently's domain classifier on the same rows and vectors the run gave it "
                                     "(its score is the run's evidently_model_auc), the column drift of the "
                                     "window's composition (sources, categories, document lengths) and the run's "
                                     "retrieval metrics against the week before. Needs evidently "
                                     "(pip install 'driftwatch[evidently]'). Exit 2 when there is no such run.")
    evr.add_argument("--date", type=_date, required=True, help="the run date, YYYY-MM-DD")
    evr.add_argument("--out", default=None,
                     help="the HTML file to write (default: reports/evidently-<date>.html in the data directory)")
    _common(evr)

    init = sub.add_parser("init", help="write a starter monitor.toml and gold set, print the cron line and workflow",
                          description="Write a commented monitor.toml (every key with its default) and a "
                                      "three-question gold.jsonl template into DIR, then print the crontab line of "
                                      "the daily job and a GitHub Actions workflow for the gate. Existing files are "
                                      "not overwritten (exit 2) unless --force.")
    init.add_argument("dir", nargs="?", default=".", help="where to write them (default: the current directory)")
    init.add_argument("--force", action="store_true", help="overwrite monitor.toml and gold.jsonl if they exist")
    init.add_argument("-v", "--verbose", action="store_true", help="log debug detail")

    chk = sub.add_parser("check", help="validate a config and reach every source once, writing nothing",
                         description="Validate the config, the gold set and the data directory's files, reach every "
                                     "source (and target) once within the fetch deadline, locate the models and "
                                     "report which gold document ids the sources carry. Writes no series and "
                                     "leaves the data directory untouched. Exit 0 when all is well, 1 when a source "
                                     "is unreachable or a gold id is missing, 2 on a bad config.")
    _common(chk)

    acc = sub.add_parser("accept-edits", help="trust the data directory's files as they are after edits made by hand",
                         description="A run refuses (exit 2) a store whose CSV files changed since the last finished "
                                     "run sealed them, naming each file and its dates. After looking at them, this "
                                     "checks every changed file, moves rows without a runs.csv row to the "
                                     "quarantine, and seals the store as it is; the next run names the accepted "
                                     "edits in its events. Exit 2 when a changed file breaks the CSV contract.")
    _common(acc)

    exp = sub.add_parser("export", help="publish stored runs to the [export.*] exporters (MLflow, Prometheus, whylogs, "
                                        "Evidently)",
                         description="Push the stored series of the runs from --start to --end (default: every run) "
                                     "to each exporter the config enables: MLflow (a date already logged is "
                                     "rebuilt, never duplicated), the Prometheus textfile (the latest run), the "
                                     "whylogs profiles and the Evidently workspace (a date's snapshot replaced). "
                                     "Exit 1 when an exporter failed.")
    exp.add_argument("--start", type=_date, default=None, help="first run date (default: the first run)")
    exp.add_argument("--end", type=_date, default=None, help="last run date (default: the latest run)")
    _common(exp)

    metrics = sub.add_parser("serve-metrics", help="serve the latest run's series as Prometheus metrics over HTTP",
                             description="Serve /metrics (the Prometheus text format, the same gauges as "
                                         "[export.prometheus]) from the data directory of --data-dir or the config, "
                                         "read again on every scrape, until interrupted.")
    metrics.add_argument("--port", type=int, required=True, help="the port to listen on")
    metrics.add_argument("--addr", default="127.0.0.1",
                         help="the address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    _common(metrics)

    judge = sub.add_parser("judge", help="judge the pooled documents in the terminal; import or list judgments",
                           description="Serve the judging queue (pool.csv minus what a human judged, "
                                       "judgments.jsonl) in the terminal: each question with its gold document "
                                       "beside the candidate, shared word runs marked; answer 0, 1 or 2 (the "
                                       "grade), s (skip) or q (quit) on stdin. --import adds judgments made "
                                       "elsewhere; --queue lists the queue.")
    judge.add_argument("--judge", default=None, metavar="NAME", help="your name, recorded with each grade")
    mode = judge.add_mutually_exclusive_group()
    mode.add_argument("--import", dest="import_file", default=None, metavar="FILE",
                      help='a JSONL file of judgments ({"question_id", "doc_id", "grade", "judge"} a line), '
                           "validated whole before any is appended")
    mode.add_argument("--queue", action="store_true", help="list the queue (a table; --json: one object a line)")
    judge.add_argument("--json", action="store_true", help="with --queue: one JSON object a line")
    _common(judge)

    pre = sub.add_parser("prelabel", help="suggest a grade for each queued pair with the judging LLM (never a human "
                                          "judgment)",
                         description="Grade each pair of the judging queue that has no suggestion of [judging] model "
                                     "on the text shown, with a graded relevance prompt in the style of UMBRELA (0-3, "
                                     "mapped to the grades 0, 0, 1, 2), appended to judgments.jsonl as judge "
                                     "llm:<model>: a suggestion the Judge page shows, never a human judgment (the "
                                     "queue keeps the pair). Then the kappa of the suggestions with the human "
                                     "judgments of the same texts. The model must not be one a monitored pipeline "
                                     "uses. Exit 0 when some pair was labelled (or none was left to label), 1 when "
                                     "every pair tried failed (the endpoint unreachable or its replies unreadable), "
                                     "2 on a bad config.")
    pre.add_argument("--limit", type=int, default=None, metavar="N", help="label at most N pairs (default: all)")
    _common(pre)

    sug = sub.add_parser("suggest-questions", help="draft questions for a date's new documents with the judging LLM; "
                                                   "list, accept or reject drafts",
                         description="--date D: draft one question per document first seen on D (short items too) "
                                     "with [judging] model, drop the drafts that duplicate a gold question (the same "
                                     "text, or an embedding cosine of at least [judging] duplicate_cosine), check "
                                     "that each finds its document with a TF-IDF over the corpus (tfidf-documents; "
                                     "not in its top 10: kept but flagged) and append them to questions.jsonl as "
                                     "generated. --list shows the drafts; --accept ID / --reject ID with --judge "
                                     "NAME review one (accepted questions join the maintained qrels: "
                                     "added_per_question.csv from the next run). Exit 1 when every draft failed.")
    what = sug.add_mutually_exclusive_group(required=True)
    what.add_argument("--date", type=_date, default=None, help="draft questions for the documents first seen on it")
    what.add_argument("--list", action="store_true", help="list the drafted questions and their review")
    what.add_argument("--accept", default=None, metavar="ID", help="accept a drafted question (with --judge)")
    what.add_argument("--reject", default=None, metavar="ID", help="reject a drafted question (with --judge)")
    what.add_argument("--write", default=None, metavar="QUESTION",
                      help="add a question you wrote for --doc DOC_ID (with --judge; provenance human: accepted)")
    sug.add_argument("--doc", default=None, metavar="DOC_ID", help="with --write: the document that answers it")
    sug.add_argument("--judge", default=None, metavar="NAME", help="your name, recorded with the review")
    sug.add_argument("--json", action="store_true", help="with --list: one JSON object a line")
    _common(sug)

    rescore = sub.add_parser("rescore", help="re-score the whole history with the maintained qrels now",
                             description="Re-score every stored run date (per_question.csv's retrieved lists; no "
                                         "retrieval runs again) with the maintained qrels (the gold set plus the "
                                         "human judgments of judgments.jsonl), writing maintained_metrics.csv and, "
                                         "when the qrels changed, a qrels_versions.csv row; prints the version, the "
                                         "dates and the seconds. The daily run does the same incrementally.")
    rescore.add_argument("--accept-edits", action="store_true",
                         help="trust CSVs edited outside driftwatch since the last run (see accept-edits)")
    _common(rescore)

    dash = sub.add_parser("dashboard", aliases=["app"],
                          help="serve the dashboard to this machine only (the installed app.py, from any directory)",
                          description="Serve the Streamlit dashboard (app.py of the repository or of the installed "
                                      "copy) on PORT of the address in its .streamlit/config.toml (this machine "
                                      "only), with that file's settings, headless, over the data directory of "
                                      "--data-dir, $DRIFTWATCH_DATA_DIR or the config (--config, "
                                      "$DRIFTWATCH_CONFIG, ./monitor.toml), until interrupted. `app` is the same "
                                      "command under its old name.")
    dash.add_argument("--port", type=int, default=DASHBOARD_PORT,
                      help=f"the port to serve on (default {DASHBOARD_PORT})")
    dash.add_argument("streamlit_args", nargs="*", metavar="-- STREAMLIT_OPTION",
                      help="options passed on to streamlit run, after --, e.g. -- --theme.base dark")
    _common(dash)
    return parser


def _summary(result) -> str:
    """A small table of the run's means: one row per pipeline, the headline metrics at the default k."""
    run = result.run
    lines = [(f"{run['run_date']}: {run['status']}, feeds ok {run['feeds_ok']} failed {run['feeds_failed']}, "
              f"docs +{run['docs_new']} ~{run['docs_updated']} -{run['docs_deleted']} = {run['docs_total']}, "
              f"chunks {run['chunks_total']} ({run['chunks_embedded']} embedded), {run['seconds']:.1f}s")]
    if not result.metrics:  # the deadline stopped the run before its evaluation (partial), or every target failed
        return "\n".join([*lines, "  no metrics" + (f": {run['events']}" if run["events"] else "")])
    k = default_k(row["k"] for row in result.metrics)
    pipelines = list(dict.fromkeys(row["pipeline"] for row in result.metrics))
    widths = [max(9, len(series_name(m, k)) + 3) for m in HEADLINE]
    lines.append(f"  {'pipeline':<14}" + "".join(f"{series_name(m, k):>{w}}" for m, w in zip(HEADLINE, widths)))
    for p in pipelines:
        lines.append(f"  {p:<14}" + "".join(f"{result.mean(p, m, k):>{w}.3f}" for m, w in zip(HEADLINE, widths)))
    return "\n".join(lines)


def _signal_lines(result) -> list[str]:
    """The run's label-free early warnings per pipeline, the targets that could not be scored, and the answer
    layer's means."""
    from pipeline import answers
    from pipeline.signals import summary

    lines = [f"  target {o.name} FAILED: {o.message}" for o in result.failed_targets]
    if result.answers is not None:
        lines.append(f"  answers: {answers.summary(result.answers)}")
    defined = {p: ", ".join(f"{name} {value:.3f}" for name, value in values.items() if value == value)
               for p, values in summary(result.signals).items()}
    defined = {p: text for p, text in defined.items() if text}  # a first run has no earlier run to compare with
    if defined:
        lines.append("  early warnings: " + "; ".join(f"{p} {text}" for p, text in defined.items()))
    return lines


def _alert_lines(results) -> list[str]:
    return [f"  {a.severity.upper()} [{a.rule}] {a.message}" for r in results for a in r.alerts]


def _exit(results, fail_on_alert: bool) -> int:
    from pipeline.alerts import has_alerts

    return EXIT_ALERT if fail_on_alert and any(has_alerts(r.alerts) for r in results) else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from pipeline.job import run_day

    config = load_config(args.config, data_dir=args.data_dir)
    require_sources(config)
    day = args.date or date.today()
    result = run_day(config, day, events=args.event, accept_edits=args.accept_edits)
    print(_summary(result))
    if lines := _signal_lines(result):
        print("\n".join(lines))
    print("\n".join(_alert_lines([result]) or ["  no alerts"]))
    if result.notified is False:
        print("  the webhook notification failed (see the log); the alerts are in alerts.csv")
    print(f"series written to {config.data_dir}")
    return _exit([result], args.fail_on_alert)


def _rebaseline(args: argparse.Namespace) -> int:
    from pipeline import store
    from pipeline.corpus import Corpus
    from pipeline.windows import Window, entered

    config = load_config(args.config, data_dir=args.data_dir)
    window = Window(args.date - timedelta(days=config.drift.reference_days), args.date)
    with store.run_lock(config.data_dir), Corpus.in_dir(config.data_dir) as corpus:
        n = len(entered(corpus, window))
        if n == 0:
            first, last = window.describe()
            print(f"error: no documents entered the corpus in {config.data_dir} from {first} to {last}",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        store.write_reference(config.data_dir, args.date)
    first, last = window.describe()
    print(f"drift reference pinned to the documents new from {first} to {last} ({n} documents); "
          "the next run compares its new chunks with them")
    return EXIT_OK


def _config_file(path_arg: str | None) -> Path | None:
    """--config, else $DRIFTWATCH_CONFIG or ./monitor.toml when present, else None."""
    from pipeline.config import DEFAULT_CONFIG_FILE, ENV_CONFIG

    path = Path(path_arg or os.environ.get(ENV_CONFIG) or DEFAULT_CONFIG_FILE)
    return path if path_arg or path.exists() else None


def _base_config(path_arg: str | None):
    """The config of `_config_file`, else the built-in defaults."""
    from pipeline.config import Config

    path = _config_file(path_arg)
    return load_config(path) if path else Config(data_dir=Path(), gold=Path())


def _baseline(args: argparse.Namespace):
    """The --baseline report; None without one, or when it is missing and --baseline-optional says that is fine."""

    from pipeline.gate import load_report

    if not args.baseline:
        return None
    if args.baseline_optional and not Path(args.baseline).exists():
        print(f"note: no baseline report at {args.baseline} (--baseline-optional): nothing to compare with")
        return None
    return load_report(Path(args.baseline))


def _eval(args: argparse.Namespace) -> int:
    import json

    from pipeline.gate import evaluate_documents, judge, table

    if args.k is not None and args.k <= 0:
        print(f"error: --k must be > 0, got {args.k}", file=sys.stderr)
        return EXIT_BAD_INPUT
    baseline = _baseline(args)
    if not args.docs and not args.target:
        print("error: give --docs (the builtin pipelines) and/or --target NAME (a target of --config)", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = _base_config(args.config)
    k = args.k if args.k is not None else default_k(config.retrieval.k)
    report = evaluate_documents(config, Path(args.gold), [Path(d) for d in args.docs], k,
                                Path(args.work_dir) if args.work_dir else None, targets=args.target,
                                run_date=args.date, generation=args.generation)
    print(table(report, baseline))
    minimums = {m: v for m, v in (("faithfulness", args.min_faithfulness), ("answer_relevance", args.min_answer_relevance),
                                  ("k_precision", args.min_k_precision)) if v is not None}
    verdict = judge(report, min_recall=args.min_recall_at_k, max_drop=args.max_drop, baseline=baseline,
                    pipelines=args.pipeline or args.target, answer_minimums=minimums)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"report written to {args.out}")
    print("\n".join([*(f"ok: {c}" for c in verdict.checked), *(f"note: {n}" for n in verdict.notes),
                     *(f"FAIL: {r}" for r in verdict.reasons)]))
    counts = f"{len(verdict.checked)} checks passed, {len(verdict.reasons)} failed"
    print(f"gate passed ({counts})" if verdict.passed else f"gate failed ({counts})")
    return EXIT_OK if verdict.passed else EXIT_ALERT


@contextmanager
def _progress(total: int, desc: str) -> Iterator[Callable[[object], None]]:
    """The callback for each finished run: a tqdm bar on a terminal, else one plain line per run on stderr
    (a bar's carriage returns would make a cron log one endless line)."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        with tqdm(total=total, unit="day", desc=desc) as bar:
            def advance(result) -> None:
                bar.set_postfix_str(_progress_note(result))
                bar.update(1)
            yield advance
        return
    done = 0

    def line(result) -> None:
        nonlocal done
        done += 1
        print(f"{desc} {done}/{total}: {_progress_note(result)}", file=sys.stderr, flush=True)
    yield line


def _progress_note(result) -> str:
    return f"{result.run_date} docs={result.run['docs_total']}"


def _backfill(args: argparse.Namespace) -> int:
    from pipeline.job import backfill, date_range

    if args.end < args.start:
        print(f"error: --end {args.end} is before --start {args.start}", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = load_config(args.config, data_dir=args.data_dir)
    require_sources(config)
    days = date_range(args.start, args.end)
    with _progress(len(days), "backfill") as progress:
        results = backfill(config, args.start, args.end, progress=progress)
    print(_summary(results[-1]))
    if lines := [f"{r.run_date}: {line}" for r in results[:-1] for line in _signal_lines(r) if "FAILED" in line] \
            + _signal_lines(results[-1]):
        print("\n".join(lines))
    print("\n".join(_alert_lines(results) or ["  no alerts"]))
    print(f"{len(results)} runs written to {config.data_dir}")
    return _exit(results, args.fail_on_alert)


def _demo(args: argparse.Namespace) -> int:

    from pipeline.demo import build_demo

    base = _base_config(args.config)
    target = Path(args.data_dir).resolve()
    print(f"building the demo history in {target}", file=sys.stderr)
    with _progress(args.days, "demo") as progress:
        results = build_demo(base, target, days=args.days, drift_day=args.drift_day, progress=progress)
    print(_summary(results[-1]))
    print(f"demo history ({len(results)} runs) written to {target}")
    print(f"open it with: {dashboard_hint(target, _dashboard_dir(args.config) == target)}")
    return EXIT_OK


def dashboard_hint(target: Path, read_by_default: bool) -> str:
    """The command that opens the dashboard on `target`: the README's quick-start command when run from the
    checkout's root on the directory the dashboard reads by default (the shipped monitor.toml's data_dir), else
    the dashboard command with --data-dir when the dashboard would not read `target` by itself."""
    from pipeline.paths import APP_FILE, app_file

    if read_by_default and (Path.cwd() / APP_FILE).resolve() == app_file().resolve():
        return CHECKOUT_DASHBOARD
    return f"{prog()} dashboard" + ("" if read_by_default else f" --data-dir {target}")


def _dashboard_dir(config: str | None) -> Path | None:
    """The data directory the dashboard reads without --data-dir, or None when nothing names one."""
    from pipeline.views import resolve_data_dir

    try:
        return resolve_data_dir(config)
    except DriftwatchError:
        return None


def _simulate(args: argparse.Namespace) -> int:

    from pipeline.simulate import (Scenario, catch_verdict, caught, check_metric, compare, default_start,
                                   results_table, run_dates, simulate, source_config)
    from pipeline.views.simulate import caught_lines

    config_file = _config_file(args.config)
    fallback = load_config(config_file) if config_file else None
    source = Path(args.data_dir or (fallback.data_dir if fallback else DEMO_DATA_DIR))
    config = source_config(source, fallback)
    days = run_dates(source)
    start = args.date or default_start(days, config.alerts.window)
    check_metric(source, args.metric)  # before the simulation, which takes minutes
    scenario = Scenario(args.scenario, start, n=args.n, pack=args.pack, share=args.share, before=args.before,
                        model=args.model, truncate_dim=args.truncate_dim, seed=args.seed)
    scenario.check()
    todo = sum(d >= start for d in days) or 1
    with _progress(todo, args.scenario) as progress:
        result = simulate(config, scenario, source, Path(args.out), progress=progress)
    k = default_k(config.retrieval.k)
    table = results_table(compare(source, result.sandbox, args.metric, k), start)
    print(f"{scenario.describe()} on {start}; sandbox: {result.sandbox} (source untouched: {result.source})")
    print(f"{args.metric}@{k}: original vs simulated")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    compared = caught(source, result.sandbox, start)
    print(f"Would the alerts catch this? {catch_verdict(compared, start)}")
    print("\n".join(f"  {line}" for line in caught_lines(compared)))
    return EXIT_OK


def _documents(args: argparse.Namespace) -> int:
    import json

    from pipeline.documents import COLUMNS, list_documents
    from pipeline.views import resolve_data_dir

    data_dir = resolve_data_dir(args.config, args.data_dir)
    listed = list_documents(data_dir, search=args.search, day=args.date)
    if args.json:
        print("\n".join(json.dumps(d.row(), ensure_ascii=False) for d in listed))
    elif listed:
        import pandas as pd

        print(pd.DataFrame([d.row() for d in listed], columns=list(COLUMNS)).to_string(index=False))
    print(f"{len(listed)} document(s) in {data_dir}" + (f" holding {args.search!r}" if args.search else ""),
          file=sys.stderr)
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:

    from pipeline import store
    from pipeline.report import default_path, latest_week, weekly_review_html
    from pipeline.views import resolve_data_dir

    data_dir = resolve_data_dir(args.config, args.data_dir)
    week = args.week or latest_week(store.read_runs(data_dir))
    out = Path(args.out) if args.out else default_path(data_dir, week)
    page = weekly_review_html(data_dir, week)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    print(f"weekly review of {week} ({data_dir}) written to {out}")
    return EXIT_OK


def _evidently_report(args: argparse.Namespace) -> int:
    from pipeline.evidently_report import build_report, data_dir_config
    from pipeline.views import resolve_data_dir

    data_dir = resolve_data_dir(args.config, args.data_dir)
    report, path = build_report(data_dir_config(data_dir, args.config), args.date, Path(args.out) if args.out else None)
    print(f"Evidently report of the run on {args.date} ({data_dir}) written to {path} "
          f"(embedding drift score {report.embedding_score():.4f})")
    return EXIT_OK


def _init(args: argparse.Namespace) -> int:
    from pipeline.starter import init

    starter = init(Path(args.dir), force=args.force)
    print("\n".join(f"wrote {path}" for path in starter.written))
    print(f"\nnext: add your feeds as [[sources]] and your questions to the gold set (a document's id is its feed "
          f"item's guid or id, else its link), then\n  {prog()} check --config {starter.config}")
    print(f"\nthe daily job, as a crontab line (crontab -e):\n  {starter.cron}")
    print("\na GitHub Actions workflow for the gate (copy it to .github/workflows/driftwatch.yml):\n")
    print(starter.workflow)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from pipeline.check import check, table

    report = check(load_config(args.config, data_dir=args.data_dir))
    print(table(report))
    return EXIT_OK if report.ok else EXIT_ALERT


def _accept_edits(args: argparse.Namespace) -> int:
    from pipeline import store

    config = load_config(args.config, data_dir=args.data_dir)
    notes = store.accept_edits(config.data_dir)
    print("\n".join([f"accepted: {note}" for note in notes] or [f"{config.data_dir}: no edit to accept"]))
    print(f"the store of {config.data_dir} is sealed as it is; the next run names these in its events")
    return EXIT_OK


def _dashboard(args: argparse.Namespace) -> int:
    import signal
    import socket
    import subprocess

    from pipeline.config import ENV_CONFIG, ENV_DATA_DIR
    from pipeline.paths import app_file, dashboard_flags, dashboard_options
    from pipeline.views import resolve_data_dir

    env = dict(os.environ)
    if args.config:  # the app runs in this working directory, but resolve now so the message names the file
        env[ENV_CONFIG] = str(Path(args.config).resolve())
    data_dir = resolve_data_dir(args.config, args.data_dir)
    env[ENV_DATA_DIR] = str(data_dir)
    script = app_file()
    if not script.is_file():
        print(f"error: the dashboard is missing ({script} not found): reinstall driftwatch", file=sys.stderr)
        return EXIT_BAD_INPUT
    host = str(dashboard_options()[DASHBOARD_ADDRESS])
    try:  # said now, in one line, rather than by streamlit after its start-up
        with socket.create_server((host, args.port)):
            pass
    except OSError as exc:
        print(f"error: cannot serve on {host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # .streamlit/config.toml is read from the working directory only: its settings go on the line.
    command = [sys.executable, "-m", "streamlit", "run", str(script), *dashboard_flags(),
               "--server.port", str(args.port), "--server.headless", "true", *args.streamlit_args]
    child = subprocess.Popen(command, env=env)
    stopping = False

    def stop(signum, frame) -> None:  # a service manager's SIGTERM stops streamlit too, not only this process
        nonlocal stopping
        stopping = True
        child.terminate()

    previous = signal.signal(signal.SIGTERM, stop)
    print(f"serving the dashboard of {data_dir} on http://{host}:{args.port}", file=sys.stderr, flush=True)
    try:
        code = child.wait()
    except KeyboardInterrupt:  # Ctrl-C reaches streamlit too (the same process group), which stops on it
        stopping = True
        code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_OK if stopping else code


def _rescore(args: argparse.Namespace) -> int:
    from pipeline.judging import qrels

    config = load_config(args.config, data_dir=args.data_dir)
    done = qrels.rescore(config, accept_edits=args.accept_edits)
    print(done.describe())
    return EXIT_OK


def _judge(args: argparse.Namespace) -> int:
    import json

    from pipeline.judging import review
    from pipeline.views import gold_questions

    config = load_config(args.config, data_dir=args.data_dir)
    questions = gold_questions(config.gold)
    if args.json and not args.queue:
        print("error: --json goes with --queue", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.import_file:
        added = review.import_judgments(Path(args.import_file), config.data_dir, questions)
        print(f"{len(added)} judgment(s) from {args.import_file} appended to {config.data_dir / contract.JUDGMENTS}")
        return EXIT_OK
    state = review.load(config.data_dir, questions)
    if args.queue:
        records = state.queue_records()
        if args.json:
            print("\n".join(json.dumps(r, ensure_ascii=False) for r in records))
        elif records:
            import pandas as pd

            table = pd.DataFrame(records, columns=list(review.QUEUE_FIELDS))
            table["content_hash"] = table["content_hash"].str[:12]  # enough to tell texts apart on a screen
            print(table.to_string(index=False))
        print(f"{len(records)} pair(s) to judge in {config.data_dir} ({state.progress.describe()})", file=sys.stderr)
        return EXIT_OK
    if not (args.judge or "").strip():
        print("error: give your name with --judge NAME: it is recorded with each grade", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _judge_interactively(state, args.judge.strip())


def _judge_interactively(state, judge: str) -> int:
    """The queue on stdout, grades read from stdin, one line each; end of input quits as q does."""
    from pipeline.judging import ledger, review

    ansi = sys.stdout.isatty()
    pairs = review.order(state.queue)
    print(f"{state.progress.describe()}. Answer 0 (not relevant), 1 (relevant), 2 (highly relevant), s (skip) or "
          "q (quit).")
    judged = skipped = 0
    for n, (question_id, doc_id) in enumerate(pairs, start=1):
        shown = review.item(state, question_id, doc_id)
        print("\n".join(_item_lines(shown, n, len(pairs), ansi)))
        answer = _answer()
        if answer in (None, review.QUIT):
            break
        if answer == review.SKIP:
            skipped += 1
            continue
        review.record(state.data_dir, question_id, doc_id, int(answer), judge)
        judged += 1
    after = review.progress(state.pool, ledger.read_judgments(state.data_dir))
    print(f"judged {judged}, skipped {skipped}; {after.describe()}")
    return EXIT_OK


def _answer() -> str | None:
    """The next valid answer on stdin (None at its end), asking again after anything else."""
    from pipeline.judging import review

    while True:
        print(f"grade [{'/'.join(review.KEYS)}/{review.QUIT}]: ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            print()
            return None
        answer = line.strip().lower()
        if answer in (*review.KEYS, review.QUIT):
            return answer
        print(f"  {answer!r}: answer 0, 1, 2, s or q")


def _item_lines(shown, n: int, total: int, ansi: bool) -> list[str]:
    from pipeline.judging import review

    reasons = ", ".join(review.REASON_LABELS.get(r, r) for r in shown.reasons)
    lines = [f"\n[{n}/{total}] {shown.question_id} · {shown.doc_id}: {reasons} (rank {shown.rank} of "
             f"{shown.pipeline or '-'} on {shown.run_date})",
             f"Question: {shown.question}",
             f"--- {shown.gold_label}:", review.terminal_text(shown.overlap.gold, ansi),
             f"--- candidate {shown.doc_id} ({shown.overlap.shared_words} of {shown.overlap.candidate_words} words in "
             "runs shared with it, marked):", review.terminal_text(shown.overlap.candidate, ansi)]
    if shown.detail:
        lines.append(f"Differing sentences: {shown.detail}")
    if shown.suggestion is not None:
        lines.append(f"LLM suggestion (not a judgment): {shown.suggestion.grade} by {shown.suggestion.judge}"
                     + ("" if shown.suggestion_current else ", on an earlier text"))
    if shown.earlier is not None:
        lines.append(f"Judged {shown.earlier.grade} by {shown.earlier.judge} on an earlier text")
    return lines


def _judging_questions(config) -> dict:
    """The gold set and the accepted drafted questions, by id: what the queue's question ids name."""
    from pipeline.judging import questions
    from pipeline.views import gold_questions

    return {**gold_questions(config.gold), **{q.id: q for q in questions.accepted_gold(config.data_dir)}}


def _prelabel(args: argparse.Namespace) -> int:
    from pipeline.judging import ledger, prelabel

    config = load_config(args.config, data_dir=args.data_dir)
    if args.limit is not None and args.limit < 1:
        print("error: --limit must be 1 or more", file=sys.stderr)
        return EXIT_BAD_INPUT
    result = prelabel.prelabel(config, _judging_questions(config), limit=args.limit)
    for line in result.failed:
        print(f"failed: {redact.redact(line)}", file=sys.stderr)
    print(f"{len(result.labelled)} pair(s) labelled by {prelabel.judge_name(result.model)}, {len(result.failed)} "
          f"failed, {result.left} left; {result.already} of the {result.queued} queued already had its suggestion")
    if result.note:
        print(result.note)
    print(prelabel.human_agreement(ledger.read_judgments(config.data_dir)).describe())
    return EXIT_ALERT if result.attempted and not result.labelled else EXIT_OK


def _suggest_questions(args: argparse.Namespace) -> int:
    import json

    from pipeline.judging import questions
    from pipeline.views import gold_questions

    config = load_config(args.config, data_dir=args.data_dir)
    if args.write is not None:
        if not args.doc:
            print("error: --write needs --doc DOC_ID, the document that answers the question", file=sys.stderr)
            return EXIT_BAD_INPUT
        done = questions.write(config, args.write, args.doc, args.judge, list(gold_questions(config.gold).values()))
        found = f"found at rank {done.found_rank}" if done.found_rank else "FLAGGED: its document is not in the top 10"
        print(f"{done.id} {done.provenance} by {done.judge}: {done.question}  [{questions.RETRIEVER}: {found}]")
        return EXIT_OK
    if args.doc:
        print("error: --doc goes with --write", file=sys.stderr)
        return EXIT_BAD_INPUT
    if (args.accept or args.reject) and not (args.judge or "").strip():
        print("error: give your name with --judge NAME: it is recorded with the review", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json and not args.list:
        print("error: --json goes with --list", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.accept or args.reject:
        done = questions.review(config.data_dir, args.accept or args.reject, args.judge, accept=bool(args.accept))
        print(f"{done.id} {done.provenance} by {done.judge}: {done.question}")
        return EXIT_OK
    if args.list:
        drafts = list(questions.latest(config.data_dir).values())
        for d in drafts:
            if args.json:
                print(json.dumps(d.record(), ensure_ascii=False))
            else:
                found = f"rank {d.found_rank}" if d.found_rank else "NOT FOUND in the top 10"
                print(f"{d.id}  {d.provenance:<9}  {d.doc_id}  ({d.retriever}: {found})  {d.question}")
        print(f"{len(drafts)} drafted question(s) in {config.data_dir / contract.QUESTIONS}", file=sys.stderr)
        return EXIT_OK
    result = questions.suggest(config, args.date, list(gold_questions(config.gold).values()))
    for line in result.failed:
        print(f"failed: {redact.redact(line)}", file=sys.stderr)
    for doc_id, question, same in result.duplicates:
        print(f"duplicate dropped: {doc_id}: {question!r} (as {same!r})")
    for d in result.kept:
        found = f"found at rank {d.found_rank}" if d.found_rank else "FLAGGED: its document is not in the top 10"
        print(f"{d.id}  {d.doc_id}: {d.question}  [{questions.RETRIEVER}: {found}]")
    print(f"{args.date}: {result.new_documents} new document(s), {result.already} drafted before; "
          f"{len(result.kept)} question(s) drafted ({result.flagged} flagged), {len(result.duplicates)} duplicate(s) "
          f"dropped, {len(result.failed)} failed")
    if result.note:
        print(result.note)
    attempted = len(result.kept) + len(result.duplicates) + len(result.failed)
    return EXIT_ALERT if attempted and len(result.failed) == attempted else EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from pipeline import store
    from pipeline.config import ConfigError
    from pipeline.exporters import EXPORTERS, enabled, export

    config = load_config(args.config, data_dir=args.data_dir)
    if not enabled(config):
        raise ConfigError(f"{config.file}: no [export.*] section ({', '.join(EXPORTERS)}): nothing to export")
    days = [d.date() for d in store.read_runs(config.data_dir)[contract.RUN_DATE]]
    days = [d for d in days if (args.start is None or d >= args.start) and (args.end is None or d <= args.end)]
    if not days:
        print(f"error: no run in {config.data_dir} from {args.start or 'the first'} to {args.end or 'the last'}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    with store.run_lock(config.data_dir):  # not while a run writes (and exports) the same store
        outcomes = export(config, days)
    for outcome in outcomes:
        print(f"{outcome.exporter}: {outcome.where}: " + ("ok" if outcome.ok else f"FAILED: {outcome.error}"))
    print(f"{len(days)} runs ({days[0]} .. {days[-1]}) of {config.data_dir} exported")
    return EXIT_OK if all(o.ok for o in outcomes) else EXIT_ALERT


def _serve_metrics(args: argparse.Namespace) -> int:
    from pipeline import store
    from pipeline.exporters import serve
    from pipeline.views import resolve_data_dir

    data_dir = resolve_data_dir(args.config, args.data_dir)
    # A bad store is said now, not on the first scrape; edits are for a run to refuse: serving only reads.
    store.validate(data_dir, accept_edits=True)
    try:
        server, thread = serve(data_dir, args.port, args.addr)
    except OSError as exc:  # the port is taken, or the address is not this machine's
        print(f"error: cannot listen on {args.addr}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"serving the metrics of {data_dir} on http://{args.addr}:{server.server_port}/metrics", file=sys.stderr,
          flush=True)
    try:
        thread.join()
    except KeyboardInterrupt:
        server.shutdown()
    return EXIT_OK


COMMANDS = {"run": _run, "backfill": _backfill, "rebaseline": _rebaseline, "eval": _eval, "demo": _demo,
            "simulate": _simulate, "documents": _documents, "report": _report, "evidently-report": _evidently_report,
            "init": _init, "check": _check, "accept-edits": _accept_edits,
            "dashboard": _dashboard,
            "judge": _judge, "prelabel": _prelabel, "suggest-questions": _suggest_questions, "rescore": _rescore,
            "app": _dashboard, "export": _export, "serve-metrics": _serve_metrics}


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    redact.install_log_filter()  # a backstop: every record is redacted, whatever its call site formatted
    # httpx2: the HTTP client of the openai package (the judge, the pre-label), a line per request at INFO.
    for noisy in ("sentence_transformers", "transformers", "httpx", "httpx2", "openai", "urllib3", "bm25s", "faiss",
                  "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The model libraries draw progress bars when loading weights: noise in a cron log.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _path_error(exc: OSError) -> str:
    """The message for a path of the wrong kind: a folder where a file is read, or a path under a file."""
    if isinstance(exc, IsADirectoryError):
        return f"{exc.filename or exc}: is a folder; a file is expected there (check the configured paths)"
    return f"{exc.filename or exc}: a part of this path is a file, not a folder (check data_dir and the paths)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except _BAD_INPUT as exc:
        print(f"error: {redact.redact(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (IsADirectoryError, NotADirectoryError) as exc:  # a configured path that is a folder, or under a file
        print(f"error: {redact.redact(_path_error(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `driftwatch judge --queue --json | head`: the rest is not wanted, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush has nowhere to fail
        return EXIT_PIPE_CLOSED
    except LockError as exc:
        print(f"error: {redact.redact(exc)}", file=sys.stderr)
        return EXIT_LOCKED

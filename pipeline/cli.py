"""The command line: `python -m pipeline run|backfill ...`; domain errors become one message and an exit code."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from datetime import date

from pipeline.config import ConfigError, load_config
from pipeline.corpus import CorpusError
from pipeline.embeddings import EmbedderError
from pipeline.gold import GoldError
from pipeline.sources import FeedError
from pipeline.store import LockError, StoreSchemaError

EXIT_OK = 0
EXIT_ALERT = 1
EXIT_BAD_INPUT = 2
EXIT_LOCKED = 3

_BAD_INPUT = (ConfigError, GoldError, FeedError, StoreSchemaError, CorpusError, EmbedderError)

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline",
                                     description="driftwatch: retrieval-quality drift monitor for RAG systems.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="the daily job: ingest, index, evaluate the gold set, write the series",
                         description="Ingest the feeds, index the corpus, evaluate every pipeline at every k and "
                                     "write runs.csv, metrics.csv and per_question.csv for one date "
                                     "(re-running a date replaces its rows).")
    run.add_argument("--date", type=_date, default=None, help="run date (default: today, UTC)")
    run.add_argument("--event", default="", help="a note stored with the run in runs.csv (e.g. 'new chunker')")
    _common(run)

    back = sub.add_parser("backfill", help="one run per day over a range of dates (dated sources replay history)",
                          description="Run the daily job for every date from --start to --end inclusive.")
    back.add_argument("--start", type=_date, required=True, help="first date (YYYY-MM-DD)")
    back.add_argument("--end", type=_date, required=True, help="last date (YYYY-MM-DD)")
    _common(back)
    return parser


def _summary(result) -> str:
    """A small table of the run's means: one row per pipeline, recall/MRR/nDCG at the largest k <= 5."""
    ks = sorted({row["k"] for row in result.metrics})
    k = max([x for x in ks if x <= 5] or ks)
    pipelines = list(dict.fromkeys(row["pipeline"] for row in result.metrics))
    run = result.run
    lines = [f"{run['run_date']}: {run['status']}, feeds ok {run['feeds_ok']} failed {run['feeds_failed']}, "
             f"docs +{run['docs_new']} ~{run['docs_updated']} -{run['docs_deleted']} = {run['docs_total']}, "
             f"chunks {run['chunks_total']} ({run['chunks_embedded']} embedded), {run['seconds']:.1f}s",
             f"  {'pipeline':<14}{'hit@' + str(k):>9}{'recall@' + str(k):>11}{'mrr@' + str(k):>9}"
             f"{'ndcg@' + str(k):>9}{'unjudged@' + str(k):>13}"]
    for p in pipelines:
        v = {m: result.mean(p, m, k) for m in ("hit", "recall", "mrr", "ndcg", "unjudged")}
        lines.append(f"  {p:<14}{v['hit']:>9.3f}{v['recall']:>11.3f}{v['mrr']:>9.3f}{v['ndcg']:>9.3f}"
                     f"{v['unjudged']:>13.3f}")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from pipeline.job import run_day

    config = load_config(args.config, data_dir=args.data_dir)
    day = args.date or date.today()
    result = run_day(config, day, events=args.event)
    print(_summary(result))
    print(f"series written to {config.data_dir}")
    return EXIT_OK


def _backfill(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from pipeline.job import backfill, date_range

    if args.end < args.start:
        print(f"error: --end {args.end} is before --start {args.start}", file=sys.stderr)
        return EXIT_BAD_INPUT
    config = load_config(args.config, data_dir=args.data_dir)
    days = date_range(args.start, args.end)
    with tqdm(total=len(days), unit="day", desc="backfill") as bar:
        def progress(result) -> None:
            bar.set_postfix_str(f"{result.run_date} docs={result.run['docs_total']}")
            bar.update(1)
        results = backfill(config, args.start, args.end, progress=progress)
    print(_summary(results[-1]))
    print(f"{len(results)} runs written to {config.data_dir}")
    return EXIT_OK


COMMANDS = {"run": _run, "backfill": _backfill}


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    import bm25s  # noqa: F401  (it sets its own logger to DEBUG when imported; undo that after)

    for noisy in ("sentence_transformers", "transformers", "httpx", "urllib3", "bm25s", "faiss", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The model libraries draw progress bars when loading weights: noise in a cron log.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except _BAD_INPUT as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LockError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LOCKED

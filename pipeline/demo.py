"""The bundled demo: article records rendered as daily RSS 2.0 files, and the demo history built from them
(a month of daily runs with a scripted drift event)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from xml.sax.saxutils import escape

from pipeline import contract, paths, store
from pipeline.config import Config, SourceConfig, target_list, to_toml
from pipeline.corpus import CORPUS_FILE, Corpus
from pipeline.errors import DriftwatchError

DEMO_DIR = paths.demo_dir()  # data/demo of the checkout, or of the installed copy
ARTICLES_DIR = DEMO_DIR / "articles"
PACKS_DIR = DEMO_DIR / "packs"
FEEDS_DIR = DEMO_DIR / "feeds"
GOLD_FILE = DEMO_DIR / "gold.jsonl"
ANSWERS_DIR = DEMO_DIR / "answers"  # the bundled answers (logged format) and their human labels
ANSWERS_FILE = ANSWERS_DIR / "answers.jsonl"
LABELS_FILE = ANSWERS_DIR / "labels.csv"
ANSWERS_PIPELINE, ANSWERS_K = "hybrid", 5  # whose top 5 the bundled answers were given (answers/build.py)

DAY_ONE = date(2026, 10, 19)  # day 1 of the demo's 35 days
N_DAYS = 35
FIRST_RUN_DAY = 6  # every gold document is published by day 6: the history starts there
MAX_RUNS = N_DAYS - FIRST_RUN_DAY + 1  # 30
DRIFT_DAY = 26  # default day on which the drift packs start flowing in (2026-11-13)
DRIFT_SPREAD = 2  # days over which each pack arrives
DEMO_CONFIG = "demo.toml"  # written into a demo data directory: the configuration that built it
PACKS = {"near-duplicates": "near_duplicates_*.jsonl", "offtopic": "offtopic_sports.jsonl"}
LOCAL_TZ = timezone(timedelta(hours=1))  # Carvania is on UTC+01:00
LINK_BASE = "https://demo.driftwatch.invalid"


@dataclass(frozen=True)
class Outlet:
    slug: str
    title: str
    categories: tuple[str, ...]


OUTLETS = (
    Outlet("harbor-ledger", "Harbor Ledger", ("politics", "economy")),
    Outlet("northwind-wire", "Northwind Wire", ("technology", "science")),
    Outlet("meridian-health", "Meridian Health Desk", ("health",)),
    Outlet("fieldside-sports", "Fieldside Sports", ("sports",)),
)
NEAR_DUPLICATE_OUTLET = Outlet("coastline-syndicate", "Coastline Syndicate", ())
PACK_OUTLETS = {"near-duplicates": NEAR_DUPLICATE_OUTLET, "offtopic": OUTLETS[3]}


@dataclass(frozen=True)
class Article:
    id: str
    day: int
    time: str
    title: str
    text: str
    category: str
    story: str
    kind: str
    targets: tuple[str, ...] = ()  # near-duplicates: the gold questions each is meant to confuse

    @classmethod
    def from_record(cls, record: dict) -> Article:
        fields = {f: record[f] for f in cls.__dataclass_fields__ if f in record}
        return cls(**{**fields, "targets": tuple(record.get("targets", ()))})


def read_articles(path: Path) -> list[Article]:
    with path.open(encoding="utf-8") as f:
        return [Article.from_record(json.loads(line)) for line in f if line.strip()]


def outlet_for(category: str) -> Outlet:
    for outlet in OUTLETS:
        if category in outlet.categories:
            return outlet
    raise ValueError(f"no demo outlet carries category {category!r}")


def published_at(article: Article, day: date) -> datetime:
    hour, minute = map(int, article.time.split(":"))
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=LOCAL_TZ)


def render_rss(outlet: Outlet, articles: Sequence[Article], day: date) -> bytes:
    """An RSS 2.0 channel as a real outlet serves it: description in escaped HTML paragraphs."""
    items = []
    for a in sorted(articles, key=lambda a: (a.time, a.id)):
        when = published_at(a, day)
        link = f"{LINK_BASE}/{outlet.slug}/{when:%Y/%m/%d}/{a.id}"
        html = "".join(f"<p>{escape(p)}</p>" for p in a.text.split("\n") if p.strip())
        items.append(
            "    <item>\n"
            f"      <title>{escape(a.title)}</title>\n"
            f"      <link>{escape(link)}</link>\n"
            f'      <guid isPermaLink="false">{escape(a.id)}</guid>\n'
            f"      <pubDate>{format_datetime(when)}</pubDate>\n"
            f"      <category>{escape(a.category)}</category>\n"
            f"      <description>{escape(html)}</description>\n"
            "    </item>\n")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0">\n  <channel>\n'
        f"    <title>{escape(outlet.title)}</title>\n"
        f"    <link>{LINK_BASE}/{outlet.slug}/</link>\n"
        f"    <description>{escape(outlet.title)}: news from Carvania (fictional demo data)</description>\n"
        f"    <language>en</language>\n"
        + "".join(items) + "  </channel>\n</rss>\n").encode("utf-8")


def demo_date(day: int) -> date:
    return DAY_ONE + timedelta(days=day - 1)


def daily_feeds(articles: Iterable[Article]) -> dict[Path, bytes]:
    """Relative path (`<outlet>/<YYYY-MM-DD>.xml`) -> feed bytes, one file per outlet and day."""
    by_file: dict[tuple[Outlet, int], list[Article]] = {}
    for a in articles:
        by_file.setdefault((outlet_for(a.category), a.day), []).append(a)
    return {Path(outlet.slug) / f"{demo_date(day).isoformat()}.xml": render_rss(outlet, items, demo_date(day))
            for (outlet, day), items in sorted(by_file.items(), key=lambda kv: (kv[0][0].slug, kv[0][1]))}


def base_articles() -> list[Article]:
    return [a for path in sorted(ARTICLES_DIR.glob("*.jsonl")) for a in read_articles(path)]


def write_feeds(out_dir: Path = FEEDS_DIR) -> list[Path]:
    """Render the base corpus's daily feed files under `out_dir` (what is committed in data/demo/feeds)."""
    written = []
    for rel, data in daily_feeds(base_articles()).items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def write_gold(out: Path = GOLD_FILE) -> None:
    """Merge the per-topic gold parts into one gold set, in question-id order."""
    lines = [line for path in sorted((DEMO_DIR / "gold_parts").glob("*.jsonl"))
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines.sort(key=lambda line: json.loads(line)["id"])
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def pack_articles(name: str) -> list[Article]:
    """A drift pack: "near-duplicates" (look like answers to gold questions, are not) or "offtopic" (sports)."""
    if name not in PACKS:
        raise ValueError(f"unknown pack {name!r} (valid: {', '.join(PACKS)})")
    return [a for path in sorted(PACKS_DIR.glob(PACKS[name])) for a in read_articles(path)]


def spread(articles: Sequence[Article], first: date, days: int) -> dict[date, list[Article]]:
    """Deal articles over `days` consecutive dates from `first`, in order, as evenly as possible."""
    per_day: dict[date, list[Article]] = {}
    for i, article in enumerate(articles):
        per_day.setdefault(first + timedelta(days=i * days // len(articles)), []).append(article)
    return per_day


def write_pack_feeds(out_dir: Path, first: date, days: int = DRIFT_SPREAD) -> list[SourceConfig]:
    """Render both drift packs as dated feed files under `out_dir`, arriving from `first` on."""
    sources = []
    for name, outlet in PACK_OUTLETS.items():
        folder = out_dir / outlet.slug
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for day, items in spread(pack_articles(name), first, days).items():
            (folder / f"{day.isoformat()}.xml").write_bytes(render_rss(outlet, items, day))
        sources.append(SourceConfig(name=outlet.slug, path=folder))
    return sources


def demo_sources() -> tuple[SourceConfig, ...]:
    return tuple(SourceConfig(name=o.slug, path=FEEDS_DIR / o.slug) for o in OUTLETS if (FEEDS_DIR / o.slug).is_dir())


class DemoError(DriftwatchError):
    """The demo cannot be built where asked (a directory holding other history)."""


def clear_history(data_dir: Path, marker: str, refuse: Callable[[str], DriftwatchError]) -> None:
    """Clear the series and documents of `data_dir`, which a driftwatch command built (it holds `marker`);
    the embedding cache is kept, so a rebuild is quick. Any other non-empty directory is refused:
    `refuse(message)` is raised. Call it holding the directory's run lock."""
    if data_dir.exists() and any(p.name != store.LOCK_FILE for p in data_dir.iterdir()) \
            and not (data_dir / marker).exists():
        raise refuse(f"{data_dir} holds data that this command did not build (no {marker}); "
                     "give an empty or new directory")
    for name in contract.SCHEMAS:
        (data_dir / name).unlink(missing_ok=True)
    store.seal(data_dir)  # cleared by driftwatch, not edited: the next run must not refuse the missing files
    if (data_dir / CORPUS_FILE).exists():
        with Corpus.in_dir(data_dir) as corpus:
            corpus.clear_documents()


def demo_generation(config: Config):
    """`config`'s [generation] answering from the bundled answers and labels (mode logged), so the answer layer
    runs on a fresh machine without an endpoint; a configured judge endpoint, if any, still judges them."""
    names = [t.name for t in target_list(config)]
    return dataclasses.replace(config.generation, mode="logged", logged=ANSWERS_FILE, labels=LABELS_FILE,
                               pipeline=ANSWERS_PIPELINE if ANSWERS_PIPELINE in names else None,
                               k=min(ANSWERS_K, config.retrieval.candidate_depth))


DEMO_HOME_SUFFIX = "-demo"


def demo_home(data_dir: Path) -> Path:
    """Where the dashboard builds the demo for a data directory without history: a folder of its own beside it
    (`<name>-demo`), never the data directory itself, which the team's own runs are to fill."""
    data_dir = Path(data_dir).resolve()
    return data_dir.with_name(f"{data_dir.name or 'data'}{DEMO_HOME_SUFFIX}")


def build_demo(base: Config, data_dir: Path, *, days: int = MAX_RUNS, drift_day: date | None = None,
               progress: Callable[[object], None] | None = None) -> list:
    """Backfill `days` daily runs of the bundled demo into `data_dir` (from day 6, 2026-10-24).

    From `drift_day` (default day 26, 2026-11-13) the near-duplicate and off-topic packs flow in over
    two days; the answer layer reads the bundled answers and labels (`demo_generation`); `base` supplies
    every other setting (embedder, chunking, retrieval...).
    """
    from pipeline.job import backfill

    for bundled in (GOLD_FILE, ANSWERS_FILE, LABELS_FILE):
        if not bundled.is_file():
            raise DemoError(f"the bundled demo data is missing ({bundled} not found): reinstall driftwatch")
    if not 1 <= days <= MAX_RUNS:
        raise DemoError(f"--days must be between 1 and {MAX_RUNS}, got {days}")
    drift_day = drift_day or demo_date(DRIFT_DAY)
    first, last = demo_date(FIRST_RUN_DAY), demo_date(FIRST_RUN_DAY + days - 1)
    if not first < drift_day <= demo_date(N_DAYS):
        raise DemoError(f"the drift day must fall after {first} and by {demo_date(N_DAYS)}, got {drift_day}")
    data_dir = Path(data_dir).resolve()
    with store.run_lock(data_dir):  # a run writing the directory (a backfill) keeps it: LockError, nothing deleted
        clear_history(data_dir, DEMO_CONFIG, DemoError)
        packs = write_pack_feeds(data_dir / "demo-feeds", drift_day)
        config = base.replace(data_dir=data_dir, gold=GOLD_FILE, sources=demo_sources() + tuple(packs))
        config = config.replace(generation=demo_generation(config))
        (data_dir / DEMO_CONFIG).write_text(to_toml(config), encoding="utf-8")
    n_dup, n_off = len(pack_articles("near-duplicates")), len(pack_articles("offtopic"))
    events = {drift_day: f"drift event: {n_dup} near-duplicate and {n_off} off-topic documents start flowing in "
                         f"over {DRIFT_SPREAD} days"}
    return backfill(config, first, last, progress=progress, events=events)


if __name__ == "__main__":
    paths = write_feeds()
    write_gold()
    print(f"wrote {len(paths)} feed files under {FEEDS_DIR} and {GOLD_FILE}")

"""The bundled demo corpus: article records (JSONL) rendered as the daily RSS 2.0 files the demo replays."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from xml.sax.saxutils import escape

DEMO_DIR = Path(__file__).resolve().parents[1] / "data" / "demo"
ARTICLES_DIR = DEMO_DIR / "articles"
PACKS_DIR = DEMO_DIR / "packs"
FEEDS_DIR = DEMO_DIR / "feeds"
GOLD_FILE = DEMO_DIR / "gold.jsonl"

DAY_ONE = date(2026, 10, 19)  # day 1 of the demo's 35 days
N_DAYS = 35
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

    @classmethod
    def from_record(cls, record: dict) -> Article:
        return cls(**{f: record[f] for f in cls.__dataclass_fields__})


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


if __name__ == "__main__":
    paths = write_feeds()
    write_gold()
    print(f"wrote {len(paths)} feed files under {FEEDS_DIR} and {GOLD_FILE}")

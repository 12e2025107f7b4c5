"""The weekly review: a week's metrics against the previous week, its alerts, most regressed questions and
corpus changes, as one self-contained HTML page (the dashboard's download and `python -m pipeline report`)."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pandas as pd

from pipeline import canary, contract, store, views
from pipeline.views import weekly as weekly_views
from pipeline.alerts import is_new
from pipeline.contract import ALERT, WARNING
from pipeline.charts import EVENT_COLOUR, MAX_EVENT_LABEL, SEVERITY_COLOURS, colour_map
from pipeline.notify import Silence, read_silences
from pipeline.views.alerts import AlertCounts, count_alerts, incidents
from pipeline.config import AlertsConfig
from pipeline.metrics import DEFAULT_METRIC, HEADLINE
from pipeline.persistence import PERSISTENCE_METRICS, Persistence, persistence
from pipeline.redact import redact

TOP_QUESTIONS = 10
REPORTS_DIR = "reports"  # the default folder of `python -m pipeline report`, inside the data directory


class ReportError(DriftwatchError, ValueError):
    """A week the review cannot be made for (malformed, or without runs); the message lists the valid weeks."""


@dataclass(frozen=True)
class WeeklyReview:
    week: str
    previous: str
    start: date
    end: date
    run_dates: tuple[date, ...]
    k: int  # the cutoff of the summary table, the chart and the regressed questions
    summary: pd.DataFrame  # weekly_views.weekly_means rows at k for HEADLINE
    every_metric: pd.DataFrame  # weekly_views.weekly_means rows at every k
    daily: pd.DataFrame  # DEFAULT_METRIC@k per run date and pipeline over both weeks (run_date, pipeline, value)
    alerts: pd.DataFrame  # the week's alerts.csv rows
    regressions: pd.DataFrame  # weekly_views.week_regressions
    corpus: weekly_views.CorpusWeek
    events: pd.DataFrame  # views.run_events of the week
    marks: pd.DataFrame  # views.alert_points of both weeks on any series: the chart's alert marks
    notes: pd.DataFrame  # views.run_events of both weeks: the chart's event marks
    persistence: Persistence  # each pipeline's LongEval relative drop on the week's last run
    gold_texts: dict = field(default_factory=dict)  # question id -> text, for the summary paragraph
    counts: AlertCounts | None = None  # the week's alerts in the one vocabulary (open on its last run, incidents, rows)
    canary: tuple[str, ...] = ()  # each candidate's sentence on its last run of the week (pipeline/canary.py)


def weekly_review(runs: pd.DataFrame, metrics: pd.DataFrame, per_question: pd.DataFrame, alerts: pd.DataFrame,
                  week: str, k: int | None = None, gold_texts: dict[str, str] | None = None,
                  silences: Sequence[Silence] = (), config: AlertsConfig | None = None,
                  candidates: pd.DataFrame | None = None) -> WeeklyReview:
    """The review of one ISO week from the store's frames and the data directory's silences (nothing is read
    here); `config` (the data directory's alerts settings) names the reference period of the persistence."""
    try:
        start, end = weekly_views.week_bounds(week)
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    available = weekly_views.weeks(runs)
    if week not in available:
        raise ReportError(f"no runs in {week} (weeks with runs: {', '.join(available) or 'none'})")
    k = k if k is not None else views.default_k(metrics[contract.K].unique())
    previous = weekly_views.previous_week(week)
    every = weekly_views.weekly_means(metrics, week)
    summary = every[(every[contract.K] == k) & every[contract.METRIC].isin(HEADLINE)]
    pipelines = views.values_of(metrics, contract.PIPELINE)
    summary = summary.assign(_p=summary[contract.PIPELINE].map(pipelines.index),
                             _m=summary[contract.METRIC].map(HEADLINE.index))
    summary = summary.sort_values(["_p", "_m"], kind="stable").drop(columns=["_p", "_m"])
    both = pd.concat([weekly_views.in_week(metrics, previous), weekly_views.in_week(metrics, week)])
    fortnight = [pd.concat([weekly_views.in_week(frame, previous), weekly_views.in_week(frame, week)])
                 for frame in (alerts, runs)]
    daily = views.metric_series(both, DEFAULT_METRIC, k)
    week_alerts = weekly_views.in_week(alerts, week).sort_values([contract.RUN_DATE, contract.SEVERITY, contract.RULE],
                                                                 kind="stable")
    return WeeklyReview(
        week=week, previous=previous, start=start, end=end,
        run_dates=tuple(views.run_dates(weekly_views.in_week(runs, week))), k=k,
        summary=summary.reset_index(drop=True), every_metric=every, daily=daily,
        alerts=week_alerts.reset_index(drop=True),
        regressions=weekly_views.week_regressions(per_question, week, k, DEFAULT_METRIC, TOP_QUESTIONS),
        corpus=weekly_views.week_corpus(runs, week), events=views.run_events(weekly_views.in_week(runs, week)),
        marks=views.alert_points(fortnight[0], None), notes=views.run_events(fortnight[1]),
        gold_texts=dict(gold_texts or {}),
        counts=count_alerts(week_alerts, weekly_views.in_week(runs, week), silences),
        persistence=persistence(per_question, config or AlertsConfig(), k, end),
        canary=tuple(canary.latest_sentences(weekly_views.in_week(candidates, week))) if candidates is not None else ())


def summary_paragraph(review: WeeklyReview, gold_texts: dict[str, str] | None = None) -> str:
    """The review in one paragraph, worth pasting: the status, what changed against the previous week, the
    incidents of the week (conditions started, ongoing at its end) and the three most regressed questions with
    their text."""
    alerts = review.alerts
    parts = [f"{len(review.run_dates)} runs from {review.run_dates[0]} to {review.run_dates[-1]}."]
    rows = review.summary[review.summary["better"].notna()]
    if len(rows):
        moved = rows.assign(_size=rows["change_pct"].abs()).sort_values("_size", ascending=False).head(3)
        parts.append("Against " + review.previous + ": " + "; ".join(
            f"{p} {views.metric_label(m, review.k)} {mean:.3f} ({pct:+.1f}%)"
            for p, m, mean, pct in zip(moved[contract.PIPELINE], moved[contract.METRIC], moved["mean"],
                                       moved["change_pct"]))
            + ".")
    if len(alerts):
        found = incidents(alerts, pd.DataFrame({contract.RUN_DATE: pd.to_datetime(list(review.run_dates))}))
        started = found[found["start"] >= pd.Timestamp(review.start)]
        first = found.sort_values("start", kind="stable").iloc[0]
        owner = f"{first['pipeline']} {first['metric']}" if first["pipeline"] else "the corpus"
        parts.append(f"{review.counts.sentence('the week')} ({len(started)} incidents started this week); the "
                     f"first, {first['rule']} on {owner} from {first['start']:%Y-%m-%d}.")
        parts += [f"{c.rule} on {c.where} since {c.since:%Y-%m-%d}: {a.statement}." for c, a in review.counts.acknowledged]
    else:
        parts.append("No alert fired.")
    if len(review.events):
        notes = zip(review.events[contract.RUN_DATE], review.events[contract.EVENTS])
        parts.append("Run notes: " + "; ".join(f"{d:%Y-%m-%d} {e}" for d, e in notes) + ".")
    top = review.regressions.head(3)
    if len(top):
        texts = gold_texts or {}
        parts.append("Most regressed: " + "; ".join(
            f"{q} ({p}, {c:+.2f}{': ' + texts[q] if q in texts else ''})"
            for q, p, c in zip(top[contract.QUESTION_ID], top[contract.PIPELINE], top["change"])) + ".")
    return " ".join(parts)


def latest_week(runs: pd.DataFrame) -> str:
    available = weekly_views.weeks(runs)
    if not available:
        raise ReportError("no runs yet: nothing to review")
    return available[-1]


def default_path(data_dir: Path, week: str) -> Path:
    """Where `python -m pipeline report` writes a week's review without --out: beside the history it reviews
    (a data directory is not committed), never into the current directory."""
    return Path(data_dir) / REPORTS_DIR / f"review-{week}.html"


def weekly_review_html(data_dir: Path, week: str) -> str:
    """The weekly review of `week` ("2026-W48") for the history in `data_dir`, as a self-contained HTML page.
    Reads the store, writes nothing; the same files give the same bytes."""
    data_dir = Path(data_dir)
    texts = {q: g.question for q, g in views.gold_questions(views.settings(data_dir).gold).items()}
    review = weekly_review(store.read_runs(data_dir), store.read_metrics(data_dir),
                           store.read_per_question(data_dir), store.read(data_dir, contract.ALERTS), week,
                           gold_texts=texts, silences=read_silences(data_dir), config=views.settings(data_dir).alerts,
                           candidates=store.read(data_dir, contract.CANARY))
    from pipeline.evidently_report import default_path as evidently_path

    return render_html(review, {d: evidently_path(data_dir, d).is_file() for d in review.run_dates})


def week_csv(metrics: pd.DataFrame, week: str) -> str:
    """The week's metrics.csv rows, as the store writes them (ISO dates, the contract's columns)."""
    rows = weekly_views.in_week(metrics, week)
    return rows.assign(**{contract.RUN_DATE: rows[contract.RUN_DATE].dt.strftime("%Y-%m-%d")}).to_csv(
        index=False, lineterminator="\n")


# --- rendering ----------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 60rem;
       color: #1f2328; padding: 0 1rem; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.meta { color: #57606a; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #e5e5e5; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.better { color: #1a7f37; } .worse { color: #cf222e; } .flat { color: #57606a; }
.alert { color: %(alert)s; font-weight: 600; } .warning { color: %(warning)s; font-weight: 600; }
.cards { display: flex; gap: 1rem; flex-wrap: wrap; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.5rem 0.9rem; min-width: 9rem; }
.card b { display: block; font-size: 1.4rem; }
.note { color: #57606a; font-size: 0.85rem; }
.summary { font-size: 1.05rem; background: #f6f8fa; padding: 0.6rem 0.9rem; border-radius: 6px; }
""" % {"alert": SEVERITY_COLOURS[ALERT], "warning": SEVERITY_COLOURS[WARNING]}


def _e(value: object) -> str:
    """Every text of the page goes through here: redacted (a history written before redaction may hold a
    secret in its events or messages), then escaped."""
    return html.escape(redact(value), quote=True)


def _num(value: float, fmt: str = ".3f") -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def _delta(change: float, change_pct: float, better: object) -> str:
    if change is None or math.isnan(change):
        return '<span class="flat">no previous week</span>'
    css = "flat" if better is None else ("better" if better else "worse")
    pct = "" if math.isnan(change_pct) else f" ({change_pct:+.1f}%)"
    return f'<span class="{css}">{change:+.3f}{pct}</span>'


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary_table(review: WeeklyReview) -> str:
    summary = review.summary
    if summary.empty:
        return '<p class="note">No metrics this week.</p>'
    metrics = [m for m in HEADLINE if m in set(summary[contract.METRIC])]
    rows = []
    for pipeline in views.values_of(summary, contract.PIPELINE):
        cells = [_e(pipeline)]
        for metric in metrics:
            row = summary[(summary[contract.PIPELINE] == pipeline) & (summary[contract.METRIC] == metric)].iloc[0]
            cells.append(f"{_num(row['mean'])}<br>{_delta(row['change'], row['change_pct'], row['better'])}")
        rows.append(cells)
    headers = ["pipeline"] + [views.metric_label(m, review.k) for m in metrics]
    return _table(headers, rows, numeric=set(range(1, len(headers))))


def _chart_svg(review: WeeklyReview, width: int = 640, height: int = 220) -> str:
    """DEFAULT_METRIC@k per pipeline over both weeks as an inline SVG line chart (no script, no external file): the
    week boundary dashed, run notes as dotted lines, a circle in the severity's colour where an alert fired on the
    pipeline (on any of its series; a corpus-wide alert above the plot), its messages in the mark's tooltip."""
    daily = review.daily.dropna(subset=[contract.VALUE])
    if daily.empty:
        return ""
    days = sorted(daily[contract.RUN_DATE].unique())
    low, high = float(daily[contract.VALUE].min()), float(daily[contract.VALUE].max())
    pad = max((high - low) * 0.1, 0.01)
    low, high = max(0.0, low - pad), min(1.0, high + pad) if high <= 1 else high + pad
    left, right, top, bottom = 48, 12, 14, 34
    x = lambda i: left + (width - left - right) * (i / max(len(days) - 1, 1))  # noqa: E731
    y = lambda v: top + (height - top - bottom) * (1 - (v - low) / ((high - low) or 1))  # noqa: E731
    index = {d: i for i, d in enumerate(days)}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 22}" role="img" '
             f'aria-label="{_e(views.metric_label(DEFAULT_METRIC, review.k))} per pipeline">']
    for v in (low, (low + high) / 2, high):
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:.2f}</text>')
    monday = pd.Timestamp(review.start)
    if days[0] < monday <= days[-1]:
        split = x(sum(d < monday for d in days) - 0.5)
        parts.append(f'<line x1="{split:.1f}" x2="{split:.1f}" y1="{top}" y2="{height - bottom}" stroke="#999" '
                     f'stroke-dasharray="4 3"/>')
    for label, i in ((days[0], 0), (days[-1], len(days) - 1)):
        anchor = "start" if i == 0 else "end"
        parts.append(f'<text x="{x(i):.1f}" y="{height - bottom + 16}" font-size="11" text-anchor="{anchor}">'
                     f'{pd.Timestamp(label):%Y-%m-%d}</text>')
    for day, note in zip(review.notes[contract.RUN_DATE], review.notes[contract.EVENTS]):
        if day not in index:
            continue
        label = note if len(note) <= MAX_EVENT_LABEL else note[: MAX_EVENT_LABEL - 1] + "…"
        at = x(index[day])
        side = (at + 3, "start") if at < width / 2 else (at - 3, "end")  # the label stays inside the chart
        parts.append(f'<g class="event"><title>{day:%Y-%m-%d}: {_e(note)}</title>'
                     f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{top}" y2="{height - bottom}" '
                     f'stroke="{EVENT_COLOUR}" stroke-dasharray="1 3"/>'
                     f'<text x="{side[0]:.1f}" y="{height - bottom - 4}" font-size="10" text-anchor="{side[1]}" '
                     f'fill="{EVENT_COLOUR}">{_e(label)}</text></g>')
    pipelines = views.values_of(daily, contract.PIPELINE)
    colours = colour_map(pipelines)
    values = {(d, p): v for d, p, v in zip(daily[contract.RUN_DATE], daily[contract.PIPELINE], daily[contract.VALUE])}
    for n, pipeline in enumerate(pipelines):
        rows = daily[daily[contract.PIPELINE] == pipeline]
        points = " ".join(f"{x(index[d]):.1f},{y(v):.1f}"
                          for d, v in zip(rows[contract.RUN_DATE], rows[contract.VALUE]))
        parts.append(f'<polyline fill="none" stroke="{colours[pipeline]}" stroke-width="2" points="{points}"/>')
        parts.append(f'<text x="{left + n * 130}" y="{height + 16}" font-size="12" fill="{colours[pipeline]}">'
                     f'&#9632; {_e(pipeline)}</text>')
    for day, pipeline, severity, message in zip(review.marks[contract.RUN_DATE], review.marks[contract.PIPELINE],
                                                review.marks[contract.SEVERITY], review.marks[contract.MESSAGE]):
        # on the pipeline's line where it has a value that day; a corpus-wide alert above the plot
        if day not in index or (pipeline and (day, pipeline) not in values):
            continue
        cx, cy = x(index[day]), y(values[(day, pipeline)]) if pipeline else top - 8
        owner = f"{pipeline}: " if pipeline else "corpus: "
        parts.append(f'<g class="alert-mark {_e(severity)}"><title>{day:%Y-%m-%d} {_e(owner)}{_e(message)}</title>'
                     f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="none" stroke="{SEVERITY_COLOURS[severity]}" '
                     f'stroke-width="2"/></g>')
    parts.append("</svg>")
    return "".join(parts)


def _alerts_section(review: WeeklyReview) -> str:
    alerts = review.alerts
    if alerts.empty:
        return '<p class="note">No alert fired this week.</p>'
    new = is_new(alerts)
    counts = alerts.assign(new=new).groupby(contract.SEVERITY)["new"].agg(["size", "sum"])
    lines = review.counts.sentence("the week") + ": " + ", ".join(
        f"{int(counts.at[s, 'size'])} {s} rows ({int(counts.at[s, 'sum'])} new)" for s in (ALERT, WARNING)
        if s in counts.index)
    rows = [[f"{d:%Y-%m-%d}", f'<span class="{_e(s)}">{_e(s)}</span>', _e(r), _e(p or "corpus"), _e(m), _e(msg)]
            for d, s, r, p, m, msg in zip(alerts[contract.RUN_DATE], alerts[contract.SEVERITY], alerts[contract.RULE],
                                          alerts[contract.PIPELINE].fillna(""), alerts[contract.METRIC],
                                          alerts[contract.MESSAGE])]
    return f"<p>{_e(lines)}.</p>" + _table(["date", "severity", "rule", "pipeline", "series", "message"], rows)


def _regressions_section(review: WeeklyReview) -> str:
    table = review.regressions
    label = views.metric_label(DEFAULT_METRIC, review.k)
    if table.empty:
        return f'<p class="note">No question\'s weekly {_e(label)} fell against {_e(review.previous)}.</p>'
    rows = [[_e(q), _e(p), _num(b), _num(a), f'<span class="worse">{c:+.3f}</span>']
            for q, p, b, a, c in zip(table[contract.QUESTION_ID], table[contract.PIPELINE], table["previous"],
                                     table["mean"], table["change"])]
    return _table(["question", "pipeline", f"{label} {review.previous}", f"{label} {review.week}", "change"], rows,
                  numeric={2, 3, 4})


def _persistence_section(review: WeeklyReview) -> str:
    """The pipelines ranked by effectiveness and by persistence (LongEval's relative drop against the reference
    period), the two ranks side by side: the most effective is not always the steadiest."""
    result = review.persistence
    if not result.ready:
        return f'<p class="note">{_e(result.waiting())}</p>'
    intro = f"<p>{_e(result.describe())}</p>"
    rows = []
    for p in result.pipelines:
        cells = [_e(p.pipeline), str(p.effectiveness_rank), str(p.persistence_rank)]
        for metric in PERSISTENCE_METRICS:
            level = p.levels[metric]
            cells += [_num(level.now), _num(level.reference), _num(level.drop * 100, "+.1f") + "%"]
        rows.append(cells)
    headers = ["pipeline", "rank by effectiveness", "rank by persistence"]
    for metric in PERSISTENCE_METRICS:
        label = views.metric_label(metric, result.k)
        headers += [f"{label} now", f"{label} reference", f"relative {views.metric_label(metric)} drop"]
    return intro + _table(headers, rows, numeric=set(range(1, len(headers))))


def _corpus_section(review: WeeklyReview) -> str:
    c = review.corpus
    start = "–" if c.docs_start is None else f"{c.docs_start:,}"
    end = "–" if c.docs_end is None else f"{c.docs_end:,}"
    cards = [("runs", f"{c.runs}"), ("documents", f"{start} → {end}"), ("new", f"+{c.docs_new:,}"),
             ("updated", f"{c.docs_updated:,}"), ("deleted", f"−{c.docs_deleted:,}"),
             ("failed feed fetches", f"{c.feeds_failed} ({c.degraded_runs} runs)")]
    out = '<div class="cards">' + "".join(f'<div class="card">{_e(k)}<b>{_e(v)}</b></div>' for k, v in cards) + "</div>"
    if len(review.events):
        notes = zip(review.events[contract.RUN_DATE], review.events[contract.EVENTS])
        out += "<p>Run notes:</p><ul>" + "".join(f"<li>{d:%Y-%m-%d}: {_e(e)}</li>" for d, e in notes) + "</ul>"
    return out


def _every_metric_section(review: WeeklyReview) -> str:
    table = review.every_metric
    rows = [[_e(p), _e(views.series_name(m, k)), _num(mean), _num(prev), _delta(ch, pct, better)]
            for p, k, m, mean, prev, ch, pct, better in zip(
                table[contract.PIPELINE], table[contract.K], table[contract.METRIC], table["mean"], table["previous"],
                table["change"], table["change_pct"], table["better"])]
    return ("<details><summary>Every metric at every k</summary>"
            + _table(["pipeline", "series", review.week, review.previous, "change"], rows, numeric={2, 3, 4})
            + "</details>")


def _evidently_section(review: WeeklyReview, built: Mapping[date, bool]) -> str:
    """Each run's Evidently report of its drift window: a link (relative: beside this review in the reports
    folder) to those `built`, else the command that builds it."""
    from pipeline.evidently_report import file_name

    items = [f'<li><a href="{_e(file_name(d))}">{d:%Y-%m-%d}</a></li>' if built.get(d) else
             f"<li>{d:%Y-%m-%d}: not built; <code>driftwatch evidently-report --date {d:%Y-%m-%d}</code></li>"
             for d in review.run_dates]
    return "<ul>" + "".join(items) + "</ul>"


def render_html(review: WeeklyReview, evidently_built: Mapping[date, bool] | None = None) -> str:
    """The review as a self-contained HTML page: inline CSS and SVG, no script, every stored text escaped.
    `evidently_built`: which run dates have an Evidently report beside the review (linked; the others get the
    command that builds one)."""
    runs = len(review.run_dates)
    span = f"{review.start:%Y-%m-%d} to {review.end:%Y-%m-%d}"
    label = views.metric_label(DEFAULT_METRIC, review.k)
    body = [
        f"<h1>driftwatch weekly review: {_e(review.week)}</h1>",
        f'<p class="meta">{_e(span)}, {runs} run{"s" if runs != 1 else ""}, compared with {_e(review.previous)} '
        f"(weekly means of the daily runs; changes in green are improvements, in red regressions).</p>",
        f'<p class="summary">{_e(summary_paragraph(review, review.gold_texts))}</p>',
        f"<h2>Metrics at k = {review.k}</h2>", _summary_table(review),
        f"<h2>{_e(label)} per run, {_e(review.previous)} and {_e(review.week)}</h2>", _chart_svg(review),
        "<h2>Alerts fired this week</h2>", _alerts_section(review),
        f"<h2>Most regressed questions ({_e(label)})</h2>", _regressions_section(review),
        "<h2>Persistence</h2>", _persistence_section(review),
        "<h2>Corpus changes</h2>", _corpus_section(review),
        "<h2>All series</h2>", _every_metric_section(review),
        "<h2>Evidently reports of the drift windows</h2>", _evidently_section(review, evidently_built or {}),
    ]
    if review.canary:  # after the metrics table: a candidate informs a switch, it is not an incident
        body[5:5] = ["<h2>Candidates (never paged)</h2>",
                     "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in review.canary) + "</ul>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>driftwatch weekly review {_e(review.week)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")

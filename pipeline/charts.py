"""Plotly figure builders for the dashboard: frames in (from `views`), figures out; no Streamlit, no I/O."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from pipeline.contract import ALERT, WARNING

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
PIPELINE_COLOURS = {"bm25": "#0072B2", "dense": "#009E73", "hybrid": "#CC79A7", "hybrid_rerank": "#E69F00"}
SPARE_COLOURS = ("#56B4E9", "#D55E00", "#999933", "#882255", "#44AA99", "#332288", "#000000")
SEVERITY_COLOURS = {ALERT: "#D62728", WARNING: "#FF7F0E"}
SEVERITY_SYMBOLS = {ALERT: "x", WARNING: "triangle-up"}
REFERENCE_COLOUR, CURRENT_COLOUR = "#7F7F7F", "#D55E00"
EVENT_COLOUR = "#555555"
QRELS_COLOUR = "#6a3d9a"  # the qrels versions' markers on the Trends chart
DATE_AXIS = "run date"
DATE_HOVER = "%{x|%Y-%m-%d}"
VALUE_FORMAT = ".4f"
MAX_EVENT_LABEL = 40


def colour_map(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per name: the pipelines' own, then the spare palette in order."""
    spare = iter(SPARE_COLOURS * (len(names) // len(SPARE_COLOURS) + 1))
    return {n: PIPELINE_COLOURS.get(n) or next(spare) for n in names}


def hover_text(text: object) -> str:
    """Text safe to show in a Plotly label or hover: markup escaped (Plotly renders a subset of HTML, and
    the text may come from a feed), line breaks as <br>."""
    return html.escape(str(text), quote=False).replace("\n", "<br>")


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, **layout) -> go.Figure:
    fig.update_layout(title={"text": hover_text(title)}, template="plotly_white", hovermode="closest",
                      legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0},
                      margin={"t": 60, "b": 90, "l": 60, "r": 20}, **layout)
    fig.update_xaxes(title_text=x_title, title_standoff=8, automargin=True)
    fig.update_yaxes(title_text=y_title)
    return fig


DAY_MS = 86_400_000
SHORT_SPAN_DAYS = 14  # up to this many days, one tick per day
DATE_TICKS = "%b %d"
# A legend on the figure's bottom edge, under the x-axis title (the bottom margin holds both).
FOOT_LEGEND = {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0}
TREND_TICKS, SPARK_TICKS = 6, 3  # at most this many date ticks on a Trends panel, on a sparkline


def date_axis(fig: go.Figure, dates: object = None, *, pad_days: float = 0.5, max_ticks: int | None = None) -> go.Figure:
    """A daily date x-axis on every panel: dates only (no hour ticks), ticks a whole number of days apart (one a
    day on short spans; with `max_ticks`, at most that many), and the range fitted to `dates` (half a day either
    side) so labels, shapes and event notes do not stretch it past the runs. Ticks less than a day apart would
    print the same date twice."""
    fig.update_xaxes(type="date", tickformat=DATE_TICKS, hoverformat="%Y-%m-%d")
    days = pd.to_datetime(pd.Series(list(dates) if dates is not None else [], dtype=object), errors="coerce").dropna()
    if days.empty:
        return fig
    first, last = days.min().normalize(), days.max().normalize()
    span = (last - first).days
    step = 1 if max_ticks is None and span <= SHORT_SPAN_DAYS else (
        max(1, math.ceil((span + 1) / max_ticks)) if max_ticks else None)
    if step:
        fig.update_xaxes(dtick=DAY_MS * step, tick0=first.strftime("%Y-%m-%d"))
    pad = pd.Timedelta(days=pad_days)
    fig.update_xaxes(range=[(first - pad).strftime("%Y-%m-%d %H:%M"), (last + pad).strftime("%Y-%m-%d %H:%M")])
    return fig


def _empty(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(text=hover_text(message), x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font={"size": 14})
    return fig


def add_alert_markers(fig: go.Figure, points: pd.DataFrame, x: str = "run_date", y: str = "value") -> None:
    """One trace per severity: a marker on each breach, its messages in the hover."""
    if points is None or points.empty:
        return
    for severity in (ALERT, WARNING):
        rows = points[points["severity"] == severity]
        if rows.empty:
            continue
        owners = rows["pipeline"].fillna("") if "pipeline" in rows else [""] * len(rows)
        labels = [hover_text(f"{p + ': ' if p else ''}{m}") for p, m in zip(owners, rows["message"])]
        fig.add_trace(go.Scatter(
            x=rows[x], y=rows[y], mode="markers", name=f"{severity} fired",
            marker={"symbol": SEVERITY_SYMBOLS[severity], "size": 13, "color": SEVERITY_COLOURS[severity],
                    "line": {"width": 2, "color": SEVERITY_COLOURS[severity]}},
            text=labels, hovertemplate=f"{DATE_HOVER}<br>%{{y:{VALUE_FORMAT}}}<br>%{{text}}<extra>{severity}</extra>"))


EVENT_ROWS = 3  # run notes are staggered over this many lines at the top of the plot


def event_note(day: object, note: str, row: int, dates: object, **where) -> dict:
    """A run note's label: inside the top of the plot (above it sit the titles), a line lower for each earlier
    note (`row`) so that notes of nearby runs do not overprint, and towards the middle of the runs `dates` (left of
    its line in their second half) so that it stays inside its panel; the full note on hover."""
    label = note if len(note) <= MAX_EVENT_LABEL else note[: MAX_EVENT_LABEL - 1] + "…"
    days = pd.to_datetime(pd.Series(list(dates), dtype=object), errors="coerce").dropna()
    late = len(days) > 0 and pd.Timestamp(day) > days.min() + (days.max() - days.min()) / 2
    return {"x": day, "y": 1 - 0.09 * (row % EVENT_ROWS), "yanchor": "top", "xanchor": "right" if late else "left",
            "showarrow": False,
            "text": hover_text(label), "hovertext": hover_text(f"{pd.Timestamp(day):%Y-%m-%d}: {note}"),
            "font": {"size": 10, "color": EVENT_COLOUR}, "bgcolor": "rgba(255,255,255,0.75)", **where}


def add_events(fig: go.Figure, events: pd.DataFrame | None, dates: object = ()) -> None:
    """A dotted vertical line and a short label per run with an `events` note (the full note on hover); `dates`:
    the runs drawn."""
    if events is None:
        return
    for row, (day, note) in enumerate(zip(events["run_date"], events["events"])):
        fig.add_shape(type="line", x0=day, x1=day, y0=0, y1=1, yref="paper",
                      line={"color": EVENT_COLOUR, "width": 1, "dash": "dot"})
        fig.add_annotation(**event_note(day, note, row, dates, yref="paper"))


def add_levels(fig: go.Figure, levels: Sequence[tuple[float, str]]) -> None:
    """Horizontal reference lines (thresholds), each labelled with its name and value."""
    for value, name in levels:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        fig.add_hline(y=value, line={"color": "#444444", "width": 1, "dash": "dash"},
                      annotation_text=hover_text(f"{name} {value:g}"), annotation_position="top left")


def _spans(days: Sequence[pd.Timestamp]) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Consecutive run dates (gaps under two days) as (first, last) spans."""
    out: list[list[pd.Timestamp]] = []
    for day in sorted(pd.to_datetime(pd.Series(list(days))).unique()):
        day = pd.Timestamp(day)
        if out and day - out[-1][1] <= pd.Timedelta(days=1):
            out[-1][1] = day
        else:
            out.append([day, day])
    return [(a, b) for a, b in out]


def trend_figure(trend: pd.DataFrame, metric_label: str, points: pd.DataFrame | None = None,
                 events: pd.DataFrame | None = None, *, threshold_note: str = "",
                 maintained: pd.DataFrame | None = None, versions: pd.DataFrame | None = None) -> go.Figure:
    """A metric@k as small multiples, one panel per pipeline (from `views.trends.trend`, which calls the rules'
    own functions): the series, and for a watched series only the drop rule's baseline and the band out to its
    firing edge and the slow-drift rule's edge; the configured floor; runs with an alert on the series shaded
    (red: alert, orange: warning); run events as dotted lines. One short legend for every panel.
    `maintained` (`views.trends.maintained`): the series re-scored with the maintained qrels, dashed beside the
    frozen one in the pipeline's colour; `versions`: each qrels version as a vertical marker."""
    from plotly.subplots import make_subplots

    pipelines = list(pd.unique(trend["pipeline"]))
    colours = colour_map(pipelines)
    fig = make_subplots(rows=1, cols=max(1, len(pipelines)), shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=[hover_text(p) for p in pipelines])
    drop = f" ({threshold_note})" if threshold_note else ""
    shown: set[str] = set()

    def legend(name: str) -> dict:
        first = name not in shown
        shown.add(name)
        return {"name": name, "legendgroup": name, "showlegend": first}

    for col, pipeline in enumerate(pipelines, start=1):
        rows = trend[trend["pipeline"] == pipeline]
        colour = colours[pipeline]
        band = rows.dropna(subset=["baseline", "edge"])
        if len(band):
            fig.add_trace(go.Scatter(x=band["run_date"], y=band["baseline"], mode="lines",
                                     line={"color": "#555555", "width": 1.2, "dash": "dot"}, **legend("drop baseline"),
                                     hovertemplate=f"{DATE_HOVER}<br>baseline: %{{y:{VALUE_FORMAT}}}<extra></extra>"),
                          row=1, col=col)
            fig.add_trace(go.Scatter(
                x=band["run_date"], y=band["edge"], mode="lines", line={"color": "#555555", "width": 1, "dash": "dash"},
                fill="tonexty", fillcolor="rgba(85,85,85,0.10)", **legend(f"drop edge{drop}"),
                hovertemplate=f"{DATE_HOVER}<br>drop fires past: %{{y:{VALUE_FORMAT}}}<extra></extra>"), row=1, col=col)
        slow = rows.dropna(subset=["reference", "reference_edge"])
        if len(slow):
            fig.add_trace(go.Scatter(
                x=slow["run_date"], y=slow["reference_edge"], mode="lines",
                line={"color": "#555555", "width": 1, "dash": "longdashdot"}, **legend("slow-drift edge"),
                hovertemplate=(f"{DATE_HOVER}<br>slow drift fires when the moving mean passes: "
                               f"%{{y:{VALUE_FORMAT}}}<extra></extra>")), row=1, col=col)
        fig.add_trace(go.Scatter(
            x=rows["run_date"], y=rows["value"], mode="lines+markers", line={"color": colour, "width": 2.5},
            marker={"size": 4}, showlegend=False, name=pipeline,
            hovertemplate=f"{DATE_HOVER}<br>{pipeline} {hover_text(metric_label)}: %{{y:{VALUE_FORMAT}}}<extra></extra>"),
            row=1, col=col)
        kept = maintained[maintained["pipeline"] == pipeline] if maintained is not None else None
        if kept is not None and len(kept):
            fig.add_trace(go.Scatter(
                x=kept["run_date"], y=kept["value"], mode="lines", line={"color": colour, "width": 2, "dash": "dash"},
                **legend("maintained qrels (dashed)"),
                hovertemplate=(f"{DATE_HOVER}<br>{pipeline} {hover_text(metric_label)}, maintained qrels: "
                               f"%{{y:{VALUE_FORMAT}}}<extra></extra>")), row=1, col=col)
        for day, label in ([] if versions is None else zip(versions["run_date"], versions["label"])):
            fig.add_vline(x=day, line={"color": QRELS_COLOUR, "width": 1.5, "dash": "dashdot"}, row=1, col=col)
            if col == 1:
                fig.add_annotation(x=day, y=0.02, yref="y domain", text=hover_text(label), showarrow=False,
                                   xanchor="left", font={"size": 10, "color": QRELS_COLOUR}, row=1, col=1)
        if points is not None and len(points):
            mine = points[points["pipeline"].fillna("") == pipeline]
            for severity in (WARNING, ALERT):  # alert spans drawn over warning spans
                for first, last in _spans(mine.loc[mine["severity"] == severity, "run_date"]):
                    fig.add_vrect(x0=first - pd.Timedelta(hours=12), x1=last + pd.Timedelta(hours=12), line_width=0,
                                  fillcolor=_rgba(SEVERITY_COLOURS[severity], 0.14), layer="below", row=1, col=col)
        for row, (day, note) in enumerate([] if events is None else zip(events["run_date"], events["events"])):
            fig.add_vline(x=day, line={"color": EVENT_COLOUR, "width": 1, "dash": "dot"}, row=1, col=col)
            if col == 1:
                fig.add_annotation(**event_note(day, note, row, trend["run_date"], yref="y domain"), row=1, col=1)
    floors = trend["floor"].dropna().unique() if "floor" in trend else []
    for value in floors:
        fig.add_hline(y=float(value), line={"color": "#444444", "width": 1, "dash": "dash"},
                      annotation_text=hover_text(f"floor {value:g}"), annotation_position="bottom left")
    for severity in (ALERT, WARNING):
        if points is not None and (points["severity"] == severity).any():
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"{severity} (shaded runs)",
                                     marker={"symbol": "square", "size": 12,
                                             "color": _rgba(SEVERITY_COLOURS[severity], 0.35)}))
    _layout(fig, f"{metric_label} by pipeline", DATE_AXIS, f"{metric_label} (mean over questions, 0–1)", height=400)
    fig.update_yaxes(title_text=None, col=None)  # one y title, on the first panel: the panels share the axis
    fig.update_yaxes(title_text=f"{metric_label} (mean over questions, 0–1)", row=1, col=1)
    # The legend at the foot (_layout's): above the panels it ran into the title, the panel titles and run notes.
    fig.update_layout(legend=FOOT_LEGEND, margin={"t": 80, "b": 120})
    date_axis(fig, trend["run_date"] if len(trend) else None, max_ticks=TREND_TICKS)
    if trend.empty:
        _empty(fig, "no runs in the chosen range")
    return fig


def lines_figure(frame: pd.DataFrame, group: str, title: str, y_title: str, *,
                 levels: Sequence[tuple[float, str]] = (), points: pd.DataFrame | None = None,
                 events: pd.DataFrame | None = None, value_format: str = VALUE_FORMAT,
                 labels: Mapping[str, str] | None = None) -> go.Figure:
    """One line per value of `group` over run_date (long frame: run_date, <group>, value), with optional
    threshold lines, alert markers and run events."""
    fig = go.Figure()
    names = list(pd.unique(frame[group])) if len(frame) else []
    colours = colour_map(names)
    for name in names:
        rows = frame[frame[group] == name].sort_values("run_date")
        label = (labels or {}).get(name, name)
        fig.add_trace(go.Scatter(
            x=rows["run_date"], y=rows["value"], mode="lines+markers", name=label,
            line={"color": colours[name], "width": 2}, marker={"size": 5},
            hovertemplate=f"{DATE_HOVER}<br>{hover_text(label)}: %{{y:{value_format}}}<extra></extra>"))
    add_levels(fig, levels)
    add_alert_markers(fig, points)
    add_events(fig, events, frame["run_date"] if len(frame) else ())
    _layout(fig, title, DATE_AXIS, y_title)
    date_axis(fig, frame["run_date"] if len(frame) else None)
    if not names:
        _empty(fig, "no data yet")
    return fig


def corpus_size_figure(runs: pd.DataFrame) -> go.Figure:
    """Documents in the corpus per run, with the day's additions, updates and deletions in the hover."""
    rows = runs.sort_values("run_date")
    fig = go.Figure(go.Scatter(
        x=rows["run_date"], y=rows["docs_total"], mode="lines+markers", name="documents",
        line={"color": PIPELINE_COLOURS["bm25"], "width": 2.5},
        customdata=rows[["docs_new", "docs_updated", "docs_deleted", "chunks_total"]].astype(float),
        hovertemplate=(f"{DATE_HOVER}<br>%{{y:,}} documents (%{{customdata[3]:,}} chunks)<br>"
                       "+%{customdata[0]:,} new, %{customdata[1]:,} updated, −%{customdata[2]:,} deleted"
                       "<extra></extra>")))
    _layout(fig, "Corpus size", DATE_AXIS, "documents in the corpus")
    date_axis(fig, rows["run_date"])
    if rows.empty:
        _empty(fig, "no runs yet")
    return fig


def heatmap_figure(matrix: pd.DataFrame, metric_label: str, pipeline: str, *, rows: str = "question",
                   title: str | None = None) -> go.Figure:
    """Questions (or other `rows`, in the matrix's order: largest regression on top) x run dates, coloured by
    value."""
    dates = [pd.Timestamp(c) for c in matrix.columns]
    fig = go.Figure(go.Heatmap(
        z=matrix.to_numpy(dtype=float), x=dates, y=[hover_text(q) for q in matrix.index], colorscale="Viridis",
        zmin=0, zmax=1, colorbar={"title": {"text": hover_text(metric_label)}}, xgap=1, ygap=1,
        hovertemplate=f"{rows} %{{y}}<br>{DATE_HOVER}<br>{hover_text(metric_label)}: %{{z:{VALUE_FORMAT}}}"
                      "<extra></extra>"))
    _layout(fig, title or f"{metric_label} per question, {pipeline} (largest regression first)", DATE_AXIS, rows,
            height=max(360, min(1600, 16 * len(matrix) + 140)))
    date_axis(fig, dates)
    fig.update_yaxes(autorange="reversed", type="category")
    if matrix.empty:
        _empty(fig, f"no {rows}s for this pipeline and k")
    return fig


def segment_heatmap_figure(matrix: pd.DataFrame, metric_label: str, pipeline: str) -> go.Figure:
    """Segments (rows, named with their n) x run dates of a metric's segment means."""
    return heatmap_figure(matrix, metric_label, pipeline, rows="segment",
                          title=f"{metric_label} per segment, {pipeline}")


def rank_figure(history: pd.DataFrame, question_id: str) -> go.Figure:
    """A question's first relevant rank over time, one panel per pipeline (shared date axis); integer ranks with
    rank 1 at the top, gaps where no relevant document was within the candidate depth."""
    from plotly.subplots import make_subplots

    pipelines = list(pd.unique(history["pipeline"]))
    colours = colour_map(pipelines)
    fig = make_subplots(rows=max(1, len(pipelines)), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[hover_text(p) for p in pipelines])
    for row, pipeline in enumerate(pipelines, start=1):
        rows = history[history["pipeline"] == pipeline]
        fig.add_trace(go.Scatter(
            x=rows["run_date"], y=rows["rank"], mode="lines+markers", name=pipeline, connectgaps=False,
            line={"color": colours[pipeline], "width": 2, "shape": "hv"}, marker={"size": 6}, showlegend=False,
            hovertemplate=f"{DATE_HOVER}<br>{pipeline}: first relevant document at rank %{{y:d}}<extra></extra>"),
            row=row, col=1)
    worst = history["rank"].max() if len(history) and history["rank"].notna().any() else 5
    _layout(fig, f"Rank of the first relevant document, question {question_id} (gap = not retrieved)", DATE_AXIS, "",
            height=max(260, 120 * len(pipelines) + 90), showlegend=False)
    fig.update_xaxes(title_text="", row=None)
    fig.update_xaxes(title_text=DATE_AXIS, row=max(1, len(pipelines)), col=1)
    fig.update_yaxes(title_text="rank", autorange=False, range=[float(worst) + 0.5, 0.5], tickformat="d",
                     dtick=1 if worst <= 10 else None)
    date_axis(fig, history["run_date"] if len(history) else None)
    if history.empty:
        _empty(fig, "no rows for this question")
    return fig


def projection_figure(points: pd.DataFrame, reference: str, current: str,
                      explained: tuple[float, float] = (math.nan, math.nan)) -> go.Figure:
    """Reference and current chunk embeddings on the reference's first two principal components."""
    fig = go.Figure()
    # The current corpus usually still holds the reference's chunks: draw it first, filled, and the
    # reference on top as rings, so both stay visible where they coincide.
    for side, day, colour in (("current", current, CURRENT_COLOUR), ("reference", reference, REFERENCE_COLOUR)):
        rows = points[points["side"] == side]
        ring = {"symbol": "circle-open", "size": 8, "line": {"width": 1.5}} if side == "reference" else {"size": 6}
        fig.add_trace(go.Scattergl(
            x=rows["x"], y=rows["y"], mode="markers", name=f"{side} ({day}, {len(rows)} chunks)",
            marker={"color": colour, "opacity": 0.8 if side == "reference" else 0.6, **ring},
            text=[hover_text(c) for c in rows["chunk_id"]],
            hovertemplate=f"{side} chunk %{{text}}<br>PC1 %{{x:.4f}}, PC2 %{{y:.4f}}<extra></extra>"))
    axis = lambda i: "PC%d" % (i + 1) + (f" ({explained[i]:.0%} of the reference variance)"  # noqa: E731
                                          if not math.isnan(explained[i]) else "")
    _layout(fig, f"Document embeddings: reference {reference} vs current {current} (PCA)", axis(0), axis(1))
    if points.empty:
        _empty(fig, "no cached embeddings to project")
    return fig


def composition_figure(frame: pd.DataFrame, by: str) -> go.Figure:
    """Documents present per run date, stacked by `by` (source or category)."""
    fig = go.Figure()
    groups = list(pd.unique(frame[by])) if len(frame) else []
    colours = colour_map(groups)
    for name in groups:
        rows = frame[frame[by] == name]
        fig.add_trace(go.Scatter(
            x=rows["run_date"], y=rows["documents"], mode="lines", stackgroup="one", name=hover_text(name),
            line={"color": colours[name], "width": 1, "shape": "hv"},
            hovertemplate=f"{DATE_HOVER}<br>{hover_text(name)}: %{{y:,}} documents<extra></extra>"))
    _layout(fig, f"Corpus composition by {by}", DATE_AXIS, "documents present")
    date_axis(fig, frame["run_date"] if len(frame) else None)
    if not groups:
        _empty(fig, "no corpus yet")
    return fig


def comparison_figure(frame: pd.DataFrame, group: str, title: str, y_title: str,
                      start: object | None = None, points: pd.DataFrame | None = None) -> go.Figure:
    """Original (solid) against simulated (dashed) series per `group` value, from a frame with run_date,
    <group>, value_original, value_simulated (as `simulate.compare` returns); the scenario's start marked."""
    fig = go.Figure()
    names = list(pd.unique(frame[group])) if len(frame) else []
    colours = colour_map(names)
    for name in names:
        rows = frame[frame[group] == name].sort_values("run_date")
        for column, label, dash in (("value_original", "original", "solid"), ("value_simulated", "simulated", "dash")):
            if rows[column].isna().all():
                continue
            fig.add_trace(go.Scatter(
                x=rows["run_date"], y=rows[column], mode="lines+markers", name=f"{hover_text(name)} {label}",
                legendgroup=name, line={"color": colours[name], "width": 2, "dash": dash}, marker={"size": 5},
                hovertemplate=f"{DATE_HOVER}<br>{hover_text(name)} {label}: %{{y:{VALUE_FORMAT}}}<extra></extra>"))
    add_alert_markers(fig, points)
    if start is not None:
        add_events(fig, pd.DataFrame({"run_date": [pd.Timestamp(start)], "events": ["scenario starts"]}),
                   frame["run_date"] if len(frame) else ())
    _layout(fig, title, DATE_AXIS, y_title)
    date_axis(fig, frame["run_date"] if len(frame) else None)
    if not names:
        _empty(fig, "nothing to compare")
    return fig


def alerts_timeline_figure(counts: pd.DataFrame) -> go.Figure:
    """Alerts per run date, stacked by severity."""
    fig = go.Figure()
    for severity in (ALERT, WARNING):
        rows = counts[counts["severity"] == severity]
        fig.add_trace(go.Bar(x=rows["run_date"], y=rows["alerts"], name=severity,
                             marker_color=SEVERITY_COLOURS[severity],
                             hovertemplate=f"{DATE_HOVER}<br>%{{y}} {severity} rows<extra></extra>"))
    _layout(fig, "Alerts per run", DATE_AXIS, "alert rows", barmode="stack")
    date_axis(fig, counts["run_date"] if len(counts) else None)
    fig.update_yaxes(tickformat="d", rangemode="tozero")
    if len(counts) and counts.groupby("run_date")["alerts"].sum().max() <= 5:
        fig.update_yaxes(dtick=1)
    if counts.empty:
        _empty(fig, "no alerts in the selection")
    return fig


def pool_figure(counts: pd.DataFrame, reasons: Sequence[str]) -> go.Figure:
    """Pairs pooled for judging per run date, stacked by reason (counts: run_date, reason, pairs)."""
    fig = go.Figure()
    colours = dict(zip(reasons, SPARE_COLOURS * (len(reasons) // len(SPARE_COLOURS) + 1)))
    for reason in reasons:
        rows = counts[counts["reason"] == reason]
        if len(rows):
            fig.add_trace(go.Bar(x=rows["run_date"], y=rows["pairs"], name=hover_text(reason),
                                 marker_color=colours[reason],
                                 hovertemplate=f"{DATE_HOVER}<br>%{{y}} {hover_text(reason)}<extra></extra>"))
    _layout(fig, "The pool per run: pairs to judge, by reason", DATE_AXIS, "pairs", barmode="stack")
    date_axis(fig, counts["run_date"] if len(counts) else None)
    fig.update_yaxes(tickformat="d", rangemode="tozero")
    if counts.empty:
        _empty(fig, "no pool yet: the daily job records it (pool.csv)")
    return fig


def weekly_figure(weekly: pd.DataFrame, metric_label: str, week: str, previous: str) -> go.Figure:
    """One metric@k per pipeline: the previous week's mean against this week's (rows of `views.weekly_means`)."""
    fig = go.Figure()
    for column, label, colour in (("previous", previous, REFERENCE_COLOUR), ("mean", week, PIPELINE_COLOURS["bm25"])):
        fig.add_trace(go.Bar(x=weekly["pipeline"], y=weekly[column], name=label, marker_color=colour,
                             hovertemplate=f"%{{x}} {label}: %{{y:{VALUE_FORMAT}}}<extra></extra>"))
    _layout(fig, f"{metric_label}: weekly mean, {week} against {previous}", "pipeline",
            f"{metric_label} (weekly mean, 0–1)", barmode="group")
    if weekly.empty:
        _empty(fig, "no runs this week")
    return fig


STATUS_COLOURS = {ALERT: SEVERITY_COLOURS[ALERT], WARNING: SEVERITY_COLOURS[WARNING], "ok": "#1A7F37"}


def sparklines_figure(panels: Sequence[tuple[str, pd.DataFrame, str, pd.DataFrame | None]],
                      events: pd.DataFrame | None = None, height: int = 170) -> go.Figure:
    """Small multiples in one row: per panel (title, frame of run_date/value/reference, tone, alert points) the
    series coloured by its tone ("ok", "warning", "alert"), its reference mean dotted, alert markers and the run
    events as vertical lines."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=max(1, len(panels)), subplot_titles=[hover_text(t) for t, *_ in panels],
                        horizontal_spacing=0.04)
    for col, (title, frame, tone, points) in enumerate(panels, start=1):
        colour = STATUS_COLOURS.get(tone, STATUS_COLOURS["ok"])
        fig.add_trace(go.Scatter(x=frame["run_date"], y=frame["value"], mode="lines", line={"color": colour, "width": 2},
                                 showlegend=False,
                                 hovertemplate=f"{DATE_HOVER}<br>{hover_text(title)}: %{{y:.3f}}<extra></extra>"),
                      row=1, col=col)
        reference = frame["reference"].dropna()
        if len(reference):
            fig.add_trace(go.Scatter(x=frame["run_date"], y=frame["reference"], mode="lines", showlegend=False,
                                     line={"color": REFERENCE_COLOUR, "width": 1, "dash": "dot"},
                                     hovertemplate="reference period mean: %{y:.3f}<extra></extra>"),
                          row=1, col=col)
        if points is not None and len(points):
            for severity in (ALERT, WARNING):
                rows = points[points["severity"] == severity]
                if len(rows):
                    fig.add_trace(go.Scatter(
                        x=rows["run_date"], y=rows["value"], mode="markers", showlegend=False,
                        marker={"symbol": SEVERITY_SYMBOLS[severity], "size": 7, "color": SEVERITY_COLOURS[severity]},
                        text=[hover_text(m) for m in rows["message"]],
                        hovertemplate=f"{DATE_HOVER}<br>%{{text}}<extra>{severity}</extra>"), row=1, col=col)
        for day in ([] if events is None else events["run_date"]):
            fig.add_vline(x=day, line={"color": EVENT_COLOUR, "width": 1, "dash": "dot"}, row=1, col=col)
    fig.update_layout(template="plotly_white", height=height, margin={"t": 28, "b": 24, "l": 36, "r": 8},
                      hovermode="closest")
    fig.update_annotations(font_size=12)
    dates = [d for _, frame, *_ in panels for d in frame["run_date"]]
    date_axis(fig, dates or None, max_ticks=SPARK_TICKS)
    fig.update_xaxes(showgrid=False)
    fig.update_yaxes(nticks=4)
    return fig

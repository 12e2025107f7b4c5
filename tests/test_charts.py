"""The dashboard's figures (pipeline/charts.py): traces, values, titles, axis labels and hover text of figures built
from small constructed frames. No Streamlit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from pipeline import charts

DAYS = pd.to_datetime(["2026-11-02", "2026-11-03", "2026-11-04"])


def traces(fig: go.Figure) -> dict[str, go.BaseTraceType]:
    return {t.name: t for t in fig.data if t.name}


def trend_frame() -> pd.DataFrame:
    rows = []
    for pipeline, values in (("bm25", (0.5, 0.6, 0.4)), ("dense", (0.8, 0.8, 0.9))):
        for i, (day, value) in enumerate(zip(DAYS, values)):
            rows.append({"run_date": day, "pipeline": pipeline, "value": value,
                         "baseline": math.nan if i < 2 else 0.55, "edge": math.nan if i < 2 else 0.45,
                         "reference": math.nan if i < 1 else 0.6, "ewma": math.nan if i < 1 else 0.58,
                         "reference_edge": math.nan if i < 1 else 0.5, "floor": 0.3})
    return pd.DataFrame(rows)


def test_trend_figure_draws_values_the_rules_edges_floor_alerts_and_events():
    points = pd.DataFrame({"run_date": [DAYS[2]], "pipeline": ["bm25"], "value": [0.4], "severity": ["alert"],
                           "message": ["[alert / drop] recall@5 of bm25 fell <20%>"]})
    events = pd.DataFrame({"run_date": [DAYS[1]], "events": ["injected <b>40</b> docs"]})
    fig = charts.trend_figure(trend_frame(), "recall@5", points, events, threshold_note="10% below the baseline")
    named = traces(fig)
    assert list(named["bm25"].y) == [0.5, 0.6, 0.4] and list(named["dense"].y) == [0.8, 0.8, 0.9]
    assert named["bm25"].xaxis == "x" and named["dense"].xaxis == "x2"  # a panel per pipeline
    assert list(named["drop baseline"].y) == [0.55]  # only bm25 has a band: one legend entry per kind of line
    band = named["drop edge (10% below the baseline)"]
    assert band.fill == "tonexty" and list(band.y) == [0.45]  # shaded from the baseline out to the edge
    assert list(named["slow-drift edge"].y) == [0.5, 0.5]
    assert [s.y0 for s in fig.layout.shapes if s.y0 == s.y1] == [0.3, 0.3]  # the floor line, in each panel
    span, = [s for s in fig.layout.shapes if s.type == "rect"]  # the alert's run shaded in bm25's panel
    assert span.xref == "x" and pd.Timestamp(span.x0) < DAYS[2] < pd.Timestamp(span.x1)
    assert "alert (shaded runs)" in named
    event = [a for a in fig.layout.annotations if "injected" in a.text][0]
    assert event.text == "injected &lt;b&gt;40&lt;/b&gt; docs"
    assert fig.layout.title.text == "recall@5 by pipeline"
    assert fig.layout.xaxis.title.text == "run date"
    assert fig.layout.yaxis.title.text == "recall@5 (mean over questions, 0–1)"
    assert fig.layout.yaxis2.title.text is None  # one y title: on each panel it ran into the one before
    assert "%{y:.4f}" in named["bm25"].hovertemplate and "%{x|%Y-%m-%d}" in named["bm25"].hovertemplate


def test_pipelines_keep_their_colours_and_others_get_spares():
    colours = charts.colour_map(["dense", "custom", "bm25", "other"])
    assert colours["dense"] == charts.PIPELINE_COLOURS["dense"] and colours["bm25"] == charts.PIPELINE_COLOURS["bm25"]
    assert colours["custom"] == charts.SPARE_COLOURS[0] and colours["other"] == charts.SPARE_COLOURS[1]


def test_hover_text_escapes_markup():
    assert charts.hover_text("<img src=x onerror=alert(1)>\nline") == "&lt;img src=x onerror=alert(1)&gt;<br>line"


def test_lines_figure_levels_labels_and_markers():
    frame = pd.DataFrame({"run_date": list(DAYS) * 2, "statistic": ["psi_mean"] * 3 + ["psi_max"] * 3,
                          "value": [0.05, 0.12, 0.25, 0.1, 0.2, 0.4]})
    points = pd.DataFrame({"run_date": [DAYS[2]], "pipeline": [""], "value": [0.25], "severity": ["warning"],
                           "message": ["psi_mean is 0.25"]})
    fig = charts.lines_figure(frame, "statistic", "PSI", "PSI (unitless)", levels=[(0.1, "warning"), (0.2, "alert")],
                              points=points, labels={"psi_mean": "PSI mean"})
    named = traces(fig)
    assert list(named["PSI mean"].y) == [0.05, 0.12, 0.25] and list(named["psi_max"].y) == [0.1, 0.2, 0.4]
    assert sorted(s.y0 for s in fig.layout.shapes) == [0.1, 0.2]
    assert {a.text for a in fig.layout.annotations} >= {"warning 0.1", "alert 0.2"}
    assert list(named["warning fired"].y) == [0.25]
    assert named["warning fired"].marker.symbol == charts.SEVERITY_SYMBOLS["warning"]
    assert (fig.layout.title.text, fig.layout.yaxis.title.text) == ("PSI", "PSI (unitless)")


def test_corpus_size_figure():
    runs = pd.DataFrame({"run_date": DAYS, "docs_total": [10, 12, 11], "docs_new": [10, 2, 0],
                         "docs_updated": [0, 1, 0], "docs_deleted": [0, 0, 1], "chunks_total": [20, 24, 22]})
    fig = charts.corpus_size_figure(runs)
    assert list(fig.data[0].y) == [10, 12, 11]
    assert fig.data[0].customdata[1].tolist() == [2, 1, 0, 24]
    assert fig.layout.yaxis.title.text == "documents in the corpus" and fig.layout.title.text == "Corpus size"


def test_heatmap_keeps_the_row_order_with_the_worst_on_top():
    matrix = pd.DataFrame([[1.0, 0.0], [0.5, 0.5]], index=["q7", "q1"], columns=DAYS[:2])
    fig = charts.heatmap_figure(matrix, "recall@5", "bm25")
    heat = fig.data[0]
    assert list(heat.y) == ["q7", "q1"] and np.array(heat.z).tolist() == [[1.0, 0.0], [0.5, 0.5]]
    assert (heat.zmin, heat.zmax) == (0, 1)
    assert fig.layout.yaxis.autorange == "reversed"
    assert fig.layout.title.text == "recall@5 per question, bm25 (largest regression first)"


def test_rank_figure_puts_rank_one_on_top():
    history = pd.DataFrame({"run_date": DAYS, "pipeline": ["dense"] * 3, "rank": [1.0, math.nan, 4.0]})
    fig = charts.rank_figure(history, "q3")
    assert fig.data[0].name == "dense" and fig.data[0].y[0] == 1.0 and math.isnan(fig.data[0].y[1])
    low, high = fig.layout.yaxis.range
    assert (low, high) == (4.5, 0.5) and fig.layout.yaxis.dtick == 1  # rank 1 on top, whole ranks only
    assert fig.layout.yaxis.title.text.startswith("rank")


def test_projection_figure():
    points = pd.DataFrame({"side": ["reference", "reference", "current"], "x": [0.1, -0.1, 0.5],
                           "y": [0.0, 0.2, 0.3], "chunk_id": ["a#0", "b#0", "<c>#0"], "doc_id": ["a", "b", "<c>"]})
    fig = charts.projection_figure(points, "2026-10-24", "2026-11-22", (0.25, 0.125))
    names = [t.name for t in fig.data]
    assert names == ["current (2026-11-22, 1 chunks)", "reference (2026-10-24, 2 chunks)"]  # reference on top
    assert list(fig.data[0].x) == [0.5] and list(fig.data[0].text) == ["&lt;c&gt;#0"]
    assert fig.data[1].marker.symbol == "circle-open"
    assert fig.layout.xaxis.title.text == "PC1 (25% of the reference variance)"
    assert fig.layout.yaxis.title.text == "PC2 (12% of the reference variance)"


def test_composition_figure_stacks_the_groups():
    frame = pd.DataFrame({"run_date": list(DAYS) * 2, "source": ["a"] * 3 + ["b"] * 3, "documents": [1, 2, 2, 0, 1, 3]})
    fig = charts.composition_figure(frame, "source")
    assert [t.name for t in fig.data] == ["a", "b"] and all(t.stackgroup == "one" for t in fig.data)
    assert list(fig.data[1].y) == [0, 1, 3] and fig.layout.title.text == "Corpus composition by source"


def test_comparison_figure_solid_original_dashed_simulated():
    frame = pd.DataFrame({"run_date": DAYS, "pipeline": ["bm25"] * 3, "value_original": [0.5, 0.5, 0.5],
                          "value_simulated": [0.5, 0.4, 0.3]})
    fig = charts.comparison_figure(frame, "pipeline", "recall@5", "recall@5 (0–1)", start=DAYS[1])
    named = traces(fig)
    assert named["bm25 original"].line.dash == "solid" and named["bm25 simulated"].line.dash == "dash"
    assert list(named["bm25 simulated"].y) == [0.5, 0.4, 0.3]
    assert [a.text for a in fig.layout.annotations] == ["scenario starts"]
    only_original = charts.comparison_figure(frame.assign(value_simulated=math.nan), "pipeline", "t", "y")
    assert [t.name for t in only_original.data] == ["bm25 original"]


def test_alerts_timeline_and_weekly_figures():
    counts = pd.DataFrame({"run_date": [DAYS[0], DAYS[0], DAYS[2]], "severity": ["alert", "warning", "alert"],
                           "alerts": [2, 1, 3]})
    fig = charts.alerts_timeline_figure(counts)
    assert [t.name for t in fig.data] == ["alert", "warning"] and list(fig.data[0].y) == [2, 3]
    assert fig.layout.barmode == "stack"
    weekly = pd.DataFrame({"pipeline": ["bm25", "dense"], "mean": [0.5, 0.7], "previous": [0.6, 0.7]})
    fig = charts.weekly_figure(weekly, "recall@5", "2026-W47", "2026-W46")
    assert [t.name for t in fig.data] == ["2026-W46", "2026-W47"] and list(fig.data[1].y) == [0.5, 0.7]
    assert fig.layout.title.text == "recall@5: weekly mean, 2026-W47 against 2026-W46"


EMPTY = pd.DataFrame({"run_date": pd.Series(dtype="datetime64[ns]")})


@pytest.mark.parametrize("build", [
    lambda: charts.trend_figure(trend_frame().iloc[0:0], "recall@5"),
    lambda: charts.lines_figure(EMPTY.assign(statistic=[], value=[]), "statistic", "PSI", "PSI"),
    lambda: charts.corpus_size_figure(EMPTY.assign(docs_total=[], docs_new=[], docs_updated=[], docs_deleted=[],
                                                   chunks_total=[])),
    lambda: charts.heatmap_figure(pd.DataFrame(), "recall@5", "bm25"),
    lambda: charts.rank_figure(EMPTY.assign(pipeline=[], rank=[]), "q1"),
    lambda: charts.projection_figure(pd.DataFrame(columns=["side", "x", "y", "chunk_id", "doc_id"]), "a", "b"),
    lambda: charts.composition_figure(EMPTY.assign(source=[], documents=[]), "source"),
    lambda: charts.comparison_figure(EMPTY.assign(pipeline=[], value_original=[], value_simulated=[]), "pipeline",
                                     "t", "y"),
    lambda: charts.alerts_timeline_figure(EMPTY.assign(severity=[], alerts=[])),
    lambda: charts.weekly_figure(pd.DataFrame(columns=["pipeline", "mean", "previous"]), "recall@5", "W2", "W1"),
], ids=["trend", "lines", "corpus", "heatmap", "rank", "projection", "composition", "comparison", "alerts", "weekly"])
def test_every_figure_has_a_title_axis_labels_and_says_when_it_is_empty(build):
    fig = build()
    assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert len(fig.layout.annotations) >= 1  # the "nothing to show" note


def test_daily_axes_show_dates_only_and_fit_the_data():
    days = pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"])
    frame = pd.DataFrame({"run_date": days, "g": "a", "value": [1.0, 2.0, 3.0]})
    events = pd.DataFrame({"run_date": [days[-1]], "events": ["a long note " * 5]})
    axis = charts.lines_figure(frame, "g", "t", "y", events=events).layout.xaxis
    assert axis.tickformat == "%b %d" and axis.dtick == charts.DAY_MS
    assert list(axis.range) == ["2023-12-31 12:00", "2024-01-03 12:00"]
    year = pd.date_range("2024-01-01", periods=365, freq="D")
    long = charts.lines_figure(pd.DataFrame({"run_date": year, "g": "a", "value": 1.0}), "g", "t", "y").layout.xaxis
    assert long.dtick is None and long.range[1] == "2024-12-30 12:00"


def test_composition_steps_and_alert_counts_are_integers():
    days = pd.to_datetime(["2024-01-01", "2024-01-02"])
    comp = charts.composition_figure(pd.DataFrame({"run_date": days, "source": "s", "documents": [1, 2]}), "source")
    assert comp.data[0].line.shape == "hv"
    counts = pd.DataFrame({"run_date": days, "severity": "alert", "alerts": [1, 2]})
    assert charts.alerts_timeline_figure(counts).layout.yaxis.tickformat == "d"


def tick_labels(axis) -> list[str]:
    """The date labels a daily axis prints: from tick0 every dtick across its range, formatted as plotly does."""
    assert axis.dtick is not None and axis.dtick % charts.DAY_MS == 0, "ticks less than a day apart repeat dates"
    first, last = (pd.Timestamp(x) for x in axis.range)
    ticks = pd.date_range(pd.Timestamp(axis.tick0), last, freq=pd.Timedelta(milliseconds=axis.dtick))
    return [f"{t:%b %d}" for t in ticks if t >= first]


def x_axes(fig: go.Figure) -> list:
    return [fig.layout[name] for name in fig.layout if name.startswith("xaxis")]


@pytest.mark.parametrize("days", [2, 3, 30], ids=["two-runs", "three-runs", "a-month"])
def test_trends_axes_span_the_data_and_print_each_date_once(days):
    dates = pd.date_range("2026-10-24", periods=days, freq="D")
    trend = pd.concat([trend_frame().iloc[:0]] + [pd.DataFrame({"run_date": dates, "pipeline": p, "value": 0.5})
                                                  for p in ("bm25", "dense", "hybrid")])
    fig = charts.trend_figure(trend, "recall@5")
    axes = x_axes(fig)
    assert len(axes) == 3
    for axis in axes:  # a month past the data was the axis
        assert pd.Timestamp(axis.range[0]) >= dates[0] - pd.Timedelta(days=1)
        assert pd.Timestamp(axis.range[1]) <= dates[-1] + pd.Timedelta(days=1)
        labels = tick_labels(axis)
        assert len(labels) == len(set(labels)) and 1 <= len(labels) <= charts.TREND_TICKS


def test_trends_legend_sits_at_the_foot_and_run_notes_inside_the_panel():
    events = pd.DataFrame({"run_date": DAYS[1:], "events": ["drift event: packs flow in", "injected 40 documents"]})
    fig = charts.trend_figure(trend_frame(), "recall@5", None, events)
    legend = fig.layout.legend
    assert legend.yref == "container" and legend.y == 0 and legend.yanchor == "bottom"  # under the x-axis title
    titles = [a for a in fig.layout.annotations if a.text in ("bm25", "dense")]  # the panel titles, above the panels
    assert all(a.yanchor == "bottom" and a.y >= 1 for a in titles)
    notes = [a for a in fig.layout.annotations if a.hovertext]
    assert len(notes) == 2 and all(a.yanchor == "top" and a.y <= 1 for a in notes)  # below the panel's top edge
    assert len({a.y for a in notes}) == 2  # the notes of adjacent runs on different lines
    # towards the middle of the runs, so a late note stays in its panel rather than running into the next
    assert [a.xanchor for a in notes] == ["left", "right"]  # 11-03 is the middle of 11-02..11-04, 11-04 past it


@pytest.mark.parametrize("days", [1, 2, 3, 9], ids=["one", "two", "three", "nine"])
def test_sparklines_with_few_runs_print_each_date_once(days):
    dates = pd.date_range("2026-10-24", periods=days, freq="D")
    frame = pd.DataFrame({"run_date": dates, "value": 0.5, "reference": math.nan})
    fig = charts.sparklines_figure([("recall@5", frame, "ok", None), ("mrr@5", frame, "warning", None)])
    for axis in x_axes(fig):
        labels = tick_labels(axis)
        assert labels and len(labels) == len(set(labels)) and len(labels) <= charts.SPARK_TICKS
        assert pd.Timestamp(axis.range[1]) <= dates[-1] + pd.Timedelta(days=1)


def test_trend_figure_draws_the_maintained_series_dashed_and_each_qrels_version_as_a_marker():
    maintained = trend_frame()[["run_date", "pipeline", "value"]].assign(value=lambda f: f["value"] + 0.05)
    versions = pd.DataFrame({"run_date": [DAYS[1]], "label": ["qrels v1"], "note": ["qrels v1: 3 judgments"]})
    fig = charts.trend_figure(trend_frame(), "recall@5", maintained=maintained, versions=versions)
    dashed = [t for t in fig.data if t.legendgroup == "maintained qrels (dashed)"]
    assert [t.xaxis for t in dashed] == ["x", "x2"]  # beside the frozen series, in each pipeline's panel
    assert [round(v, 2) for v in dashed[0].y] == [0.55, 0.65, 0.45] and dashed[0].line.dash == "dash"
    assert dashed[0].line.color == traces(fig)["bm25"].line.color
    assert sum(t.showlegend for t in dashed) == 1  # one legend entry
    marks = [s for s in fig.layout.shapes if s.type == "line" and s.line.color == charts.QRELS_COLOUR]
    assert len(marks) == 2 and {pd.Timestamp(s.x0) for s in marks} == {DAYS[1]}  # one per panel, at its date
    assert [a.text for a in fig.layout.annotations if a.text == "qrels v1"] == ["qrels v1"]
    plain = charts.trend_figure(trend_frame(), "recall@5")  # nothing judged: the chart as before
    assert not [t for t in plain.data if t.legendgroup == "maintained qrels (dashed)"]

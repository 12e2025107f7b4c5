"""Overview: the alert counts and the last incident with its cause, the open conditions' next steps and links to the
pages that explain it (first, under app.py's banner); then per pipeline a verdict (ok / warning / alert) naming its
open conditions, else its reason against the reference period and last week; its series as coloured sparklines with
event and alert marks; and the last run."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import canary, charts, contract, source_health, views
from pipeline.alerts import plural
from pipeline.views import alerts as alerts_views, overview as overview_views

# A verdict is a status, not a second alert box: the open conditions' lines are in the banner above.
STATUS_BADGES = {contract.ALERT: ":red-badge[:material/error: alert]",
                 contract.WARNING: ":orange-badge[:material/warning: warning]",
                 overview_views.OK: ":green-badge[:material/check_circle: ok]"}

ui.page_frame()
st.title("Overview")
config, metrics, alerts, runs = ui.config(), ui.metrics(), ui.alerts(), ui.runs()
events = views.run_events(runs)
counts = ui.alert_counts()
with st.container(key="overview_counts"):
    st.caption(views.escape_markdown(counts.sentence("the history")), help=alerts_views.UNITS)

# The incident's explanation first, directly under the banner: what happened and what to do, before the cards.
st.subheader("Last incident")
stories = alerts_views.episodes(alerts_views.incidents(alerts, runs), runs)
if not stories:
    st.success("No alert has fired in this history.", icon=":material/check_circle:")
else:
    story = stories[-1]
    with st.container(key="overview_incident"):
        st.markdown(views.escape_markdown(overview_views.incident_sentence(story)))
        for condition in counts.conditions:  # the open ones' next steps, as on the banner's lines
            st.markdown(f"- {ui.condition_markdown(condition)}")
        before = max([d for d in views.run_dates(runs) if d < story.start.date()] or [story.start.date()])
        worst = overview_views.most_hurt(story)
        links = st.columns(3)
        links[0].page_link("pages/questions.py", label="Questions and documents",
                           icon=":material/quiz:", query_params={"then": str(before), "pipeline": worst} if worst
                           else {"then": str(before)})
        links[1].page_link("pages/drift.py", label="What came in (Drift)",
                           icon=":material/scatter_plot:", query_params={"run": f"{story.start:%Y-%m-%d}"})
        links[2].page_link("pages/alerts.py", label=f"Its {plural(len(story.incidents), 'incident')}",
                           icon=":material/notifications:")

ks = sorted(int(k) for k in metrics[contract.K].unique())
k = st.selectbox("Cutoff k", ks, index=ks.index(views.default_k(ks)), key="overview_k",
                 help="The rank cutoff of the metrics shown (by default the largest k not above 5, else the smallest: the one the alert rules watch).")
st.caption(f"Each pipeline's latest run against the rules' reference period (its first {config.alerts.reference_runs} "
           "runs) and a week ago. Red: an alert fired on the series; orange: a warning fired, or it is worse than its "
           "reference by more than half the drop rule's practical threshold. Dotted: the reference mean; vertical "
           "lines: run notes; markers: alerts.")

for verdict in overview_views.verdicts(metrics, alerts, k, config.alerts):
    with st.container(border=True, key=f"overview_verdict_{verdict.pipeline}"):
        st.markdown(f"{STATUS_BADGES[verdict.status]} **{views.escape_markdown(verdict.pipeline)}** · "
                    + views.escape_markdown(verdict.reason))
        columns = st.columns(len(verdict.series))
        for column, status in zip(columns, verdict.series):
            ui.metric_card(column, f"{verdict.pipeline} · {views.metric_label(status.metric, k)}", status)
        panels = [(views.metric_label(s.metric, k), overview_views.sparkline(metrics, s), overview_views.tone(s, config.alerts),
                   views.alert_points(alerts, views.series_name(s.metric, k), [verdict.pipeline]))
                  for s in verdict.series]
        st.plotly_chart(charts.sparklines_figure(panels, events), key=f"overview_sparklines_{verdict.pipeline}",
                        config={"displayModeBar": False})

canaries = ui.read(contract.CANARY)
if not canaries.empty:  # the candidates: shadow pipelines that never page (pipeline/canary.py)
    st.subheader("Candidates")
    with st.container(key="overview_canary_lines"):
        for line in canary.latest_sentences(canaries):
            st.markdown(f"- {views.escape_markdown(line)}")
    st.caption("Candidate minus the target it is compared with, per question, over the questions both scored: the "
               "mean, its paired t 95% interval and the sign-flip permutation p. A candidate never pages.")
    ui.table(overview_views.canary_table(canaries), "overview_canary")

st.subheader("Last run")
last = views.last_run(runs)
columns = st.columns(5)
columns[0].metric("Run date", f"{last[contract.RUN_DATE]:%Y-%m-%d}", help=f"finished {last['finished_at']}")
columns[1].metric("Daily job", str(last["status"]), help="How the job itself ran (runs.csv status: ok, degraded, "
                  "no_feeds, partial), not whether an alert fired: the banner above says that.")
columns[2].metric("Feeds ok / failed", f"{last['feeds_ok']} / {last['feeds_failed']}")
columns[3].metric("Documents", f"{last[contract.DOCS_TOTAL]:,}",
                  f"+{last['docs_new']} / ~{last['docs_updated']} / −{last['docs_deleted']}", delta_color="off",
                  delta_arrow="off", help=f"{last['docs_new']} new, {last['docs_updated']} updated and "
                                          f"{last['docs_deleted']} deleted documents in the last run.")
columns[4].metric("Duration", f"{last['seconds']:.1f} s")
if sources_line := source_health.last_new_line(ui.read(contract.SOURCES)):
    st.caption(views.escape_markdown(sources_line))
if str(last[contract.EVENTS]).strip():
    st.caption(views.escape_markdown(f"Note: {last[contract.EVENTS]}"))
st.plotly_chart(charts.corpus_size_figure(runs), key="overview_chart")

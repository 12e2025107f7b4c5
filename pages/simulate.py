"""Simulate: run a drift scenario in a sandbox copy of the history and compare the original and simulated series
side by side. The production history is only read; the sandbox can be discarded."""

from __future__ import annotations

import tempfile

import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, store, views
from pipeline.views import drift as drift_views
from pipeline.views import simulate as simulate_views
from pipeline.demo import pack_articles
from pipeline.errors import DriftwatchError
from pipeline.simulate import (INJECT, SCENARIOS, Scenario, catch_verdict, compare_conditions, default_start,
                               discard_sandbox, results_table, simulate)

SCENARIO_HELP = {"offtopic": "inject off-topic (sports) documents", "near-duplicates":
                 "inject near-duplicates of the gold answers", INJECT: "inject your own feed file",
                 "delete": "delete documents", "embedder": "swap or truncate the embedder"}

ui.page_frame()
st.title("Simulate")
source, config, runs = ui.data_dir(), ui.config(), ui.runs()
sandbox = simulate_views.sandbox_dir(source)
days = views.run_dates(runs)
st.caption(simulate_views.SANDBOX_NOTE)

left, right = st.columns(2)
name = left.selectbox("Scenario", SCENARIOS, format_func=lambda s: f"{s}: {SCENARIO_HELP[s]}", key="sim_scenario")
# A week before the last run by default: enough re-run days for the rules to answer "would this be caught?".
start = right.selectbox("Start date", days, index=days.index(default_start(days, config.alerts.window)), key="sim_start",
                        help="The scenario is applied on this date and every later run date is re-run.")
options: dict = {}
upload = None
if name == INJECT:
    upload = st.file_uploader("Feed file to inject (RSS, Atom or JSON Feed): every entry arrives on the start date",
                              type=list(simulate_views.PACK_TYPES), key="sim_pack")
elif name in ("offtopic", "near-duplicates"):
    available = len(pack_articles(name))
    options["n"] = st.slider("Documents to inject", 1, available, min(40, available), key="sim_n")
elif name == "delete":
    if st.radio("Delete", ["a share of the corpus", "documents published before a date"], key="sim_delete_mode",
                horizontal=True) == "a share of the corpus":
        options["share"] = st.slider("Share of the documents", 0.05, 1.0, 0.3, 0.05, key="sim_share")
    else:
        options["before"] = st.date_input("Published before", value=days[0], key="sim_before")
else:
    options["model"] = st.text_input("Model (hub id or folder; empty: keep)", key="sim_model") or None
    options["truncate_dim"] = st.number_input("Keep the first N dimensions (0: all)", 0, 4096, 128,
                                              key="sim_truncate_dim") or None
seed = st.number_input("Seed", 0, 2**31 - 1, 0, key="sim_seed")

if st.button("Run the simulation", key="sim_run", type="primary", icon=":material/play_arrow:",
             disabled=name == INJECT and upload is None):
    folder = tempfile.TemporaryDirectory(prefix="driftwatch-pack-")
    if upload is not None:  # the same pipeline function as `simulate --pack FILE`, on a copy of the upload
        options["pack"] = str(simulate_views.save_upload(upload.name, upload.getvalue(), folder.name))
    scenario = Scenario(name, start, seed=int(seed), **options)
    todo = max(1, sum(d >= start for d in days))
    bar = st.progress(0.0, text=f"{scenario.describe()}: preparing the sandbox…")
    done: list = []

    def progress(result) -> None:
        done.append(result)
        bar.progress(len(done) / todo, text=f"re-ran {result.run_date} ({len(done)} of {todo})")

    try:
        simulate(config, scenario, source, sandbox, progress=progress)
    except (DriftwatchError, store.LockError) as exc:  # any bad input: say so, keep the page
        ui.error(exc)
    finally:
        folder.cleanup()

made = simulate_views.sandbox_info(sandbox, source)
st.subheader("Original against simulated")
if made is None:
    st.info("No simulation yet: pick a scenario and run it. The charts show the original series.",
            icon=":material/info:")
else:
    st.caption(views.escape_markdown(f"{made.description} from {made.start} (sandbox made {made.created[:19]})"))
metrics = ui.metrics()
names = views.values_of(metrics, contract.METRIC)
ks = sorted(int(k) for k in metrics[contract.K].unique())
c1, c2 = st.columns(2)
metric = c1.selectbox("Metric", names, index=views.first_metric(names),
                      format_func=views.metric_label, key="sim_metric")
k = c2.selectbox("Cutoff k", ks, index=ks.index(views.default_k(ks)), key="sim_k")
label = views.metric_label(metric, k)
start = made.start if made else None
simulated = ({name: ui.read(name, sandbox) for name in (contract.METRICS, contract.DRIFT, contract.ALERTS)}
             if made else None)
table = simulate_views.side_by_side(
    views.metric_series(metrics, metric, k),
    views.metric_series(simulated[contract.METRICS], metric, k) if simulated else None, contract.PIPELINE)
fired = views.between(views.alert_points(simulated[contract.ALERTS], views.series_name(metric, k)),
                      start) if simulated else None
st.plotly_chart(charts.comparison_figure(table, contract.PIPELINE, f"{label}: original (solid) vs simulated (dashed)",
                                         f"{label} (mean over questions, 0–1)", start, fired), key="sim_chart")
statistics = [contract.PSI_MEAN]  # one unit on the axis (Evidently's AUC is on the Drift page, on its own axis)
drift = simulate_views.side_by_side(drift_views.drift_series(ui.drift(), statistics),
                           drift_views.drift_series(simulated[contract.DRIFT], statistics) if simulated else None,
                           contract.STATISTIC)
st.plotly_chart(charts.comparison_figure(drift, contract.STATISTIC,
                                         "PSI of the window's new chunks: original (solid) vs simulated (dashed)",
                                         "PSI mean over the principal components (≥ 0)", start), key="sim_drift_chart")
if made is None:
    st.stop()
st.subheader("Would the alerts catch this?")
compared = compare_conditions(ui.alerts(), simulated[contract.ALERTS], made.start)
verdict = views.escape_markdown(catch_verdict(compared, made.start))
with st.container(key="sim_verdict"):
    if compared["earlier"].any():
        st.success(verdict, icon=":material/notifications_active:")
    else:
        st.info(verdict, icon=":material/notifications_off:")
with st.container(key="sim_caught"):
    if not compared.empty:
        st.markdown("\n".join(f"- {views.escape_markdown(line)}"
                               for line in simulate_views.caught_lines(compared)))
st.plotly_chart(charts.lines_figure(simulate_views.delta_series(table, start), contract.PIPELINE,
                                    f"{label}: simulated minus original", f"change in {label}",
                                    levels=[(0.0, "no change")], value_format="+.4f"), key="sim_delta_chart")
ui.table(results_table(table, start), "sim_table",
         column_config={"run_date": st.column_config.DateColumn("run date", format="YYYY-MM-DD"),
                        **{c: st.column_config.NumberColumn(c, format="%.4f")
                           for c in ("value_original", "value_simulated", "change")}})
if st.button("Discard the sandbox", key="sim_discard", icon=":material/delete:"):
    discard_sandbox(sandbox)
    st.rerun()

"""driftwatch dashboard: `streamlit run app.py`. Routes over the pages in pages/ and draws what every page shares:
the data directory in the sidebar and the banner of the latest run's open alerts (or, without history, the
offer to build the demo)."""

from __future__ import annotations

import logging

import streamlit as st

from pages import _ui as ui
from pipeline import redact

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
redact.install_log_filter()  # every record is redacted before it is written

# An emoji favicon: Streamlit draws it as inline SVG, where a ":material/...:" one is fetched from fonts.gstatic.com.
st.set_page_config(page_title="driftwatch", page_icon="📈", layout="wide")

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("pages/trends.py", title="Trends", icon=":material/show_chart:"),
    st.Page("pages/questions.py", title="Questions", icon=":material/quiz:"),
    st.Page("pages/answers.py", title="Answers", icon=":material/forum:"),
    st.Page("pages/drift.py", title="Drift", icon=":material/scatter_plot:"),
    st.Page("pages/simulate.py", title="Simulate", icon=":material/science:"),
    st.Page("pages/weekly.py", title="Weekly review", icon=":material/calendar_month:"),
    st.Page("pages/alerts.py", title="Alerts", icon=":material/notifications:"),
    st.Page("pages/segments.py", title="Segments", icon=":material/category:"),
    st.Page("pages/judge.py", title="Judge", icon=":material/gavel:"),
]

# The page list is drawn by the app itself (page links), not by Streamlit: with `client.showSidebarNavigation`
# off (.streamlit/config.toml, and `driftwatch dashboard`'s command line) no list of the pages/ folder flashes
# before the script has run on a cold start.
page = st.navigation(PAGES, position="hidden")
with st.sidebar.container(key="page_links"):
    for linked in PAGES:
        st.page_link(linked)
directory = ui.data_dir()
ui.sidebar(directory)
if ui.runs(directory).empty:
    ui.empty_state(directory)
else:
    ui.freshness_header(directory)
    ui.alert_banner()
    with ui.framed():
        page.run()

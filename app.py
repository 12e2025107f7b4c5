"""driftwatch dashboard entry point: `streamlit run app.py` (the pages come with the dashboard issue)."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from pipeline import store
from pipeline.config import ConfigError, load_config


def data_dir() -> Path:
    try:
        return load_config(os.environ.get("DRIFTWATCH_CONFIG")).data_dir
    except ConfigError as exc:
        st.error(str(exc))
        st.stop()


def home() -> None:
    directory = data_dir()
    st.title("driftwatch")
    st.caption(f"Data directory: {directory}")
    runs = store.read_runs(directory)
    if runs.empty:
        st.info("No history yet: run `python -m pipeline backfill --start 2026-10-24 --end 2026-11-22` first.")
        return
    latest = runs.iloc[-1]
    st.subheader(f"Last run: {latest['run_date']:%Y-%m-%d} ({latest['status']})")
    st.dataframe(store.read_metrics(directory).query("run_date == @latest.run_date"), hide_index=True)


st.navigation([st.Page(home, title="Overview", default=True)]).run()

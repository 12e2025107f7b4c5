"""What every dashboard page shares: the data directory, cached reads of the store and the corpus, the open-alert
banner, the empty state and small rendering helpers. Not a page: the leading underscore keeps it out of the page
list (app.py names its pages)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import pandas as pd
import streamlit as st

from pipeline import answers, contract, freshness, notify, report, store, views
from pipeline.views import alerts as alerts_views
from pipeline.views import drift as drift_views
from pipeline.views import questions as questions_views
from pipeline.contract import ALERT, WARNING
from pipeline.config import AlertsConfig, Config, ConfigError
from pipeline.corpus import CORPUS_FILE
from pipeline.errors import DriftwatchError
from pipeline.gold import GoldError

SEVERITY_ICONS = {ALERT: ":material/error:", WARNING: ":material/warning:"}
DELTA_COLOURS = {ALERT: "red", WARNING: "orange"}  # a series' card when an alert fired on it
MAX_BANNER_DETAILS = 50
REVIEW_FILES = (contract.RUNS, contract.METRICS, contract.PER_QUESTION, contract.ALERTS)  # what a weekly review reads


_run = threading.local()  # whether the running page was started by app.py (one script thread per session)


@contextmanager
def framed() -> Iterator[None]:
    """app.py runs the page inside this, after drawing the shared sidebar and banner. A domain error the page
    meets (a malformed file, a gold set or query log that cannot be used...) ends the page with its message."""
    _run.framed = True
    try:
        yield
    except DriftwatchError as exc:
        stopped(exc)
    finally:
        _run.framed = False


def page_frame() -> None:
    """Every page calls this first; under app.py it does nothing.

    With a pages/ folder beside the entry point, Streamlit runs a page file on its own (its older pages-folder
    mode) when a session starts on that page's URL before app.py has called st.navigation (a deep link to a
    fresh server; AppTest.switch_page every time). Then leave that mode the way st.navigation does and rerun,
    so the page is run by app.py with the shared sidebar and banner."""
    if getattr(_run, "framed", False):
        return
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    st.rerun()


@st.cache_resource(show_spinner=False)
def error(problem: object) -> None:
    """A domain error as one red box, its text shown literally (it may name paths, keys and ids)."""
    st.error(views.escape_markdown(str(problem)), icon=":material/error:")


def stopped(problem: DriftwatchError) -> None:
    """The page's end on bad input: the message (it names the file) and what to do, not a traceback."""
    error(problem)
    st.info("This page needs the file above: fix or restore it, or re-run the daily job for the dates it lacks.",
            icon=":material/info:")


# --- where the data is ---------------------------------------------------------------------------------------


SHOWN_DEMO = "shown_demo_dir"  # session state: the demo directory this session opened from the empty screen


def data_dir() -> Path:
    """The data directory ($DRIFTWATCH_DATA_DIR, else the config's), or the demo directory this session built or
    opened from the empty screen; a config error stops the page with it."""
    if st.session_state.get(SHOWN_DEMO):
        return Path(st.session_state[SHOWN_DEMO])
    try:
        return views.resolve_data_dir()
    except ConfigError as exc:
        error(f"Cannot find the data directory: {exc}. Set DRIFTWATCH_DATA_DIR or DRIFTWATCH_CONFIG.")
        st.stop()


def config() -> Config:
    """The settings of the data directory (its demo.toml, else the config file, else the defaults)."""
    try:
        return views.settings(data_dir())
    except ConfigError as exc:
        error(exc)
        st.stop()


def _stamp(path: Path) -> tuple[int, int]:
    """Modification time and size of a file ((0, 0) when absent): the cache key that changes with the file."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return 0, 0
    return info.st_mtime_ns, info.st_size


def _corpus_stamp(directory: Path) -> tuple:
    corpus = directory / CORPUS_FILE
    return _stamp(corpus), _stamp(corpus.with_name(CORPUS_FILE + "-wal"))


# --- cached reads (keyed on the files' stamps, so a new run shows up on the next rerun) ------------------


@st.cache_data(max_entries=16, show_spinner=False)
def _read(directory: str, name: str, stamp: tuple) -> pd.DataFrame:
    return store.read(Path(directory), name)


# cache_resource, not cache_data: cache_data pickles its value in and unpickles a copy on every hit, which
# for a year of per_question.csv (876,000 rows) costs about as much as parsing it. The frame is shared, so
# nothing may mutate it: the views are pure functions that build new frames.
@st.cache_resource(max_entries=2, show_spinner="Reading per_question.csv…")
def _read_per_question(directory: str, stamp: tuple) -> pd.DataFrame:
    return store.read_per_question(Path(directory))


def _cached(directory: str, name: str, stamp: tuple) -> pd.DataFrame:
    if name == contract.PER_QUESTION:  # the big one has its own, smaller cache
        return _read_per_question(directory, stamp)
    return _read(directory, name, stamp)


def read(name: str, directory: Path | None = None) -> pd.DataFrame:
    """One CSV of the store as a typed frame (do not mutate it: it is shared through the cache)."""
    directory = Path(directory or data_dir())
    try:
        return _cached(str(directory), name, _stamp(directory / name))
    except DriftwatchError as exc:
        stopped(exc)
        st.stop()


@st.cache_data(max_entries=32, show_spinner=False)
def _question_view(directory: str, stamp: tuple, name: str, args: tuple, _view) -> object:
    return _view(_read_per_question(directory, stamp), *args)


def per_question_view(view, *args) -> object:
    """`view(per_question, *args)` for a function of `views`, cached per version of per_question.csv and
    arguments: a rerun reuses the small result instead of the whole frame."""
    directory = data_dir()
    name = contract.PER_QUESTION
    return _question_view(str(directory), _stamp(directory / name), view.__name__, args, view)


@st.cache_data(max_entries=8, show_spinner="Preparing the review…")
def _weekly_review(directory: str, stamps: tuple, week: str, texts: tuple, _silences: list,
                   silences_stamp: tuple, _alerts: AlertsConfig, reference: tuple) -> report.WeeklyReview:
    frames = [_cached(directory, name, stamp) for name, stamp in zip(REVIEW_FILES, stamps)]
    return report.weekly_review(*frames, week, gold_texts=dict(texts), silences=_silences, config=_alerts)


def weekly_review(week: str) -> report.WeeklyReview:
    directory = data_dir()
    texts = tuple(sorted((q, g.question) for q, g in gold().items()))
    rules = config().alerts  # the persistence's reference period (keyed by what names it)
    return _weekly_review(str(directory), tuple(_stamp(directory / name) for name in REVIEW_FILES), week, texts,
                          silences(), _stamp(directory / notify.MUTES_FILE), rules,
                          (rules.reference_runs, rules.reference_start))


def runs(directory: Path | None = None) -> pd.DataFrame:
    return read(contract.RUNS, directory)


def metrics(directory: Path | None = None) -> pd.DataFrame:
    """metrics.csv; every page that asks for it needs its rows, so without any the page ends with a note."""
    frame = read(contract.METRICS, directory)
    if frame.empty:
        st.info(views.escape_markdown(f"{Path(directory or data_dir()) / contract.METRICS} has no rows (missing or "
                                      "empty) although runs.csv has: re-run the daily job (python -m pipeline "
                                      "run --date ...) for the dates it lacks."), icon=":material/info:")
        st.stop()
    return frame


def per_question(directory: Path | None = None) -> pd.DataFrame:
    return read(contract.PER_QUESTION, directory)


def drift(directory: Path | None = None) -> pd.DataFrame:
    return read(contract.DRIFT, directory)


def alerts(directory: Path | None = None) -> pd.DataFrame:
    return read(contract.ALERTS, directory)


@st.cache_data(max_entries=8, show_spinner=False)
def _answer_records(directory: str, day: str, stamp: tuple) -> list[dict]:
    return answers.read_records(Path(directory), day)


def answer_records(day: date | str) -> list[dict]:
    """The full answer records of a run date (answers/DATE.jsonl; [] without one). Do not mutate them."""
    directory = data_dir()
    try:
        return _answer_records(str(directory), str(day), _stamp(answers.records_path(directory, day)))
    except DriftwatchError as exc:
        stopped(exc)
        st.stop()


@st.cache_data(max_entries=4, show_spinner=False)
def _labels(path: str, stamp: tuple) -> list:
    return answers.read_labels(Path(path))


def labels() -> list:
    """The human labels of the config's generation.labels ([] when none is configured or the file is absent;
    a malformed file is shown as a warning, not a stop: the page works without labels)."""
    path = config().generation.labels
    if path is None or not Path(path).is_file():
        return []
    try:
        return _labels(str(path), _stamp(Path(path)))
    except DriftwatchError as exc:
        st.warning(views.escape_markdown(str(exc)), icon=":material/warning:")
        return []


@st.cache_data(max_entries=4, show_spinner=False)
def _gold(path: str, stamp: tuple) -> dict:
    return views.gold_questions(Path(path))


def gold() -> dict:
    """The gold set by question id ({} when the config's gold file is absent)."""
    path = Path(config().gold)
    try:
        return _gold(str(path), _stamp(path))
    except GoldError as exc:
        st.warning(views.escape_markdown(str(exc)), icon=":material/warning:")
        return {}


@st.cache_data(max_entries=64, show_spinner=False)
def _documents_info(directory: str, ids: tuple[str, ...], stamp: tuple) -> dict:
    return questions_views.documents_info(Path(directory), ids)


def documents_info(ids: Sequence[str]) -> dict:
    directory = data_dir()
    return _documents_info(str(directory), tuple(dict.fromkeys(ids)), _corpus_stamp(directory))


@st.cache_data(max_entries=4, show_spinner="Reading the corpus…")
def _documents(directory: str, stamp: tuple) -> pd.DataFrame:
    return drift_views.corpus_documents(Path(directory))


def documents() -> pd.DataFrame:
    directory = data_dir()
    return _documents(str(directory), _corpus_stamp(directory))


@st.cache_data(max_entries=8, show_spinner="Projecting the embeddings…")
def _projection(directory: str, _config: Config, config_hash: str, reference: drift_views.Window,
                current: drift_views.Window, stamp: tuple) -> drift_views.Projection:
    return drift_views.embedding_projection(Path(directory), _config, reference, current)


def projection(reference: drift_views.Window, current: drift_views.Window) -> drift_views.Projection:
    directory, settings = data_dir(), config()
    return _projection(str(directory), settings, settings.config_hash(), reference, current, _corpus_stamp(directory))


# --- shared parts of the page ---------------------------------------------------------------------------------


def sidebar(directory: Path) -> None:
    st.sidebar.caption("Data directory")
    st.sidebar.code(str(directory), language=None, wrap_lines=True)
    latest = views.last_run(runs(directory))
    if latest is not None:
        st.sidebar.caption(f"Last run: {latest[contract.RUN_DATE]:%Y-%m-%d} ({latest['status']})")


@st.cache_data(max_entries=4, show_spinner=False)
def _silences(directory: str, stamp: tuple) -> list:
    return notify.read_silences(Path(directory))


def silences() -> list:
    """The data directory's acknowledgements and mutes (mutes.json; [] without one). A broken file is shown as
    an error and read as none: the pages work without it."""
    directory = data_dir()
    try:
        return _silences(str(directory), _stamp(directory / notify.MUTES_FILE))
    except notify.SilenceError as exc:
        error(exc)
        return []


def alert_counts() -> alerts_views.AlertCounts:
    """The whole alert log in the one vocabulary of counts (open conditions, incidents, alert rows)."""
    return alerts_views.count_alerts(alerts(), runs(), silences())


def freshness_header(directory: Path) -> None:
    """Every page's first line: when the last run was; a warning when none came within 1.5 x the usual cadence."""
    fresh = freshness.of_directory(directory, runs(directory))
    with st.container(key="freshness"):
        if fresh.stale:
            st.warning(views.escape_markdown(f"{fresh.sentence}: the daily job may have stopped; what the pages "
                                             "show is as of then."), icon=":material/schedule:")
        else:
            st.caption(views.escape_markdown(fresh.sentence))


# On a phone the banner folds to its one line (the counts), the conditions behind the details expander; at desktop
# size the boxes list the conditions and the one line is not shown.
_PHONE_CSS = """<style>
@media (max-width: 640px) {
  .st-key-alert_banner_alert, .st-key-alert_banner_warning, .st-key-alert_banner_acknowledged { display: none; }
}
@media (min-width: 641px) { .st-key-alert_banner_line { display: none; } }
</style>"""


def condition_markdown(condition: views.OpenCondition | views.SegmentSummary) -> str:
    """A condition's line with its next step and the link to its runbook entry (Markdown)."""
    entry = condition.runbook
    return (f"{views.escape_markdown(condition.line)} · next: {views.escape_markdown(entry.next_step)} "
            f"([runbook ↗]({entry.url}))")


def alert_banner() -> None:
    """The latest run's open conditions, one line each with the next step and its runbook link (alerts in a red box,
    warnings in an orange one, acknowledged ones in a neutral one), on every page; the per-series alert rows behind
    an expander, under their condition. On a phone it folds to one line (the counts) above the expander."""
    counts = alert_counts()
    if not counts.conditions:
        return
    day = f"{counts.day:%Y-%m-%d}"
    with st.container(key="alert_banner"):
        st.html(_PHONE_CSS)
        worst = ALERT if counts.unacknowledged(ALERT) else WARNING if counts.unacknowledged(WARNING) else ""
        with st.container(key="alert_banner_line"):
            icon = SEVERITY_ICONS.get(worst, ":material/how_to_reg:")
            st.markdown(f":{DELTA_COLOURS.get(worst, 'gray')}-background[{icon} "
                        f"**{views.escape_markdown(counts.open_phrase)}**]: the details below")
        for severity, box in ((ALERT, st.error), (WARNING, st.warning)):
            part = counts.unacknowledged(severity)
            if not part:
                continue
            noun = "condition" if len(part) == 1 else "conditions"
            lines = [views.escape_markdown(f"{len(part)} open {severity} {noun} on the latest run ({day}):")]
            with st.container(key=f"alert_banner_{severity}"):
                box("\n".join(lines + [f"- {condition_markdown(c)}" for c in views.banner_items(part)]),
                    icon=SEVERITY_ICONS[severity])
        if counts.acknowledged:
            with st.container(key="alert_banner_acknowledged"):
                st.info("\n".join([views.escape_markdown(f"{len(counts.acknowledged)} acknowledged "
                                                         f"(no longer paging) on the latest run ({day}):")]
                                   + [f"- {condition_markdown(c)} · {views.escape_markdown(a.statement)}"
                                      for c, a in counts.acknowledged]), icon=":material/how_to_reg:")
        budget = MAX_BANNER_DETAILS
        with st.expander(f"Details: the {counts.open_rows} alert rows of the {len(counts.conditions)} open conditions",
                         key="alert_banner_details"):
            for i, condition in enumerate(counts.conditions):
                messages = condition.messages[:budget]
                budget -= len(messages)
                if not messages:
                    break
                with st.container(key=f"alert_banner_details_{i}"):
                    st.caption(views.escape_markdown(f"{condition.rule} on {condition.where}"))
                    st.markdown(f"Next: {views.escape_markdown(condition.runbook.next_step)} "
                                f"([runbook ↗]({condition.runbook.url}))")
                    st.markdown("\n".join(f"- {views.escape_markdown(message)}" for _, message in messages))
            st.page_link("pages/alerts.py", label="Open the alert log (acknowledge a condition there)",
                         icon=":material/list:")


def empty_state(directory: Path) -> None:
    """No history yet: say so, and offer to build the bundled demo history into a directory of its own
    (`demo.demo_home`), which this session then shows; the data directory stays empty for the team's own runs."""
    from pipeline.demo import MAX_RUNS, DemoError, build_demo, demo_home

    home = demo_home(directory)
    st.title("driftwatch")
    st.info(views.escape_markdown(f"No history in {directory} yet. Run the daily job (python -m pipeline run) "
                                  "from cron, or build the bundled demo, a month of daily runs over demo news feeds "
                                  f"with a drift event, into a directory of its own: {home}."), icon=":material/info:")
    if not runs(home).empty and st.button("Open the demo history built there", key="demo_open",
                                          icon=":material/folder_open:"):
        st.session_state[SHOWN_DEMO] = str(home)
        st.rerun()
    days = st.number_input("Daily runs of demo history", min_value=1, max_value=MAX_RUNS, value=MAX_RUNS,
                           key="demo_days")
    if not st.button("Build the demo history", key="demo_build", type="primary", icon=":material/play_arrow:"):
        return
    bar = st.progress(0.0, text="Loading the embedding model…")
    done: list = []

    def progress(result) -> None:
        done.append(result)
        bar.progress(len(done) / days, text=f"{result.run_date}: {result.run['docs_total']} documents "
                                            f"({len(done)} of {days} runs)")

    try:
        build_demo(config(), home, days=int(days), progress=progress)
    except DemoError as exc:
        error(exc)
        return
    st.session_state[SHOWN_DEMO] = str(home)
    st.rerun()


# --- rendering helpers ----------------------------------------------------------------------------------------


def metric_card(container, label: str, status) -> None:
    """A series' latest value (a views.overview.SeriesStatus) against its reference period: the delta is the
    change from the reference mean, red (alert) or orange (warning) when a rule fired on the series."""
    reference = status.reference
    delta = None if reference != reference else f"{status.value - reference:+.3f} vs reference"
    colour = DELTA_COLOURS.get(status.severity, "inverse" if status.metric == "unjudged" else "normal")
    arrow = "auto"
    if delta is None and status.severity:  # no reference period yet: the card still says a rule fired
        delta, arrow = f"{status.severity} fired", "off"
    note = f"Value {status.value:.4f}."
    if status.reference_days is not None:
        first, last = status.reference_days
        note += f" Reference period {first:%Y-%m-%d} to {last:%Y-%m-%d}: mean {reference:.4f}."
    if status.week_ago_day is not None:
        note += f" A week ago ({status.week_ago_day:%Y-%m-%d}): {status.week_ago:.4f}."
    if status.severity:
        note += f" The latest run fired {'an' if status.severity == ALERT else 'a'} {status.severity} on this series."
    container.metric(label, f"{status.value:.3f}", delta, delta_color=colour, border=True, help=note,
                     icon=SEVERITY_ICONS.get(status.severity), delta_arrow=arrow)


def persistence_table(result, key: str) -> None:
    """The persistence table (views.persistence_frame) under its caption: levels to 3 decimals, drops as signed
    percentages; until the reference period is complete and a run follows it, what it waits for."""
    if not result.ready:
        st.info(views.escape_markdown(result.waiting()), icon=":material/info:")
        return
    st.caption(views.escape_markdown(result.describe()))
    frame = views.persistence_frame(result)
    table(frame, key, column_config={
        c: st.column_config.NumberColumn(c, format="%+.1f%%" if c.endswith("(%)") else "%.3f")
        for c in frame.columns if "@" in c or c.endswith("(%)")})


def table(frame: pd.DataFrame, key: str, **options) -> None:
    """st.dataframe inside a container keyed `key` (a dataframe without selections carries no key of its own,
    so tests find the table through its container)."""
    with st.container(key=key):
        st.dataframe(frame, hide_index=True, **options)


ALERT_COLUMNS = {
    "run_date": st.column_config.DateColumn("run date", format="YYYY-MM-DD"),
    "value": st.column_config.NumberColumn("value", format="%.4f"),
    "baseline": st.column_config.TextColumn("baseline"),
    "change_pct": st.column_config.TextColumn("change %"),
    "threshold": st.column_config.TextColumn("threshold"),
    "message": st.column_config.TextColumn("message", width="large"),
}


def alerts_table(frame: pd.DataFrame, key: str) -> None:
    """Alert rows (alerts.csv columns) formatted alike on every page: dates, rounded values, no "None"."""
    table(views.alerts_display(frame), key, column_config=ALERT_COLUMNS)


def document_table(frame: pd.DataFrame, key: str, extra: dict | None = None) -> None:
    """A questions_views.document_table (titles as text, links as a link column), never rendered as HTML; narrow
    columns so that it fits a page without scrolling sideways (the deleted column only when a document was)."""
    columns = {
        "rank": st.column_config.NumberColumn("rank", width=50, format="%d"),
        "doc_id": st.column_config.TextColumn("doc id", width=90),
        "title": st.column_config.TextColumn("title", width=360),
        "link": st.column_config.LinkColumn("link", display_text="open ↗", width=60),
        "feed": st.column_config.TextColumn("feed", width=150),
        "first_seen": st.column_config.TextColumn("first ingested", width=105),
        "deleted_at": st.column_config.TextColumn("deleted", width=95),
        "gold": st.column_config.CheckboxColumn("gold", width=50),
        **(extra or {}),
    }
    if "deleted_at" in frame and not frame["deleted_at"].astype(str).str.strip().any():
        frame = frame.drop(columns="deleted_at")
    table(frame, key, column_config=columns, width="stretch")


def date_range(label: str, days: Sequence[date], key: str) -> tuple[date, date]:
    """A date-range picker over the run dates; a half-picked range ends at the last date."""
    first, last = days[0], days[-1]
    picked = st.date_input(label, value=(first, last), min_value=first, max_value=last, key=key)
    picked = tuple(picked) if isinstance(picked, (tuple, list)) else (picked,)
    start = picked[0] if picked else first
    end = picked[1] if len(picked) > 1 else last
    return start, end

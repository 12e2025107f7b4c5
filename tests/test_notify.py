"""Notification: the webhook message, its delivery (deadline, retries, no redirects) and the outbox that
makes every new alert reach the receiver at least once."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline import contract, job, store
from pipeline.alerts import Alert
from pipeline.contract import ALERT, DROP, FLOOR, WARNING
from pipeline.config import AlertsConfig
from pipeline.notify import (ACKNOWLEDGE, MUTE, MUTES_FILE, OUTBOX_FILE, Silence, SilenceError, add_silence, deliver,
                             enqueue, lift_silence, notify_webhook, pending, read_silences, summary_text)

START = date(2026, 3, 1)


def day(i: int) -> date:
    return START + timedelta(days=i)


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, statuses: Sequence[int] = (), hang: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.statuses = list(statuses)  # answered in turn, then 200
        self.hang = hang
        self.bodies: list[dict] = []
        self.gets: list[str] = []
        self.content_types: list[str] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/services/T000/B000/secret"


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # what a followed redirect would turn the POST into
        self.server.gets.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append(json.loads(body))
        self.server.content_types.append(self.headers["Content-Type"])
        if self.server.hang:
            self.server.release.wait(5)
            return
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        self.send_response(status)
        if 300 <= status < 400:
            self.send_header("Location", "/elsewhere")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


@pytest.fixture()
def receiver(request) -> Iterator[Receiver]:
    server = Receiver(**getattr(request, "param", {}))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def make_alert(message: str, severity: str = ALERT, since: str = "") -> Alert:
    return Alert(day(0).isoformat(), DROP, "hybrid", "recall@5", 0.7, 0.8, -12.5, 10.0, severity, message, since)


NEW = make_alert("recall@5 of hybrid fell 12.5% to 0.700")
ONGOING = make_alert("ndcg@5 of bm25 fell 20% to 0.400", since="2026-02-27")


def notify(url: str, alerts: Sequence[Alert], retries: int = 3, timeout: float = 5.0) -> tuple[bool, list[float]]:
    sleeps: list[float] = []
    ok = notify_webhook(url, alerts, timeout=timeout, retries=retries, run_date=day(0), sleep=sleeps.append)
    return ok, sleeps


def test_webhook_posts_json_naming_only_the_new_alerts(receiver):
    ok, sleeps = notify(receiver.url, [NEW, ONGOING])
    assert ok and sleeps == []
    (body,) = receiver.bodies
    assert receiver.content_types == ["application/json"]
    assert body["text"].startswith(f"driftwatch {day(0)}: 1 new alert, 0 new warnings")
    assert NEW.message in body["text"] and "ndcg@5" not in body["text"]


def test_webhook_sends_nothing_when_no_alert_is_new(receiver):
    assert notify(receiver.url, [ONGOING]) == (True, [])
    assert receiver.bodies == []


@pytest.mark.parametrize("receiver", [{"statuses": [500, 503]}], indirect=True)
def test_webhook_retries_server_errors(receiver):
    ok, sleeps = notify(receiver.url, [NEW])
    assert ok and len(receiver.bodies) == 3
    assert sleeps == [0.5 * 1, 0.5 * 2]


@pytest.mark.parametrize("receiver", [{"statuses": [500] * 5}], indirect=True)
def test_webhook_gives_up_after_the_retries(receiver, caplog):
    with caplog.at_level(logging.WARNING, logger="pipeline.notify"):
        ok, sleeps = notify(receiver.url, [NEW], retries=2)
    assert not ok and len(receiver.bodies) == 2 + 1 and sleeps == [0.5, 1.0]
    assert "HTTP 500" in caplog.text


@pytest.mark.parametrize("receiver", [{"statuses": [404]}], indirect=True)
def test_webhook_does_not_retry_a_client_error(receiver):
    assert notify(receiver.url, [NEW]) == (False, [])
    assert len(receiver.bodies) == 1


@pytest.mark.parametrize("receiver", [{"hang": True}], indirect=True)
def test_webhook_retries_a_timeout(receiver):
    ok, sleeps = notify(receiver.url, [NEW], retries=1, timeout=0.2)
    assert not ok and len(receiver.bodies) == 2 and sleeps == [0.5]


def test_webhook_to_an_unreachable_port_logs_and_returns_false(caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}/services/T000/B000/secret"
    with caplog.at_level(logging.WARNING, logger="pipeline.notify"):
        ok, sleeps = notify(url, [NEW], retries=2)
    assert not ok and sleeps == [0.5, 1.0]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and f"http://127.0.0.1:{port}/" in record.getMessage()
    assert "secret" not in record.getMessage()  # a Slack webhook's path is its credential


def test_webhook_with_a_malformed_url_does_not_raise(caplog):
    with caplog.at_level(logging.WARNING, logger="pipeline.notify"):
        assert notify("http://127.0.0.1:notaport/x", [NEW]) == (False, [])
    assert caplog.records


def test_summary_counts_escapes_and_truncates():
    alerts = [make_alert(f"a<{i}>&", ALERT if i % 3 else WARNING) for i in range(25)]
    text = summary_text(alerts, day(0))
    warnings = sum(1 for i in range(25) if i % 3 == 0)
    assert text.splitlines()[0] == f"driftwatch {day(0)}: {25 - warnings} new alerts, {warnings} new warnings"
    assert "a&lt;1&gt;&amp;" in text and "<" not in text
    assert len(text.splitlines()) == 1 + 20 + 1 and text.endswith("and 5 more in alerts.csv")


@pytest.mark.parametrize("receiver", [{"statuses": [302]}], indirect=True)
def test_a_redirect_is_a_failure_and_is_not_followed(receiver, caplog):
    with caplog.at_level(logging.WARNING, logger="pipeline.notify"):
        assert notify(receiver.url, [NEW]) == (False, [])
    assert len(receiver.bodies) == 1 and receiver.gets == []  # no bodiless GET reported as delivered
    assert "HTTP 302" in caplog.text


def test_a_receiver_dripping_its_headers_meets_the_deadline(drip_server):
    started = time.monotonic()
    ok, sleeps = notify(drip_server.url, [NEW], retries=0, timeout=1.0)
    elapsed = time.monotonic() - started
    assert not ok and sleeps == []
    assert elapsed < 2 * 1.0 + 0.5  # the old per-read timeout took the whole 12 s drip


# --- the outbox ---------------------------------------------------------------------------------


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/hook"


def floor_alert(i: int, pipeline: str = "bm25") -> Alert:
    return Alert(day(i).isoformat(), FLOOR, pipeline, "recall@5", 0.5, float("nan"), float("nan"), 0.99, ALERT,
                 f"recall@5 of {pipeline} is 0.500, below its configured floor 0.990")


def test_outbox_keeps_undelivered_entries_and_sends_them_once_the_receiver_is_back(tmp_path, receiver):
    enqueue(tmp_path, [floor_alert(0), floor_alert(0, "dense")])
    enqueue(tmp_path, [floor_alert(0), floor_alert(1)])  # the same key again is not a second entry
    assert [(a.run_date, a.pipeline) for a in pending(tmp_path)] == [
        (day(0).isoformat(), "bm25"), (day(0).isoformat(), "dense"), (day(1).isoformat(), "bm25")]
    assert deliver(tmp_path, closed_port_url(), timeout=1, retries=0) is False
    assert len(pending(tmp_path)) == 3
    assert deliver(tmp_path, receiver.url, timeout=5, retries=0) is True
    # one message per run date, oldest first; then nothing is left to send
    assert [body["text"].splitlines()[0] for body in receiver.bodies] == [
        f"driftwatch {day(0)}: 2 new alerts, 0 new warnings", f"driftwatch {day(1)}: 1 new alert, 0 new warnings"]
    assert pending(tmp_path) == [] and deliver(tmp_path, receiver.url, timeout=5, retries=0) is None
    assert len(receiver.bodies) == 2


@pytest.mark.parametrize("receiver", [{"statuses": [302]}], indirect=True)
def test_outbox_entry_answered_with_a_redirect_stays(tmp_path, receiver):
    enqueue(tmp_path, [floor_alert(0)])
    assert deliver(tmp_path, receiver.url, timeout=5, retries=0) is False
    assert [a.message for a in pending(tmp_path)] == [floor_alert(0).message] and receiver.gets == []


def test_runs_deliver_what_a_killed_or_failed_run_left_and_never_twice(e2e_config, embedder, receiver, monkeypatch):
    config = e2e_config.replace(alerts=AlertsConfig(floors={"recall@5": 0.99}, webhook_url=receiver.url))
    run_date = date(2026, 11, 2)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies after alerts.csv and runs.csv, before the POST

    with monkeypatch.context() as patch:
        patch.setattr(job, "deliver", killed)
        with pytest.raises(KeyboardInterrupt):
            job.run_day(config, run_date, embedder=embedder)
    assert len(store.read(config.data_dir, contract.ALERTS)) == 4 and len(pending(config.data_dir)) == 4
    assert (config.data_dir / OUTBOX_FILE).exists()
    # A re-run with the receiver down: the alerts are already in alerts.csv, still waiting in the outbox.
    down = config.replace(alerts=AlertsConfig(floors={"recall@5": 0.99}, webhook_url=closed_port_url(),
                                              webhook_retries=0, webhook_timeout=1.0))
    assert job.run_day(down, run_date, embedder=embedder).notified is False
    assert len(pending(config.data_dir)) == 4 and receiver.bodies == []
    # The receiver is back: delivered once, in one message.
    assert job.run_day(config, run_date, embedder=embedder).notified is True
    (body,) = receiver.bodies
    assert body["text"].startswith(f"driftwatch {run_date}: 4 new alerts") and pending(config.data_dir) == []
    # Re-running the date again sends nothing.
    assert job.run_day(config, run_date, embedder=embedder).notified is None
    assert len(receiver.bodies) == 1


def test_a_muted_series_and_an_acknowledged_incident_are_not_sent(tmp_path, receiver):
    # bm25 muted to day 1; dense's incident that started on day 0 acknowledged; hybrid untouched
    add_silence(tmp_path, Silence(MUTE, FLOOR, "bm25", "recall@5", "reindexing, ignore", until=day(1).isoformat()))
    with pytest.raises(SilenceError, match="needs the name"):  # who is on it: a new acknowledgement names them
        add_silence(tmp_path, Silence(ACKNOWLEDGE, FLOOR, "dense", "recall@5", "on it", since=day(0).isoformat()))
    add_silence(tmp_path, Silence(ACKNOWLEDGE, FLOOR, "dense", "recall@5", "on it (ana)", since=day(0).isoformat(),
                                  by="ana"))
    dense_again = Alert(**{**floor_alert(2, "dense").row(), "since": day(2).isoformat()})  # a new incident later
    enqueue(tmp_path, [floor_alert(0), floor_alert(0, "dense"), floor_alert(0, "hybrid"), floor_alert(2),
                       dense_again])
    assert [(a.run_date, a.pipeline) for a in pending(tmp_path)] == [
        (day(0).isoformat(), "hybrid"), (day(2).isoformat(), "bm25"), (day(2).isoformat(), "dense")]
    # silenced after being queued: dropped at delivery, never posted
    add_silence(tmp_path, Silence(MUTE, FLOOR, "hybrid", "recall@5", "known flaky"))
    assert deliver(tmp_path, receiver.url, timeout=5, retries=0) is True
    assert [body["text"].splitlines()[0] for body in receiver.bodies] == [
        f"driftwatch {day(2)}: 2 new alerts, 0 new warnings"]
    assert pending(tmp_path) == []
    assert [s.note for s in read_silences(tmp_path)] == ["reindexing, ignore", "on it (ana)", "known flaky"]
    assert lift_silence(tmp_path, MUTE, (FLOOR, "hybrid", "recall@5")) and len(read_silences(tmp_path)) == 2


@pytest.mark.parametrize("body, complaint", [
    ("{not json", "not valid JSON"),
    ('[{"kind": "snooze", "rule": "floor", "pipeline": "", "metric": "corpus", "note": "x"}]', "entry 1: kind must be"),
    ('[{"kind": "mute", "rule": "floor", "pipeline": "", "metric": "corpus", "note": "x", "until": "soon"}]',
     "until is not a date"),
    ('[{"kind": "mute", "rule": "floor", "pipeline": "", "metric": "m", "note": " "}]', "needs a note"),
])
def test_a_broken_mutes_file_is_named_and_nothing_is_queued(tmp_path, body, complaint):
    (tmp_path / MUTES_FILE).write_text(body, encoding="utf-8")
    with pytest.raises(SilenceError, match=complaint) as raised:
        enqueue(tmp_path, [floor_alert(0)])
    assert str(tmp_path / MUTES_FILE) in str(raised.value) and not (tmp_path / OUTBOX_FILE).exists()


def test_acknowledging_a_pipelines_drop_covers_the_incident_in_every_series():
    """A drop or slow drift is one incident per pipeline (alerts.condition_of): acknowledged on the series
    that started it, it covers the others of that pipeline and start; a mute stays per series."""
    since = day(0).isoformat()
    ack = Silence(ACKNOWLEDGE, DROP, "bm25", "mrr@5", "on it", since=since)
    mute = Silence(MUTE, DROP, "bm25", "mrr@5", "ignore")

    def drop(pipeline: str, metric: str, started: str = since) -> Alert:
        return Alert(day(1).isoformat(), DROP, pipeline, metric, 0.5, 0.7, -28.0, 10.0, ALERT, "fell", since=started)

    assert ack.covers(drop("bm25", "ndcg@5")) and ack.covers(drop("bm25", "mrr@5"))
    assert not ack.covers(drop("dense", "ndcg@5")) and not ack.covers(drop("bm25", "ndcg@5", day(1).isoformat()))
    assert mute.covers(drop("bm25", "mrr@5")) and not mute.covers(drop("bm25", "ndcg@5"))

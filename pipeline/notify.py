"""Notification of new alerts: the outbox in the data directory, the Slack-compatible webhook message
and its delivery (at least once per alert, deduplicated by key)."""

from __future__ import annotations

import fcntl
import http.client
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from itertools import groupby
from pathlib import Path
from urllib.parse import urlsplit

from pipeline import netio, store
from pipeline.alerts import ALERT, Alert, _plural

log = logging.getLogger(__name__)

MAX_NOTIFIED = 20  # alert lines in one webhook message; the rest are counted
BACKOFF = 0.5  # seconds times the attempt number between webhook attempts
MAX_REPLY_BYTES = 1_000_000  # a webhook's answer is read (and dropped) up to this size
OUTBOX_FILE = "outbox.jsonl"  # alerts waiting for delivery, one alerts.csv row as JSON per line
_OUTBOX_LOCK = ".outbox.lock"

OutboxKey = tuple[str, str, str, str]  # run_date, rule, pipeline, metric



def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def summary_text(alerts: Sequence[Alert], run_date: date | str) -> str:
    """The webhook message: a headline counting alerts and warnings, then one line per alert."""
    n_alerts = sum(a.severity == ALERT for a in alerts)
    lines = [f"driftwatch {run_date}: {_plural(n_alerts, 'new alert')}, "
             f"{_plural(len(alerts) - n_alerts, 'new warning')}"]
    lines += [f"• [{a.severity}] {a.rule}: {_slack_escape(a.message)}" for a in alerts[:MAX_NOTIFIED]]
    if len(alerts) > MAX_NOTIFIED:
        lines.append(f"… and {len(alerts) - MAX_NOTIFIED} more in alerts.csv")
    return "\n".join(lines)


def _redacted(url: str) -> str:
    """The webhook's scheme, host and port: a Slack webhook's path is its secret, so it stays out of logs."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a malformed port must not make the warning itself raise
        port = ""
    return f"{parts.scheme}://{parts.hostname or '?'}{port}/…"


def notify_webhook(url: str, alerts: Sequence[Alert], *, timeout: float, retries: int, run_date: date | str,
                   sleep: Callable[[float], None] = time.sleep) -> bool:
    """POST the NEW alerts as Slack-compatible JSON ({"text": ...}); True once a 2xx answered.

    Nothing is sent (and True returned) when no alert is new. Each attempt has a wall-clock deadline of
    `timeout` seconds. A redirect is a failure, not followed (it would turn the POST into a GET). A
    timeout, connection error, 429 or 5xx is retried up to `retries` times after BACKOFF * attempt
    seconds. Never raises: a failure is logged as a warning naming the host and returns False."""
    fresh = [a for a in alerts if a.new]
    if not fresh:
        return True
    body = json.dumps({"text": summary_text(fresh, run_date)}).encode()
    attempt = 0
    while True:
        attempt += 1
        try:
            request = urllib.request.Request(url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            netio.exchange(request, timeout=timeout, max_bytes=MAX_REPLY_BYTES, follow_redirects=False)
            return True
        except urllib.error.HTTPError as exc:
            exc.close()
            error, transient = f"HTTP {exc.code}", exc.code == 429 or exc.code >= 500
        except (ValueError, http.client.InvalidURL, netio.BodyError) as exc:  # not a usable URL or answer
            error, transient = str(exc), False
        except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, refused or reset connections
            error, transient = str(exc) or type(exc).__name__, True
        if not transient or attempt > retries:
            log.warning("webhook %s: %s not delivered after %s: %s", _redacted(url),
                        _plural(len(fresh), "alert"), _plural(attempt, "attempt"), error)
            return False
        sleep(BACKOFF * attempt)


# --- the outbox ---------------------------------------------------------------------------------


def outbox_key(alert: Alert) -> OutboxKey:
    return (alert.run_date, *alert.key)


@contextmanager
def _outbox_locked(data_dir: Path) -> Iterator[Path]:
    """The outbox path, under an exclusive lock for one read-modify-write (never held during a POST)."""
    data_dir = Path(data_dir)
    fd = os.open(data_dir / _OUTBOX_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield data_dir / OUTBOX_FILE
    finally:
        os.close(fd)


def _read_outbox(path: Path) -> list[Alert]:
    if not path.exists():
        return []
    alerts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            alerts.append(Alert(**json.loads(line)))
        except (ValueError, TypeError) as exc:
            log.warning("%s: line %d is not an alert, dropped: %s", path, number, exc)
    return alerts


def _write_outbox(path: Path, alerts: Iterable[Alert]) -> None:
    body = "".join(json.dumps(a.row()) + "\n" for a in alerts).encode("utf-8")
    store.atomic_write(path, lambda f: f.write(body))


def enqueue(data_dir: Path, alerts: Iterable[Alert]) -> None:
    """Add `alerts` to the outbox; an entry with the same key is replaced, not repeated."""
    with _outbox_locked(data_dir) as path:
        entries = {outbox_key(a): a for a in _read_outbox(path)}
        added = {outbox_key(a): a for a in alerts}
        if added:
            _write_outbox(path, {**entries, **added}.values())


def pending(data_dir: Path) -> list[Alert]:
    """The alerts waiting in the outbox, oldest run date first."""
    with _outbox_locked(data_dir) as path:
        return sorted(_read_outbox(path), key=lambda a: a.run_date)


def _remove(data_dir: Path, keys: set[OutboxKey]) -> None:
    with _outbox_locked(data_dir) as path:
        _write_outbox(path, [a for a in _read_outbox(path) if outbox_key(a) not in keys])


def deliver(data_dir: Path, url: str, *, timeout: float, retries: int,
            sleep: Callable[[float], None] = time.sleep) -> bool | None:
    """Send what the outbox holds, one message per run date (oldest first), removing a date's entries once
    delivered; at the first failure the rest stay for the next run. None when the outbox is empty, else
    whether it is empty now. A kill between a POST and the removal re-sends that message: at least once."""
    waiting = pending(data_dir)
    if not waiting:
        return None
    for run_date, group in groupby(waiting, key=lambda a: a.run_date):
        alerts = list(group)
        if not notify_webhook(url, alerts, timeout=timeout, retries=retries, run_date=run_date, sleep=sleep):
            return False
        _remove(data_dir, {outbox_key(a) for a in alerts})
    return True

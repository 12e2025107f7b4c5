"""Notification of new alerts: the outbox in the data directory, the Slack-compatible webhook message
and its delivery (at least once per alert, deduplicated by key), and the silences (acknowledged incidents
and muted series, each with a note, in mutes.json) that the notifier honours."""

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
from dataclasses import asdict, dataclass, fields
from datetime import date, datetime, timezone
from itertools import groupby
from pathlib import Path
from urllib.parse import urlsplit

from pipeline import jsonl, netio, store
from pipeline.alerts import Alert, condition_of, plural
from pipeline.contract import ALERT
from pipeline.errors import DriftwatchError
from pipeline.redact import redact

log = logging.getLogger(__name__)

MAX_NOTIFIED = 20  # alert lines in one webhook message; the rest are counted
BACKOFF = 0.5  # seconds times the attempt number between webhook attempts
MAX_REPLY_BYTES = 1_000_000  # a webhook's answer is read (and dropped) up to this size
OUTBOX_FILE = "outbox.jsonl"  # alerts waiting for delivery, one alerts.csv row as JSON per line
_OUTBOX_LOCK = ".outbox.lock"

OutboxKey = tuple[str, str, str, str]  # run_date, rule, pipeline, metric
MUTES_FILE = "mutes.json"  # acknowledged incidents and muted series, with their notes
ACKNOWLEDGE, MUTE = "acknowledge", "mute"



def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def summary_text(alerts: Sequence[Alert], run_date: date | str) -> str:
    """The webhook message: a headline counting alerts and warnings, then one line per alert."""
    n_alerts = sum(a.severity == ALERT for a in alerts)
    lines = [f"driftwatch {run_date}: {plural(n_alerts, 'new alert')}, "
             f"{plural(len(alerts) - n_alerts, 'new warning')}"]
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
    body = json.dumps({"text": redact(summary_text(fresh, run_date))}).encode()
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
                        plural(len(fresh), "alert"), plural(attempt, "attempt"), error)
            return False
        sleep(BACKOFF * attempt)


# --- silences: acknowledged incidents and muted series -------------------------------------------


class SilenceError(DriftwatchError):
    """A mutes.json the notifier cannot read, or a silence that cannot be kept; the message names it."""


def acknowledged_target(condition: tuple[str, ...], since: str) -> tuple:
    """`Silence.target` of an acknowledgement: the incident of `condition` (`alerts.condition_of`) that started on
    `since` (YYYY-MM-DD)."""
    return (ACKNOWLEDGE, *condition, since)


@dataclass(frozen=True)
class Silence:
    """No notification for a condition. `acknowledge`: the incident that started on `since` (someone is on it);
    the same condition starting again later is a new incident and pages. `mute`: the series (rule, pipeline,
    metric) on every run date up to `until` (YYYY-MM-DD, inclusive; empty: until lifted)."""

    kind: str
    rule: str
    pipeline: str
    metric: str
    note: str
    since: str = ""
    until: str = ""
    created: str = ""
    by: str = ""  # who acknowledged (a mutes.json written before names were asked has none)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.rule, self.pipeline, self.metric

    @property
    def target(self) -> tuple:
        """What it silences: an acknowledgement, the condition (`alerts.condition_of`) of the incident that
        started on `since`, whichever of its series it was made on; a mute, its series."""
        if self.kind == ACKNOWLEDGE:
            return acknowledged_target(condition_of(*self.key), self.since)
        return MUTE, *self.key

    @property
    def statement(self) -> str:
        """"acknowledged by ana at 2026-11-22T08:00:00Z, until the condition ends: on it" / "muted until D: note"."""
        if self.kind == ACKNOWLEDGE:
            who = f" by {self.by}" if self.by else ""
            at = f" at {self.created}" if self.created else ""
            return f"acknowledged{who}{at}, until the condition ends: {self.note}"
        return f"muted{' until ' + self.until if self.until else ''}: {self.note}"

    def covers(self, alert: Alert) -> bool:
        if self.kind == ACKNOWLEDGE:  # the incident: a pipeline's drop or slow drift in any of its series
            return (alert.condition == condition_of(*self.key)
                    and (alert.since or alert.run_date) == self.since)
        return alert.key == self.key and (not self.until or alert.run_date <= self.until)

    def check(self, where: str) -> None:
        if self.kind not in (ACKNOWLEDGE, MUTE):
            raise SilenceError(f"{where}: kind must be {ACKNOWLEDGE!r} or {MUTE!r}, not {self.kind!r}")
        if not self.rule or not self.metric:
            raise SilenceError(f"{where}: a silence names a rule and a metric")
        if not self.note.strip():
            raise SilenceError(f"{where}: a silence needs a note (who, why)")
        for name, value in (("since", self.since), ("until", self.until)):
            if value:
                try:
                    date.fromisoformat(value)
                except ValueError:
                    raise SilenceError(f"{where}: {name} is not a date (YYYY-MM-DD): {value!r}") from None
        if self.kind == ACKNOWLEDGE and not self.since:
            raise SilenceError(f"{where}: an acknowledgement names the incident's first run date (since)")


def read_silences(data_dir: Path) -> list[Silence]:
    """The silences of a data directory ([] without mutes.json); SilenceError naming the file and entry when
    it cannot be used."""
    path = Path(data_dir) / MUTES_FILE
    if not path.exists():
        return []
    try:
        raw = jsonl.loads_bounded(path.read_text(encoding="utf-8"), path, SilenceError)
    except SilenceError:
        raise
    except (ValueError, OSError) as exc:
        raise SilenceError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(raw, list):
        raise SilenceError(f"{path}: expected a list of silences")
    names = {f.name for f in fields(Silence)}
    out = []
    for number, entry in enumerate(raw, start=1):
        where = f"{path}, entry {number}"
        if not isinstance(entry, dict) or set(entry) - names or not all(isinstance(v, str) for v in entry.values()):
            raise SilenceError(f"{where}: expected an object of text fields among {', '.join(sorted(names))}")
        try:
            silence = Silence(**entry)
        except TypeError as exc:
            raise SilenceError(f"{where}: {exc}") from None
        silence.check(where)
        out.append(silence)
    return out


def _write_silences(data_dir: Path, silences: Iterable[Silence]) -> None:
    body = json.dumps([asdict(s) for s in silences], indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    store.atomic_write(Path(data_dir) / MUTES_FILE, lambda f: f.write(body))


def add_silence(data_dir: Path, silence: Silence) -> Silence:
    """Keep `silence` (checked first; it replaces one on the same `target`: an acknowledgement of the same
    incident, on whichever of its series, or a mute of the same series), stamped with the time it was made."""
    silence.check(str(Path(data_dir) / MUTES_FILE))
    if silence.kind == ACKNOWLEDGE and not silence.by.strip():  # (entries made before names were asked still read)
        raise SilenceError("an acknowledgement needs the name of who is on it: every page shows it")
    stamped = Silence(**{**asdict(silence), "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
    with _outbox_locked(data_dir):
        kept = [s for s in read_silences(data_dir) if s.target != silence.target]
        _write_silences(data_dir, [*kept, stamped])
    return stamped


def lift_silence(data_dir: Path, kind: str, key: tuple[str, str, str]) -> bool:
    """Forget the silence of `kind` on a condition; whether there was one."""
    with _outbox_locked(data_dir):
        silences = read_silences(data_dir)
        kept = [s for s in silences if (s.kind, s.key) != (kind, tuple(key))]
        if len(kept) != len(silences):
            _write_silences(data_dir, kept)
    return len(kept) != len(silences)


def silenced_by(alert: Alert, silences: Sequence[Silence]) -> Silence | None:
    return next((s for s in silences if s.covers(alert)), None)


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
            alerts.append(Alert(**jsonl.loads_bounded(line, f"{path}:{number}")))
        except (ValueError, TypeError) as exc:
            log.warning("%s: line %d is not an alert, dropped: %s", path, number, exc)
    return alerts


def _write_outbox(path: Path, alerts: Iterable[Alert]) -> None:
    body = "".join(json.dumps({k: redact(v) if isinstance(v, str) else v for k, v in a.row().items()}) + "\n"
                   for a in alerts).encode("utf-8")
    store.atomic_write(path, lambda f: f.write(body))


def enqueue(data_dir: Path, alerts: Iterable[Alert]) -> None:
    """Add `alerts` to the outbox, less those a silence covers; an entry with the same key is replaced, not
    repeated. Reads mutes.json first, so a broken one stops the run before anything is queued."""
    silences = read_silences(data_dir)
    with _outbox_locked(data_dir) as path:
        entries = {outbox_key(a): a for a in _read_outbox(path)}
        added = {outbox_key(a): a for a in alerts if silenced_by(a, silences) is None}
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
    silences = read_silences(data_dir)
    waiting = pending(data_dir)
    if not waiting:
        return None
    quiet = [a for a in waiting if silenced_by(a, silences) is not None]
    if quiet:  # silenced after they were queued: dropped, not sent
        log.info("%s silenced in %s, not sent", plural(len(quiet), "queued alert"), MUTES_FILE)
        _remove(data_dir, {outbox_key(a) for a in quiet})
        waiting = [a for a in waiting if silenced_by(a, silences) is None]
        if not waiting:
            return True
    for run_date, group in groupby(waiting, key=lambda a: a.run_date):
        alerts = list(group)
        if not notify_webhook(url, alerts, timeout=timeout, retries=retries, run_date=run_date, sleep=sleep):
            return False
        _remove(data_dir, {outbox_key(a) for a in alerts})
    return True

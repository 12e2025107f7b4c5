"""Notification of new alerts: the Slack-compatible webhook message and its delivery."""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import date
from urllib.parse import urlsplit

from pipeline.alerts import ALERT, Alert, _plural

log = logging.getLogger(__name__)

MAX_NOTIFIED = 20  # alert lines in one webhook message; the rest are counted
BACKOFF = 0.5  # seconds times the attempt number between webhook attempts



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
    """POST the run's NEW alerts as Slack-compatible JSON ({"text": ...}); True once delivered.

    Nothing is sent (and True returned) when no alert is new. A timeout, connection error, 429 or
    5xx is retried up to `retries` times after BACKOFF * attempt seconds. Never raises: a failure
    is logged as a warning naming the host and returns False (the rows are already in alerts.csv)."""
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
            with urllib.request.urlopen(request, timeout=timeout) as response:
                response.read()
            return True
        except urllib.error.HTTPError as exc:
            exc.close()
            error, transient = f"HTTP {exc.code}", exc.code == 429 or exc.code >= 500
        except (ValueError, http.client.InvalidURL) as exc:  # not a usable URL
            error, transient = str(exc), False
        except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, refused or reset connections
            error, transient = str(exc) or type(exc).__name__, True
        if not transient or attempt > retries:
            log.warning("webhook %s: %s not delivered after %s: %s", _redacted(url),
                        _plural(len(fresh), "alert"), _plural(attempt, "attempt"), error)
            return False
        sleep(BACKOFF * attempt)

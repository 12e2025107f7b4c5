"""The one redaction of secrets: every URL or upstream message that driftwatch writes (CSV, HTML, logs, exports,
notifications) goes through `redact` first, and a logging filter applies it to every record as a backstop."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pipeline.config import Config

MASK = "***"
MIN_SECRET_LENGTH = 4  # a shorter configured value would mask ordinary words and digits everywhere

# A query parameter whose NAME contains one of these (case-insensitive) carries a credential.
SECRET_PARAM_WORDS = ("token", "key", "secret", "passw", "pwd", "sig", "auth", "credential", "session")

_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@?#]*):(?P<password>[^/\s@?#]*)@")
_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[^=&;#\s?\"'<>]+)=)(?P<value>[^&;#\s\"'<>]*)")
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{4,}", re.IGNORECASE)

_lock = threading.Lock()
_values: frozenset[str] = frozenset()


def remember(values: Iterable[str | None]) -> None:
    """Add configured secret values (API keys, header values, a webhook's path) to those masked everywhere."""
    global _values
    fresh = {v for v in values if v and len(v) >= MIN_SECRET_LENGTH}
    with _lock:
        _values = _values | fresh


def forget() -> None:
    """Drop every remembered value (tests; a process that loads another configuration)."""
    global _values
    with _lock:
        _values = frozenset()


def config_secrets(cfg: Config) -> list[str]:
    """The secret values a configuration names: the environment variables it names for secrets (the judge's API
    key, the HTTP targets' headers, a pgvector target's dsn), the path of its webhook (a Slack webhook's path is its credential), and the
    passwords and secret-named query values of its URLs (so an upstream reply that echoes one is masked too)."""
    names = [cfg.generation.api_key_env] + [env for t in cfg.targets for env in t.headers.values()]
    values = [os.environ.get(name) for name in names if name]
    if cfg.alerts.webhook_url:
        path = urlsplit(cfg.alerts.webhook_url).path
        values.append(path if len(path.strip("/")) >= MIN_SECRET_LENGTH else None)
    urls = [s.url for s in cfg.sources] + [t.url for t in cfg.targets] + [cfg.generation.base_url]
    dsns = [os.environ.get(t.dsn_env) for t in cfg.targets if t.dsn_env]  # a pgvector target's connection string
    values += dsns
    urls += dsns  # and its password alone, as a driver's message may quote it apart
    urls += [cfg.export.mlflow.tracking_uri] if cfg.export.mlflow is not None else []
    for url in filter(None, urls):
        values += [m["password"] for m in _USERINFO.finditer(url)]
        values += [m["value"] for m in _PARAM.finditer(url) if _param(m) != m[0]]
    return [v for v in values if v]


def _param(match: re.Match) -> str:
    name = match["name"].lower()
    if match["value"] and any(word in name for word in SECRET_PARAM_WORDS):
        return match["head"] + MASK
    return match[0]


def redact(text: object) -> str:
    """`text` (a URL, a message, a reply) with its secrets masked: the password of a URL's userinfo
    (https://user:***@host), the value of a query parameter whose name looks secret (?token=***), an
    Authorization-style credential (Bearer ***), and every remembered configured value, anywhere."""
    text = "" if text is None else str(text)
    for value in sorted(_values, key=len, reverse=True):  # the longest first: one value may contain another
        text = text.replace(value, MASK)
    if "://" in text:
        text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@" if m["password"] else m[0], text)
    if "=" in text:
        text = _PARAM.sub(_param, text)
    return _BEARER.sub(lambda m: f"{m['scheme']} {MASK}", text)


class RedactingFilter(logging.Filter):
    """Redacts every record's formatted message (and traceback) before a handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Put the filter on every handler of `logger` (the root by default); entry points call it once they have
    configured logging. A filter on handlers sees the records of every logger that propagates to them."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())

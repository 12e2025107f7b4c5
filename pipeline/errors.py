"""The base class of every domain error: bad input that the command line turns into exit 2 and the pages
into one message naming the file, line or key. Anything else is a bug and propagates."""

from __future__ import annotations


class DriftwatchError(Exception):
    """Input driftwatch cannot use (a config, a CSV, a feed, a gold set, a report...); the message names it."""

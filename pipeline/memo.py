"""What a run computed from its inputs, kept under a hash of those inputs in `<data_dir>/memo/`, so that a run
whose inputs did not change (a day with nothing new) reads the result instead of computing it again.

Two memos: the builtin pipelines' rankings (inputs: the corpus on the run date, the settings, the questions)
and the embedding-drift verdicts (inputs: the documents of the reference and current windows, the corpora the
near copies are looked for in, the settings). Each file holds one entry, the latest computed; a key that does
not match, a damaged or unreadable file is a miss (the run computes, as without a memo), never an error. Every
key includes a digest of the package's source, so code that changed never reads what other code computed.
`Calls` keeps the calls of a pure function a run made (the top-1 KS test), for a re-run of the same date; the
store keeps its seal here too (`store.seal`: each CSV's digest as the last finished run left it, authenticated
with `seal.key`), written even with the memo off: it is what names edits made outside driftwatch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pipeline import jsonl

log = logging.getLogger(__name__)

MEMO_DIR = "memo"  # in the data directory
FORMAT = 1
ENV_OFF = "DRIFTWATCH_NO_MEMO"  # set (to anything but "" or "0"): every run computes everything


def enabled() -> bool:
    return os.environ.get(ENV_OFF, "") in ("", "0")


def digest(pairs: Iterable[tuple[str, str]]) -> str:
    """A hash of (doc id, content hash) pairs in order: the identity of a set of document versions."""
    return hashlib.sha256("".join(f"{doc_id}\0{content_hash}\n" for doc_id, content_hash in pairs).encode()).hexdigest()


@functools.cache
def code_digest() -> str:
    """A hash of the package's source: every pipeline/**/*.py file's relative path and bytes, in path order, read
    once per process (48 files, 0.7 MB: 1.4 to 2 ms). `__version__` never changed between releases; this changes
    with any edit of the code, so an upgrade computes anew rather than trust what older code computed."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        name, body = path.relative_to(root).as_posix().encode(), path.read_bytes()
        h.update(b"%d %d\n" % (len(name), len(body)) + name + body)  # lengths first: no two sources run together
    return h.hexdigest()


def key(**inputs) -> str:
    """The memo key of these inputs (JSON-able), with the memo format and the code (`code_digest`)."""
    blob = json.dumps({"format": FORMAT, "code": code_digest(), **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def load(data_dir: Path, name: str) -> tuple[str, dict] | None:
    """The key and value kept as `name`, or None (no file, a damaged file)."""
    path = Path(data_dir) / MEMO_DIR / f"{name}.json"
    try:
        stored = jsonl.loads_bounded(path.read_text(encoding="utf-8"), path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable memo (%s): computing anew", path, exc)
        return None
    if not isinstance(stored, dict) or not isinstance(stored.get("key"), str) or not isinstance(stored.get("value"), dict):
        log.warning("%s: unreadable memo (not a key and a value): computing anew", path)
        return None
    return stored["key"], stored["value"]


def save(data_dir: Path, name: str, memo_key: str, value: dict) -> None:
    """Keep `value` under `memo_key`, replacing the file atomically (a failure is logged, never fatal)."""
    folder = Path(data_dir) / MEMO_DIR
    path = folder / f"{name}.json"
    tmp = folder / f".{name}.{os.getpid()}.part"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"key": memo_key, "value": value}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("%s: cannot keep the memo (%s)", path, exc)
        tmp.unlink(missing_ok=True)


class Calls:
    """The results of a pure function of JSON-able arguments, kept as `name` by their arguments: a call the last
    run made with the same arguments is read, not made again. `inputs`: what else the results depend on (e.g. the
    version of the library computing them). The file keeps the calls of the latest run (`save`) only."""

    def __init__(self, data_dir: Path, name: str, **inputs) -> None:
        self.data_dir, self.name, self.key = Path(data_dir), name, key(kind=name, **inputs)
        kept = load(data_dir, name) if enabled() else None
        self.known = kept[1] if kept is not None and kept[0] == self.key else {}
        self.made: dict[str, Any] = {}

    def __call__(self, function: Callable[..., Any], *args) -> Any:
        """function(*args), or what it returned for the same arguments last time (as JSON gives it back)."""
        call = hashlib.sha256(json.dumps(args, default=float).encode()).hexdigest()
        self.made[call] = self.known[call] if call in self.known else function(*args)
        return self.made[call]

    def save(self) -> None:
        if enabled():
            save(self.data_dir, self.name, self.key, self.made)

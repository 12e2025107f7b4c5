"""The attack of issue 29, kept: small probes per family (kills, concurrent runs, hand edits of the store, hostile
servers on localhost, bad inputs, secrets at rest, caps), each clean or failed, and a table of them.

Run from the repo root: python -m bench.attack [--quick] [--family NAME ...]. A probe of a defence not built yet
prints "failed" with why, so the next change is measured the same way."""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pipeline import contract, memo, store
from pipeline.config import Config, ExportConfig, RetrievalConfig, SourceConfig, TargetConfig
from pipeline.errors import DriftwatchError

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "tests" / "data" / "e2e"  # a small feed folder (dated files) and its gold set
DAYS = [date(2026, 11, 2), date(2026, 11, 3)]
MARKER = "s3cr3t-MARKER-7d41"  # planted secret: found in any written file or the log, the probe fails
DEEP = 100_000  # nesting levels of a hostile JSON reply


@dataclass(frozen=True)
class Outcome:
    family: str
    probe: str
    clean: bool
    why: str = ""


class Bench:
    """What the probes share: a scratch folder, a base history (built on first use), the embedder, the log."""

    def __init__(self, root: Path, quick: bool) -> None:
        self.root, self.quick, self._base, self._embedder = root, quick, None, None
        self.log = root / "attack.log"
        handler = logging.FileHandler(self.log)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.INFO)
        self.n = 0

    def folder(self) -> Path:
        self.n += 1
        path = self.root / f"p{self.n}"
        path.mkdir()
        return path

    def config(self, where: Path, **changes) -> Config:
        if not (where / "e2e").exists():
            shutil.copytree(E2E, where / "e2e")
        base = Config(data_dir=where / "store", gold=where / "e2e" / "gold.jsonl",
                      sources=(SourceConfig(name="ledger", path=where / "e2e" / "feeds"),),
                      retrieval=RetrievalConfig(pipelines=("bm25", "hybrid"), k=(1, 3), candidate_depth=10))
        return base.replace(**changes) if changes else base

    @property
    def embedder(self):
        if self._embedder is None:
            from pipeline.config import EmbedderConfig
            from pipeline.embeddings import Embedder
            self._embedder = Embedder(EmbedderConfig())
        return self._embedder

    def run(self, config: Config, day: date, **kwargs):
        from pipeline.job import run_day
        return run_day(config, day, embedder=self.embedder, notify=kwargs.pop("notify", False), **kwargs)

    def history(self) -> Config:
        """A copy of the base history (two runs of the e2e feeds, sealed)."""
        if self._base is None:
            self._base = self.root / "base"
            config = self.config(self._base)
            for day in DAYS:
                self.run(config, day)
        where = self.folder()
        shutil.copytree(self._base, where, dirs_exist_ok=True)
        return self.config(where)


def csv_bytes(data_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data_dir.glob("*.csv"))}


# --- servers on localhost --------------------------------------------------------------------------------------

class Server:
    """A local HTTP server answering every request with `reply(handler)` -> (status, headers, body)."""

    def __init__(self, reply: Callable[[BaseHTTPRequestHandler], tuple[int, dict, bytes]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                try:
                    status, headers, body = reply(self)
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def deep_json() -> bytes:
    return b"[" * DEEP + b"]" * DEEP


def feed_xml(n: int, words: int = 3) -> bytes:
    items = "".join(f"<item><guid>a{i}</guid><title>t{i}</title><description>{' '.join(['w'] * words)} {i}"
                    f"</description><pubDate>Tue, 03 Nov 2026 08:00:00 GMT</pubDate></item>" for i in range(n))
    return f'<?xml version="1.0"?><rss version="2.0"><channel><title>x</title>{items}</channel></rss>'.encode()


# --- the probes: each returns "" when the defence held, else why not -------------------------------------------

def kills(bench: Bench) -> list[tuple[str, Callable[[], str]]]:
    """A re-run of the latest date killed (os._exit, as SIGKILL) after its N-th store write; the next recover must
    leave every CSV as before the re-run, byte for byte."""
    points = random.Random(29).sample(range(8), 3) if bench.quick else list(range(8))

    def probe(n: int) -> str:
        config = bench.history()
        before = csv_bytes(config.data_dir)
        driver = (f"import os, sys; sys.path.insert(0, {str(ROOT)!r})\n"
                  "from pipeline import store\nfrom bench.attack import Bench\nfrom pathlib import Path\n"
                  f"done = []\nwrite = store.replace_date\n"
                  "def dying(*a, **k):\n"
                  f"    if len(done) == {n}: os._exit(9)\n"
                  "    write(*a, **k); done.append(1)\n"
                  "store.replace_date = dying\n"
                  f"b = Bench(Path({str(bench.root)!r}), True)\n"
                  f"b.run(b.config(Path({str(config.data_dir.parent)!r})), __import__('datetime').date(2026, 11, 3))\n")
        done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
        if done.returncode not in (9, -9, 0):
            return f"the killed run failed otherwise: {done.stderr.strip().splitlines()[-1:]}"
        with store.run_lock(config.data_dir):
            store.recover(config.data_dir)
        changed = [k for k in before if csv_bytes(config.data_dir).get(k) != before[k]]
        return f"after a kill at write {n}: {', '.join(changed)} differ" if changed and done.returncode else ""
    return [(f"killed after write {n}", lambda n=n: probe(n)) for n in points]


def concurrent(bench: Bench) -> list[tuple[str, Callable[[], str]]]:
    def probe() -> str:
        config = bench.history()
        before = csv_bytes(config.data_dir)
        with store.run_lock(config.data_dir):
            try:
                bench.run(config, date(2026, 11, 4))
            except store.LockError as exc:
                return "" if str(os.getpid()) in str(exc) and csv_bytes(config.data_dir) == before else \
                    f"refused, but: {exc}"
        return "a second run wrote while the lock was held"
    return [("a run while another holds the lock", probe)]


def _edit(name: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def edit(data_dir: Path) -> None:
        path = data_dir / name
        path.write_bytes(change(path.read_bytes()))
    return edit


def _forge_seal(data_dir: Path) -> None:
    _edit(contract.METRICS, lambda d: d.replace(b",recall,", b",recall,0", 1))(data_dir)
    path = data_dir / memo.MEMO_DIR / f"{store.SEAL}.json"
    kept = json.loads(path.read_text())
    metrics = data_dir / contract.METRICS
    kept["value"]["files"][contract.METRICS].update(sha256=store._digest(metrics), size=metrics.stat().st_size)
    path.write_text(json.dumps(kept))


def hand_edits(bench: Bench) -> list[tuple[str, Callable[[], str]]]:
    """Each edit, then a run: the run must name metrics.csv (or the seal) and write nothing."""
    def second_row(d: bytes) -> tuple[int, int]:
        start = d.index(b"\n") + 1
        return start, d.index(b"\n", start) + 1
    edits = {
        "a value changed": _edit(contract.METRICS, lambda d: d.replace(b",0.", b",0.9", 1)),
        "a row deleted": _edit(contract.METRICS, lambda d: d[:second_row(d)[0]] + d[second_row(d)[1]:]),
        "a row duplicated": _edit(contract.METRICS, lambda d: d[:second_row(d)[1]] + d[slice(*second_row(d))]
                                  + d[second_row(d)[1]:]),
        "metrics.csv emptied": _edit(contract.METRICS, lambda d: b""),
        "metrics.csv removed": lambda data_dir: (data_dir / contract.METRICS).unlink(),
        "a forged seal": _forge_seal,
    }

    def probe(edit: Callable[[Path], None]) -> str:
        config = bench.history()
        edit(config.data_dir)
        before = csv_bytes(config.data_dir)
        try:
            bench.run(config, date(2026, 11, 4))
        except DriftwatchError as exc:
            named = "metrics.csv" in str(exc) or "seal" in str(exc)
            if csv_bytes(config.data_dir) != before:
                return "refused, but after writing rows"
            return "" if named else f"refused without naming the file: {exc}"
        return "the run went on without a word of the edit"
    return [(name, lambda edit=edit: probe(edit)) for name, edit in edits.items()]


def hostile(bench: Bench) -> list[tuple[str, Callable[[], str]]]:
    """Hostile feeds, targets and webhooks on localhost: the run ends within its deadlines and writes its runs row."""
    def stalling_feed() -> str:
        def reply(handler):
            time.sleep(6)
            return 200, {"Content-Type": "application/rss+xml"}, feed_xml(1)
        server = Server(reply)
        try:
            where = bench.folder()
            config = bench.config(where, sources=(*bench.config(where).sources,
                                                  SourceConfig(name="slow", url=server.url)))
            config = config.replace(fetch=dataclasses.replace(config.fetch, timeout=2.0))
            t0 = time.monotonic()
            result = bench.run(config, date.today())
            took = time.monotonic() - t0
            failed = result.run["feeds_failed"]
            return "" if failed == 1 and took < 60 else f"feeds_failed {failed}, {took:.0f} s"
        finally:
            server.close()

    def gzip_bomb() -> str:
        bomb = gzip.compress(b"<" * 200_000_000)
        server = Server(lambda h: (200, {"Content-Type": "application/rss+xml", "Content-Encoding": "gzip"}, bomb))
        try:
            where = bench.folder()
            config = bench.config(where, sources=(*bench.config(where).sources,
                                                  SourceConfig(name="bomb", url=server.url)))
            result = bench.run(config, date.today())
            return "" if result.run["feeds_failed"] == 1 else "the bomb was not refused"
        finally:
            server.close()

    def deep_target() -> str:
        server = Server(lambda h: (200, {"Content-Type": "application/json"}, deep_json()))
        try:
            where = bench.folder()
            config = bench.config(where, targets=(TargetConfig(name="bm25", kind="builtin"),
                                                  TargetConfig(name="deep", kind="http", url=server.url, timeout=5)))
            try:
                result = bench.run(config, DAYS[0])
            except RecursionError:
                return "RecursionError: the run stopped with no runs row"
            failed = [o.name for o in result.failed_targets]
            return "" if failed == ["deep"] and store.read_runs(config.data_dir).shape[0] == 1 else \
                f"failed targets {failed}"
        finally:
            server.close()

    def silent_webhook() -> str:
        def reply(handler):
            time.sleep(30)
            return 200, {}, b""
        server = Server(reply)
        try:
            from pipeline.notify import deliver
            where = bench.folder()
            (where / "store").mkdir()
            (where / "store" / "outbox.jsonl").write_text(json.dumps(
                {c: "" for c in contract.ALERTS_COLUMNS} | {"run_date": "2026-11-02", "rule": "drop",
                                                           "severity": "alert", "message": "m"}) + "\n")
            t0 = time.monotonic()
            deliver(where / "store", server.url, timeout=2.0, retries=0, sleep=lambda s: None)
            took = time.monotonic() - t0
            return "" if took < 10 else f"delivery took {took:.0f} s"
        finally:
            server.close()
    probes = [("a feed that stalls past its deadline", stalling_feed), ("a gzip bomb feed", gzip_bomb),
              ("an HTTP target replying deeply nested JSON", deep_target),
              ("a webhook that never answers", silent_webhook)]
    return probes


def bad_inputs(bench: Bench) -> list[tuple[str, Callable[[], str]]]:
    """Bad configs, gold sets and histories: a DriftwatchError (exit 2, naming the input), never a traceback."""
    def refused(make: Callable[[Path], Config], day: date = DAYS[0], goes_on: bool = False) -> Callable[[], str]:
        """Clean when the run stops with a domain error (exit 2), or (`goes_on`) finishes naming the bad line."""
        def probe() -> str:
            where = bench.folder()
            config = make(where)
            try:
                bench.run(config, day, notify=goes_on)
            except DriftwatchError:
                return ""
            except Exception as exc:  # noqa: BLE001 (what the probe is about: anything but a domain error)
                return f"{type(exc).__name__}: {str(exc)[:80]}"
            return "" if goes_on else "the run went on"
        return probe

    def gold_dir(where: Path) -> Config:
        (where / "golddir").mkdir()
        return bench.config(where, gold=where / "golddir")

    def data_under_file(where: Path) -> Config:
        (where / "afile").write_text("x")
        return bench.config(where, data_dir=where / "afile" / "store")

    def csv_dir(where: Path) -> Config:
        (where / "store" / contract.METRICS).mkdir(parents=True)
        return bench.config(where)

    def bad_history(where: Path) -> Config:
        (where / "store").mkdir()
        (where / "store" / contract.METRICS).write_text("run_date,pipeline\n2026-11-02,x\n")
        return bench.config(where)

    def deep_mutes(where: Path) -> Config:
        (where / "store").mkdir()
        (where / "store" / "mutes.json").write_bytes(deep_json())
        config = bench.config(where)  # read when alerts are delivered: a webhook (nothing listens on port 9)
        return config.replace(alerts=dataclasses.replace(config.alerts, webhook_url="http://127.0.0.1:9/",
                                                         webhook_timeout=1.0, webhook_retries=0))

    def bad_toml() -> str:
        from pipeline.config import load_config
        where = bench.folder()
        (where / "monitor.toml").write_text("data_dir = [\n")
        try:
            load_config(where / "monitor.toml")
        except DriftwatchError as exc:
            return "" if "monitor.toml" in str(exc) else f"not named: {exc}"
        return "a broken TOML file was read"
    return [("a gold path that is a directory", refused(gold_dir)),
            ("a data_dir under a regular file", refused(data_under_file)),
            ("a CSV path that is a directory", refused(csv_dir)),
            ("a history with a wrong header", refused(bad_history)),
            ("mutes.json nested 100,000 deep", refused(deep_mutes, goes_on=True)),
            ("a config that is not TOML", bad_toml)]


def secrets_at_rest(bench: Bench) -> list[tuple[str, Callable[[], str]]]:
    """A token in a feed URL and a password in an MLflow tracking URI: searched in every written file and the log."""
    def found(where: Path) -> list[str]:
        hits = [p.relative_to(where).as_posix() for p in where.rglob("*") if p.is_file() and p.suffix != ".sqlite"
                and MARKER.encode() in p.read_bytes()]
        return hits + (["the log"] if MARKER in bench.log.read_text(errors="replace") else [])

    def feed_token() -> str:
        def reply(handler):  # one feed answers, one fails: a failure is logged with its URL
            ok = handler.path.startswith("/ok")
            return (200 if ok else 500), {"Content-Type": "application/rss+xml"}, feed_xml(3) if ok else b"no"
        server = Server(reply)
        try:
            where = bench.folder()
            bench.log.write_text("")
            config = bench.config(where, sources=(
                *bench.config(where).sources, SourceConfig(name="tok", url=f"{server.url}/ok?token={MARKER}"),
                SourceConfig(name="down", url=f"{server.url}/down?api_key={MARKER}")))
            bench.run(config, date.today())
            hits = found(where / "store")
            return f"found in {', '.join(hits)}" if hits else ""
        finally:
            server.close()

    def tracking_password() -> str:
        where = bench.folder()
        bench.log.write_text("")
        from pipeline.config import MlflowExportConfig
        config = bench.config(where, export=ExportConfig(mlflow=MlflowExportConfig(
            tracking_uri=f"http://user:{MARKER}@127.0.0.1:9/")))
        try:
            bench.run(config, DAYS[0])
        except DriftwatchError:
            pass
        hits = found(where / "store")
        return f"found in {', '.join(hits)}" if hits else ""
    return [("a token in the URLs of a feed and of a failing feed", feed_token),
            ("a password in the MLflow tracking URI", tracking_password)]


def caps(bench: Bench) -> list[tuple[str, Callable[[], str]]]:
    """No single feed or document may stall the job: a cap per source (entries) and per document must exist and
    name what it skipped in the run's events."""
    def cap_fields() -> list[str]:
        from pipeline import config as cfg
        names = [f"{c.__name__}.{f.name}" for c in (cfg.FetchConfig, cfg.CorpusConfig, cfg.RunConfig)
                 for f in dataclasses.fields(c)]
        return [n for n in names if any(w in n for w in ("entries", "chars", "chunks", "deadline"))]

    def probe(word: str, what: str) -> Callable[[], str]:
        def run() -> str:
            fields = [f for f in cap_fields() if word in f]
            return "" if fields else f"no {what} setting in the config"
        return run
    return [("a cap on entries per source", probe("entries", "entries-per-source cap")),
            ("a cap on a document's size", probe("chars", "per-document cap")),
            ("an overall run deadline", probe("deadline", "run deadline"))]


FAMILIES: dict[str, Callable[[Bench], list[tuple[str, Callable[[], str]]]]] = {
    "kills": kills, "concurrent runs": concurrent, "hand edits": hand_edits, "hostile servers": hostile,
    "bad inputs": bad_inputs, "secrets at rest": secrets_at_rest, "caps": caps,
}


def attack(bench: Bench, families: list[str]) -> list[Outcome]:
    outcomes = []
    for family in families:
        for name, probe in FAMILIES[family](bench):
            try:
                why = probe()
            except Exception as exc:  # noqa: BLE001 (a probe that crashes is a defence that did not hold)
                why = f"{type(exc).__name__}: {str(exc)[:120]}"
            outcomes.append(Outcome(family, name, not why, why))
            print(f"  {'clean ' if not why else 'FAILED'} {family}: {name}{f' ({why})' if why else ''}", flush=True)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    """family, tried, clean, failed: one row per family in the order first tried, and a total."""
    families = list(dict.fromkeys(o.family for o in outcomes))
    width = max([len(f) for f in families] + [len("family")])
    lines = [f"{'family':<{width}}  {'tried':>5}  {'clean':>5}  {'failed':>6}"]
    for family in [*families, "total"]:
        mine = [o for o in outcomes if family in ("total", o.family)]
        clean = sum(o.clean for o in mine)
        lines.append(f"{family:<{width}}  {len(mine):>5}  {clean:>5}  {len(mine) - clean:>6}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a sample of the kill points (a few minutes in all)")
    parser.add_argument("--family", action="append", choices=list(FAMILIES), help="only these families")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="driftwatch-attack-") as tmp:
        bench = Bench(Path(tmp), args.quick)
        outcomes = attack(bench, args.family or list(FAMILIES))
    print()
    print(table(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

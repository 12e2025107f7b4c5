"""The bundled demo: feeds that parse, a gold set the corpus can answer, the demo build and the scenarios."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import feedparser
import pytest

from pipeline import contract, store
from pipeline.cli import EXIT_BAD_INPUT, EXIT_LOCKED, main
from pipeline.config import Config, RetrievalConfig
from pipeline.corpus import Corpus
from pipeline.demo import (FEEDS_DIR, FIRST_RUN_DAY, GOLD_FILE, N_DAYS, base_articles, build_demo,
                           daily_feeds, demo_date, pack_articles)
from pipeline.gold import load_gold
from pipeline.simulate import (SANDBOX_FILE, Scenario, SimulationError, compare, discard_sandbox, simulate,
                               source_config)

FEED_FILES = sorted(FEEDS_DIR.glob("*/*.xml"))


def test_committed_feeds_are_the_rendered_articles():
    rendered = daily_feeds(base_articles())
    assert sorted(FEEDS_DIR / rel for rel in rendered) == FEED_FILES
    assert all((FEEDS_DIR / rel).read_bytes() == data for rel, data in rendered.items())


@pytest.mark.parametrize("path", FEED_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_demo_feed_parses_cleanly_with_feedparser(path):
    parsed = feedparser.parse(io.BytesIO(path.read_bytes()))
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert parsed.version == "rss20" and parsed.entries
    for entry in parsed.entries:
        assert entry.id and entry.link and entry.published_parsed and entry.tags and entry.title


def test_demo_corpus_shape():
    articles = base_articles()
    assert len(articles) >= 360 and len({a.id for a in articles}) == len(articles)
    assert len({a.category for a in articles}) >= 5
    per_day = {d: sum(a.day == d for a in articles) for d in range(1, N_DAYS + 1)}
    assert min(per_day.values()) >= 12
    assert all(60 <= len(a.text.split()) <= 200 for a in articles)
    assert len(pack_articles("offtopic")) >= 60 and len(pack_articles("near-duplicates")) >= 40


def test_gold_set_is_answerable_from_the_first_run():
    gold = load_gold(GOLD_FILE)
    assert len(gold) == 50
    day_of = {a.id: a.day for a in base_articles()}
    for q in gold:
        assert 1 <= len(q.relevant_ids) <= 3
        assert all(d in day_of and day_of[d] <= FIRST_RUN_DAY for d in q.relevant_ids), q.id
    targets = {t for a in pack_articles("near-duplicates") for t in a.targets}
    assert targets <= {q.id for q in gold}


def tree_hash(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    base = Config(data_dir=Path(), gold=Path(), retrieval=RetrievalConfig(k=(1, 5, 10), candidate_depth=20))
    data_dir = tmp_path_factory.mktemp("demo") / "store"
    results = build_demo(base, data_dir, days=3)
    return data_dir, results


def test_short_demo_writes_the_series(demo_store):
    data_dir, results = demo_store
    runs = store.read_runs(data_dir)
    assert runs["run_date"].dt.date.tolist() == [demo_date(FIRST_RUN_DAY + i) for i in range(3)]
    assert (runs["status"] == "ok").all() and (runs["feeds_failed"] == 0).all()
    assert runs["docs_total"].iloc[0] == 12 * FIRST_RUN_DAY
    per_q = store.read_per_question(data_dir)
    assert (per_q["gold_missing"] == 0).all()
    assert set(per_q["question_id"]) == {q.id for q in load_gold(GOLD_FILE)}
    # day 1 of the history: no pipeline perfect, none useless
    for pipeline in ("bm25", "dense", "hybrid"):
        assert 0.3 < results[0].mean(pipeline, "recall", 5) < 1.0
    assert (data_dir / "demo.toml").exists()


def test_demo_waits_for_the_lock_before_deleting_anything(demo_store):
    """A run (a backfill) holding the directory's lock: the demo exits 3 and every file is as it was."""
    data_dir, _ = demo_store
    with store.run_lock(data_dir):
        before = tree_hash(data_dir)
        assert main(["demo", "--data-dir", str(data_dir), "--days", "1"]) == EXIT_LOCKED
        assert tree_hash(data_dir) == before
    assert (data_dir / contract.RUNS).exists() and len(store.read_runs(data_dir)) == 3


def test_simulations_leave_the_source_untouched_and_move_the_metrics(demo_store, tmp_path):
    data_dir, _ = demo_store
    before = tree_hash(data_dir)
    config = source_config(data_dir, None)  # the demo's own config, sources included, as the command line does
    day = demo_date(FIRST_RUN_DAY + 1)
    dup = simulate(config, Scenario("near-duplicates", day, n=40), data_dir, tmp_path / "dup")
    assert tree_hash(data_dir) == before
    table = compare(data_dir, dup.sandbox, "recall", 5)
    moved = table[table["run_date"].dt.date >= day]
    assert (moved["change"] < 0).any()  # near-duplicates push gold documents down
    assert (table[table["run_date"].dt.date < day]["change"] == 0).all()  # the past is the original's
    assert store.read_runs(dup.sandbox)["events"].fillna("").str.contains("injected 40 near-duplicates").any()
    # the source's reference setting is kept (rolling here: no pinned reference in either)
    assert (dup.sandbox / store.REFERENCE_FILE).exists() == (data_dir / store.REFERENCE_FILE).exists()

    gone = simulate(config, Scenario("delete", day, share=0.5, seed=1), data_dir, tmp_path / "del")
    assert tree_hash(data_dir) == before
    per_q = store.read_per_question(gone.sandbox)
    after = per_q[per_q["run_date"].dt.date >= day]
    assert after["gold_missing"].sum() > 0
    assert store.read_per_question(data_dir)["gold_missing"].sum() == 0

    with pytest.raises(SimulationError, match="outside the source"):
        simulate(config, Scenario("offtopic", day, n=5), data_dir, data_dir / "sandbox")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(SimulationError, match="not empty and not an earlier sandbox"):
        simulate(config, Scenario("offtopic", day, n=5), data_dir, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert not discard_sandbox(tmp_path / "mine") and (tmp_path / "mine" / "notes.txt").exists()
    assert discard_sandbox(dup.sandbox) and not dup.sandbox.exists()
    assert tree_hash(data_dir) == before


def test_simulate_builds_the_sandbox_aside_and_renames_it_when_complete(demo_store, tmp_path):
    """While the scenario runs, --out is untouched (absent, or the earlier sandbox): a kill leaves no half-made
    --out, and the hidden sibling it would leave is replaced by the next simulation."""
    data_dir, _ = demo_store
    config = source_config(data_dir, None)
    last = demo_date(FIRST_RUN_DAY + 2)
    out, partial = tmp_path / "sandbox", tmp_path / ".sandbox.partial"
    partial.mkdir()
    (partial / contract.RUNS).write_text("run_date\n2026-10")  # what a kill during the copy leaves
    seen = []

    def progress(result) -> None:
        seen.append((out.exists() and json.loads((out / SANDBOX_FILE).read_text())["scenario"]["n"],
                     (partial / SANDBOX_FILE).exists()))

    first = simulate(config, Scenario("offtopic", last, n=3), data_dir, out, progress=progress)
    second = simulate(config, Scenario("offtopic", last, n=4), data_dir, out, progress=progress)
    assert seen == [(False, True), (3, True)]  # during the runs: no --out, then the earlier sandbox untouched
    assert first.sandbox == second.sandbox == out.resolve() and not partial.exists()
    assert json.loads((out / SANDBOX_FILE).read_text())["scenario"]["n"] == 4
    assert store.read_runs(out)["events"].fillna("").str.contains("injected 4 offtopic").any()


@pytest.mark.parametrize("option, message", [
    (["--date", str(demo_date(FIRST_RUN_DAY + 3))],
     f"after the last run of .* \\({demo_date(FIRST_RUN_DAY + 2)}\\)"),
    (["--metric", "foo"], "--metric 'foo' is not in .*metrics.csv \\(valid: hit, mrr, ndcg, precision, recall, "
                          "unjudged\\)"),
], ids=["date-after-the-last-run", "unknown-metric"])
def test_simulate_refuses_a_date_after_the_history_or_an_unknown_metric(demo_store, tmp_path, capsys, option, message):
    data_dir, _ = demo_store
    out = tmp_path / "sandbox"
    assert main(["simulate", "--scenario", "offtopic", "--n", "3", "--data-dir", str(data_dir), "--out", str(out),
                 *option]) == EXIT_BAD_INPUT
    assert re.search(f"^error: .*{message}", capsys.readouterr().err, re.M)
    assert not out.exists() and not (tmp_path / ".sandbox.partial").exists()


PACK_RSS = """<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel><title>My feed</title><link>https://example.invalid/</link><description>d</description>
<item><guid>mine-1</guid><title>Harbour crane contract awarded</title><link>https://example.invalid/1</link>
<category>economy</category><description>The port authority awarded the crane contract to a local firm after a
long tender; the harbour budget covers the first two cranes.</description></item>
<item><guid>mine-2</guid><title>Rowing club wins the regatta</title><link>https://example.invalid/2</link>
<category>sports</category><description>The rowing club won the autumn regatta on the river.</description></item>
</channel></rss>
"""


def test_simulate_injects_the_users_own_feed_file_and_answers_with_the_rules(demo_store, tmp_path, capsys):
    data_dir, _ = demo_store
    before = tree_hash(data_dir)
    pack, out = tmp_path / "my-feed.xml", tmp_path / "sandbox"
    pack.write_text(PACK_RSS, encoding="utf-8")
    last = demo_date(FIRST_RUN_DAY + 2)
    assert main(["simulate", "--scenario", "inject", "--pack", str(pack), "--date", str(last),
                 "--data-dir", str(data_dir), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert tree_hash(data_dir) == before
    assert "simulation: injected the entries of my-feed.xml" in store.read_runs(out)["events"].iloc[-1]
    runs = store.read_runs(out)
    assert runs["docs_total"].iloc[-1] == store.read_runs(data_dir)["docs_total"].iloc[-1] + 2
    with Corpus.in_dir(out) as corpus:
        injected = {s.document.id: s.document.source for s in corpus.snapshot(last)
                    if s.document.id.startswith("sim-")}
    assert injected == {"sim-mine-1": "simulation:my-feed.xml", "sim-mine-2": "simulation:my-feed.xml"}
    # the results as dates, not timestamps, and the rules' answer
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["run_date", "pipeline"])
    assert lines[header + 1].split()[0] == str(last) and "00:00:00" not in printed
    assert "Would the alerts catch this?" in printed


@pytest.mark.parametrize("content, message", [
    (None, "--pack {path}: no such file"),
    ("not a feed at all\n", "{path}: not a valid feed"),
], ids=["missing", "not-a-feed"])
def test_simulate_with_a_bad_pack_file_names_it_and_writes_nothing(demo_store, tmp_path, capsys, content, message):
    data_dir, _ = demo_store
    pack, out = tmp_path / "pack.xml", tmp_path / "sandbox"
    if content is not None:
        pack.write_text(content, encoding="utf-8")
    assert main(["simulate", "--scenario", "inject", "--pack", str(pack), "--data-dir", str(data_dir),
                 "--out", str(out)]) == EXIT_BAD_INPUT
    assert f"error: {message.format(path=pack)}" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / ".sandbox.partial").exists()


# --- `documents`: the ids for a gold set ------------------------------------------------------------------------


def test_documents_lists_the_corpus_with_ids_for_a_gold_set(demo_store, capsys):
    data_dir, _ = demo_store
    last = demo_date(FIRST_RUN_DAY + 2)
    with Corpus.in_dir(data_dir, readonly=True) as corpus:
        present = {s.document.id: s.document for s in corpus.snapshot(last)}
        first_day = {s.document.id for s in corpus.snapshot(demo_date(FIRST_RUN_DAY))}
    assert main(["documents", "--data-dir", str(data_dir), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["id"] for r in rows} == set(present) and list(rows[0]) == ["title", "source", "date", "id"]
    assert [r["date"] for r in rows] == sorted((r["date"] for r in rows), reverse=True)  # newest first
    some = rows[0]
    assert some["title"] == present[some["id"]].title and some["source"] == present[some["id"]].source
    # --search: title or text, any case; --date: the corpus as it stood then
    word = present[some["id"]].title.split()[-1]
    assert main(["documents", "--data-dir", str(data_dir), "--json", "--search", word.upper()]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert some["id"] in {r["id"] for r in found}
    assert all(word.casefold() in (present[r["id"]].title + present[r["id"]].text).casefold() for r in found)
    assert main(["documents", "--data-dir", str(data_dir), "--json", "--date", str(demo_date(FIRST_RUN_DAY))]) == 0
    assert {json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()} == first_day
    assert main(["documents", "--data-dir", str(data_dir), "--search", some["id"] + "-no-such-text"]) == 0
    table = capsys.readouterr()
    assert table.out == "" and "0 document(s)" in table.err


@pytest.mark.parametrize("args, message", [
    (["--date", "2020-01-01"], "--date 2020-01-01 is before the first run of {data_dir} (2026-10-24)"),
    (["--data-dir", "{empty}"], "{empty}: no corpus yet"),
], ids=["before-history", "no-corpus"])
def test_documents_refuses_what_it_cannot_list(demo_store, tmp_path, capsys, args, message):
    data_dir, _ = demo_store
    given = [a.format(empty=tmp_path) for a in args]
    assert main(["documents", "--data-dir", str(data_dir), *given]) == EXIT_BAD_INPUT
    assert message.format(data_dir=data_dir, empty=tmp_path) in capsys.readouterr().err


def test_the_demo_names_the_readme_dashboard_command(demo_store, monkeypatch):
    from pipeline.cli import CHECKOUT_DASHBOARD, dashboard_hint
    from pipeline.paths import bundle_root

    data_dir, _ = demo_store
    monkeypatch.chdir(bundle_root())  # the quick start: the checkout's root, the directory read by default
    assert dashboard_hint(data_dir, True) == CHECKOUT_DASHBOARD
    assert dashboard_hint(data_dir, False) == f"python -m pipeline dashboard --data-dir {data_dir}"
    monkeypatch.chdir(data_dir)  # elsewhere, `streamlit run app.py` would find no app.py
    assert dashboard_hint(data_dir, True) == "python -m pipeline dashboard"

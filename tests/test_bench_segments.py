"""The segment bench's smoke test: a small null stream through the real segment rules, and its table."""

from __future__ import annotations

import json

from bench import segments as bench
from pipeline.config import AlertsConfig


def test_the_bench_replays_a_null_stream_and_prints_its_table(tmp_path, capsys):
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"id": f"g{i}", "question": f"question {i}", "relevant": [f"d{i}"],
                                        "tags": ["paraphrase"] if i < 9 else ["easy"]}) + "\n" for i in range(20)))
    members = bench.pep_members(gold, None)
    assert members["tag:paraphrase"] == tuple(f"q{i:03d}" for i in range(9))
    assert bench.tested_segments(members, 20, AlertsConfig()) == ["tag:easy", "tag:paraphrase"]
    rows = bench.run(members, 20, {"p": (0.8,), "seeds": (0,), "days": 25}, AlertsConfig())
    assert [(r["p"], r["seed"], r["days"]) for r in rows] == [(0.8, 0, 25)]
    assert bench.main(["--quick", "--gold", str(gold), "--articles", str(tmp_path / "none.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "tag:paraphrase (9)" in out and "| 0.8 | 0 | 60 |" in out and "per 90 days" in out
    assert bench.main(["--gold", str(tmp_path / "missing.jsonl")]) == 2


def test_a_real_directorys_series_replays_in_its_order_with_an_injected_decline(tmp_path, capsys):
    from bench._streams import StreamSpec, simulate_rows
    from pipeline import contract, segments, store
    from pipeline.config import Config

    _, questions = simulate_rows(StreamSpec(20, 0.8, days=24), Config(data_dir=tmp_path, gold=tmp_path))
    store.write_table(tmp_path, contract.PER_QUESTION, questions)
    last = max(r["run_date"] for r in questions)
    store.write_table(tmp_path, contract.SEGMENT_QUESTIONS, segments.member_rows(
        str(last), {"tag:a": tuple(f"q{i:03d}" for i in range(9)), "tag:b": tuple(f"q{i:03d}" for i in range(9, 20))}))
    history, members, days = bench.scored_history(tmp_path)
    assert len(days) == 24 and set(members) == {"tag:a", "tag:b"}
    start = days[12]
    hit = bench.injected(history, members["tag:a"], start, 0.5, seed=0)
    changed = hit[(hit[contract.RUN_DATE] >= start) & (hit["hit"] != history["hit"])]
    assert changed[contract.QUESTION_ID].nunique() <= 5 and set(changed[contract.QUESTION_ID]) <= set(members["tag:a"])
    assert (hit.loc[(hit[contract.RUN_DATE] < start), "hit"] == history.loc[history[contract.RUN_DATE] < start,
                                                                           "hit"]).all()
    assert bench.main(["--store", str(tmp_path), "--reference-runs", "10"]) == 0
    out = capsys.readouterr().out
    assert f"| {tmp_path.name} | 24 |" in out and "tag:a (9), 50% of it from" in out

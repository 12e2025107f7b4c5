"""bench/attack.py (issue 29, item 7): its table, and one family run for real."""

from __future__ import annotations

from bench.attack import FAMILIES, Bench, Outcome, attack, table


def test_the_table_counts_tried_clean_and_failed_per_family_in_the_order_tried():
    outcomes = [Outcome("kills", "a", True), Outcome("hand edits", "b", False, "went on"), Outcome("kills", "c", False)]
    assert table(outcomes).split("\n") == [
        "family      tried  clean  failed",
        "kills           2      1       1",
        "hand edits      1      0       1",
        "total           3      1       2",
    ]


def test_a_probe_that_crashes_is_failed_with_its_error_and_a_held_one_is_clean(tmp_path, monkeypatch):
    def family(bench):
        return [("holds", lambda: ""), ("crashes", lambda: 1 / 0), ("does not hold", lambda: "the run went on")]
    monkeypatch.setitem(FAMILIES, "toy", family)
    outcomes = attack(Bench(tmp_path, quick=True), ["toy"])
    assert [(o.probe, o.clean, o.why) for o in outcomes] == [
        ("holds", True, ""), ("crashes", False, "ZeroDivisionError: division by zero"),
        ("does not hold", False, "the run went on")]


def test_the_bad_toml_probe_runs_clean_without_a_model(tmp_path):
    (probe,) = [p for name, p in FAMILIES["bad inputs"](Bench(tmp_path, quick=True)) if name == "a config that is not TOML"]
    assert probe() == ""

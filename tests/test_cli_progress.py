"""The command line's progress on a non-interactive stderr (a cron log): one plain line per run, no bar."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace

from pipeline import cli


def test_progress_without_a_terminal_prints_one_line_per_run(capsys):
    runs = [SimpleNamespace(run_date=date(2026, 11, d), run={"docs_total": 10 + d}) for d in (2, 3)]
    with cli._progress(len(runs), "backfill") as progress:
        for result in runs:
            progress(result)
    err = capsys.readouterr().err
    assert "\r" not in err  # a tqdm bar would redraw itself with carriage returns
    assert err.splitlines() == ["backfill 1/2: 2026-11-02 docs=12", "backfill 2/2: 2026-11-03 docs=13"]

"""What the Evidently features cost on a demo history: Evidently's import (a fresh process), the report of one run's
drift window (its build time, its size, and its score against the run's evidently_model_auc), and the workspace
export per run (every run, then one date again: a replacement). Run: python -m bench.evidently --data-dir D
[--date YYYY-MM-DD] (a history from `python -m pipeline demo`; read, never written: the workspace goes to a
temporary folder)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from pipeline import evidently_report
from pipeline.config import EvidentlyExportConfig
from pipeline.demo import DRIFT_DAY, demo_date
from pipeline.exporters import History, export_evidently, import_quietly


def import_seconds(repeat: int) -> float:
    code = "import time; t = time.perf_counter(); import evidently; print(time.perf_counter() - t)"
    return statistics.median(float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                                  text=True, env={"DO_NOT_TRACK": "1", "PATH": ""}).stdout)
                             for _ in range(repeat))


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a demo history (read only)")
    parser.add_argument("--date", type=date.fromisoformat, default=demo_date(DRIFT_DAY), help="the report's run")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes timed for the import (median)")
    args = parser.parse_args()
    config = evidently_report.data_dir_config(args.data_dir)
    print(f"evidently import, fresh process (median of {args.repeat}): {import_seconds(args.repeat):.1f} s")
    import_quietly("evidently")  # imported once here: the figures below are the work, not the import
    t0 = time.perf_counter()
    report = evidently_report.render(config, args.date)
    seconds = time.perf_counter() - t0
    frames = evidently_report.window_frames(config, args.date)
    print(f"report of {args.date}: {seconds:.1f} s to build (import excluded), {len(report.html.encode()):,} bytes; "
          f"{len(frames.reference)} reference and {len(frames.current)} current chunks given to the classifier")
    print(f"  embedding drift score {report.embedding_score()!r}, drift.csv evidently_model_auc "
          f"{evidently_report.stored_score(config.data_dir, args.date)!r}")
    history = History.read(config.data_dir)
    days = history.dates()
    with tempfile.TemporaryDirectory() as tmp:
        section = EvidentlyExportConfig(workspace=Path(tmp) / "ws")
        t0 = time.perf_counter()
        export_evidently(section, history, days)
        whole = time.perf_counter() - t0
        t0 = time.perf_counter()
        export_evidently(section, history, days[-1:])
        again = time.perf_counter() - t0
        size = folder_bytes(section.workspace)
    print(f"workspace export of {len(days)} runs: {whole:.1f} s ({whole / len(days):.2f} s a run), "
          f"{size:,} bytes on disk ({size // len(days):,} a run); one date again (replaced): {again:.2f} s")


if __name__ == "__main__":
    main()

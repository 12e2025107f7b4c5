"""Issue 29, item 6: a simulation killed at any step of building its sandbox (inside any file copied, during the
corpus copy, during the re-runs, at either rename, while deleting the sandbox it replaced), then run again, equals
an uninterrupted one, file for file and row for row; --out holds the earlier sandbox whole or nothing meanwhile."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import contract, store
from pipeline.simulate import SANDBOX_FILE, SANDBOX_FILES, Scenario, SimulationError, simulate
from tests.test_run_journal import DAYS, ROOT, history, make_config

__all__ = ["history"]
VOLATILE = {"run_id", "started_at", "finished_at", "seconds", "labels_file"}
SCENARIO = Scenario("delete", DAYS[-1], share=0.5, seed=3)  # re-runs the last date only: a few seconds

# One process imports the package once and forks a child per kill point; each child simulates into its own --out
# (holding a copy of the uninterrupted sandbox: an earlier simulation) and dies (os._exit, as SIGKILL would) at
# step N: half way through its N-th file copy, else in the corpus copy, the re-run, or just before the rename.
DRIVER = """
import os, shutil, sqlite3, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from pipeline import simulate as sim
from tests.test_run_journal import make_config
from tests.test_simulate_kill import SCENARIO
source, out, reference = Path({source!r}), Path({out!r}), Path({reference!r})
copyfile, backup, run_day, discard = shutil.copyfile, sim.sqlite3.Connection.backup, sim.run_day, sim.discard_sandbox
for n in range({steps}):
    shutil.copytree(reference, out / str(n))
    pid = os.fork()
    if pid == 0:
        copies = []
        def dying_copy(src, dst):
            copies.append(src)
            if len(copies) == n + 1:  # half the file, then killed
                data = Path(src).read_bytes()
                Path(dst).write_bytes(data[:len(data) // 2])
                os._exit(9)
            return copyfile(src, dst)
        class Dying:  # the corpus copy, the re-run and the rename, after the files
            def __init__(self, conn):
                self.conn = conn
            def backup(self, target):
                os._exit(9)
            def __getattr__(self, name):
                return getattr(self.conn, name)
            def close(self):
                self.conn.close()
        # after the files: 0 in the corpus copy, 1 in the re-run, 2 and 3 at the first and second rename (the
        # earlier sandbox aside, the new one in), 4 half way through deleting the earlier sandbox
        later = n - {files}
        shutil.copyfile = dying_copy
        if later == 0:
            connect = sqlite3.connect
            sim.sqlite3 = type("S", (), {{"connect": staticmethod(lambda *a, **k: Dying(connect(*a, **k)))}})
        if later == 1:
            sim.run_day = lambda *a, **k: os._exit(9)
        if later in (2, 3):
            renames, rename = [], Path.rename
            def dying_rename(self, target):
                renames.append(self)
                if len(renames) == later - 1:
                    os._exit(9)
                return rename(self, target)
            Path.rename = dying_rename
        if later == 4:
            rmtree = shutil.rmtree
            def dying_rmtree(path, ignore_errors=False):
                if (Path(path) / "sandbox.json").exists() and not Path(path).name.endswith(".partial"):
                    victims = sorted(p for p in Path(path).iterdir() if p.is_file())
                    for p in victims[:len(victims) // 2]:
                        p.unlink()
                    os._exit(9)
                return rmtree(path, ignore_errors=ignore_errors)
            shutil.rmtree = dying_rmtree
        sim.simulate(make_config(source.parent), SCENARIO, source, out / str(n) / "sandbox")
        os._exit(0)
    print(n, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def csv_rows(folder: Path) -> dict[str, list[dict]]:
    out = {}
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as f:
            out[path.name] = [{k: v for k, v in r.items() if k not in VOLATILE} for r in csv.DictReader(f)]
    return out


def files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_a_simulation_killed_at_any_step_then_run_again_equals_an_uninterrupted_one(history, tmp_path, embedder):
    """Issue 29: killed while copying the history and run again, simulate left a sandbox missing earlier history
    (3 runs rows, 66 metrics, 775 per-question, 30 drift and 918 signal lines). Killed at every step here, the
    earlier sandbox at --out is untouched, and the next simulation builds the whole sandbox again."""
    root = tmp_path / "root"
    shutil.copytree(history, root)
    source = root / "store"
    reference = tmp_path / "reference"
    simulate(make_config(root), SCENARIO, source, reference / "sandbox")
    expected, listing = csv_rows(reference / "sandbox"), files(reference / "sandbox")
    original = csv_rows(source)
    assert sorted(expected) == sorted(original) and len(expected[contract.RUNS]) == len(DAYS)
    # The sandbox scores its maintained series with the source's qrels (its judgments and accepted questions copied):
    # no qrels version of its own, and the source's accepted question in every date's means.
    assert expected[contract.QRELS_VERSIONS] == original[contract.QRELS_VERSIONS]
    for name, found in original.items():  # the history before the start, whole
        assert [r for r in expected[name] if r["run_date"] < str(SCENARIO.start)] == [
            r for r in found if r["run_date"] < str(SCENARIO.start)], name
    copied = [name for name in SANDBOX_FILES if (source / name).exists()]
    steps = len(copied) + 5
    driver = DRIVER.format(root=str(ROOT), source=str(source), out=str(tmp_path / "killed"), reference=str(reference),
                           steps=steps, files=len(copied))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert dict(map(int, line.split()) for line in done.stdout.split("\n") if line) == {n: 9 for n in range(steps)}
    for n in range(steps):
        out = tmp_path / "killed" / str(n) / "sandbox"
        if out.exists():  # the earlier sandbox whole, or (killed between the renames) none: never a part of one
            assert csv_rows(out) == expected and files(out) == listing, f"killed at step {n}: a partial sandbox"
        simulate(make_config(root), SCENARIO, source, out)
        assert csv_rows(out) == expected, f"killed at step {n}, then run again"
        assert files(out) == listing and (out / SANDBOX_FILE).is_file()
        assert [p.name for p in out.parent.iterdir()] == ["sandbox"]  # no .partial, no .old left


def test_a_source_a_killed_run_left_unfinished_is_refused(history, tmp_path):
    """Its files hold the killed run's writes until its own next run rolls them back: a copy would keep them."""
    root = tmp_path / "root"
    shutil.copytree(history, root)
    store._begin_run(root / "store", str(DAYS[-1]))
    with pytest.raises(SimulationError, match="a run did not finish there"):
        simulate(make_config(root), SCENARIO, root / "store", tmp_path / "sandbox")
    assert not (tmp_path / "sandbox").exists()

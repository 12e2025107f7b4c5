"""The answer layer read back (the dashboard, the gate and the alert rules): the answers/DATE.jsonl files, and
from agreement.csv whether the judge's metrics and the heuristics may fire an alert or fail a gate."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import pandas as pd

from pipeline import contract, jsonl, store
from pipeline.answers.inputs import dated_file
from pipeline.answers.records import HEURISTIC, HEURISTIC_WATCHED, JUDGED_WATCHED


def records_path(data_dir: Path, day: date | str) -> Path:
    return Path(data_dir) / contract.ANSWERS_DIR / f"{day}.jsonl"


def write_records(data_dir: Path, day: str, objects: Sequence[dict]) -> None:
    """answers/DATE.jsonl, atomically, replacing the date's earlier file."""
    path = records_path(data_dir, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(o, ensure_ascii=False, allow_nan=False, default=_json_default) + "\n"
                   for o in objects).encode()
    store.atomic_write(path, lambda f: f.write(body))


def _json_default(value: object) -> object:
    raise TypeError(f"cannot write {value!r} to an answers file")


def read_records(data_dir: Path, day: date | str) -> list[dict]:
    """The full answer records of a run date (answers/DATE.jsonl), [] when the date has none."""
    path = records_path(data_dir, day)
    if not path.exists():
        return []
    try:
        return [jsonl.loads_bounded(line, f"{path}:{n}", store.StoreSchemaError)
                for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if line.strip()]
    except UnicodeDecodeError as exc:
        raise store.StoreSchemaError(f"{path}: not an answers file: {exc}") from None


def record_dates(data_dir: Path) -> list[str]:
    """The run dates with an answers file, oldest first."""
    folder = Path(data_dir) / contract.ANSWERS_DIR
    return sorted(p.stem for p in folder.glob("*.jsonl") if dated_file(p) is not None) if folder.is_dir() else []


def _latest_agreement(agreement_frame: pd.DataFrame, metric: str, judge_name: str) -> pd.Series | None:
    """The latest answer-level agreement row of `metric` by `judge_name` (None without labels)."""
    rows = agreement_frame[(agreement_frame["metric"] == metric) & (agreement_frame["judge"] == judge_name)
                           & (agreement_frame["level"] == "answer")]
    return None if rows.empty else rows.sort_values(contract.RUN_DATE, kind="stable").iloc[-1]


def trusted_metrics(agreement_frame: pd.DataFrame, judge_name: str) -> dict[str, tuple[bool, str]]:
    """Per judged metric (faithfulness, answer_relevance): whether the judge `judge_name` may fire an alert or
    fail a gate, and why: its latest answer-level kappa against the labels must reach min_kappa (`trusted`).
    Without labels the judge is not trusted: its verdicts were never checked against people."""
    out = {}
    for metric in JUDGED_WATCHED:
        latest = _latest_agreement(agreement_frame, metric, judge_name)
        if latest is None:
            out[metric] = (False, f"{metric} by {judge_name or 'the judge'} has no human labels to agree with: "
                                  "recorded, but it cannot fire an alert or fail a gate")
            continue
        ok = bool(latest["trusted"] == 1)
        day = pd.Timestamp(latest[contract.RUN_DATE]).strftime("%Y-%m-%d")
        out[metric] = (ok, f"{metric} by {judge_name}: kappa {float(latest['kappa']):.2f} against the labels of "
                           f"{day} is {'at least' if ok else 'below'} generation.min_kappa"
                           + ("" if ok else ": recorded, but it cannot fire an alert or fail a gate"))
    return out


def heuristic_trust(agreement_frame: pd.DataFrame) -> tuple[bool, str]:
    """Whether the heuristics' answer-level faithfulness verdict (which K-precision decides with the unsupported
    facts and invalid citations) passed its agreement gate on its latest labels, and why. A heuristic that fails
    it is a hint on the Answers page, never an alert condition; without labels it has failed nothing."""
    latest = _latest_agreement(agreement_frame, "faithfulness", HEURISTIC)
    if latest is None:
        return True, f"{HEURISTIC_WATCHED}: no human labels to check the heuristics against; watched by the rules"
    ok = bool(latest["trusted"] == 1)
    day = pd.Timestamp(latest[contract.RUN_DATE]).strftime("%Y-%m-%d")
    return ok, (f"{HEURISTIC_WATCHED} (the heuristics' faithfulness): kappa {float(latest['kappa']):.2f} against the "
                f"labels of {day} is {'at least' if ok else 'below'} generation.min_kappa"
                + ("" if ok else ": a hint on the Answers page, it cannot fire an alert"))


def alert_inputs(config) -> tuple:
    """(per_answer, trusted) for the alert rules: the stored per-answer series and, per judged metric, whether
    its judge's latest kappa reaches generation.min_kappa (for K-precision, the heuristics' own: `heuristic_trust`);
    (None, None) when the answer layer is off."""
    if config.generation.mode == "off":
        return None, None
    agreement_frame = store.read(config.data_dir, contract.AGREEMENT)
    trust = {**trusted_metrics(agreement_frame, config.generation.judge_name),
             HEURISTIC_WATCHED: heuristic_trust(agreement_frame)}
    return store.read(config.data_dir, contract.PER_ANSWER), {m: ok for m, (ok, _) in trust.items()}

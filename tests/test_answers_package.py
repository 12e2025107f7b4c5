"""The answer layer as a package (pipeline/answers/): each module imports only the ones below it (each is imported
alone in a fresh interpreter and what it loaded is read from sys.modules), the generic client loads nothing of
the answers, the old modules are gone, the callers' names still resolve from the package, and the client serves
a configuration section other than [generation] with a generic JSON reply."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

from bench._fake_llm import completion
from pipeline import answers
from pipeline.answers import client as endpoint
from pipeline.answers import inputs, judge, records, run, series, stored

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "pipeline.answers"


def loaded_by(module: str) -> set[str]:
    """The submodules of the package that importing `module` alone loads (itself included)."""
    code = (f"import json, sys; import {module}; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.'))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {m.removeprefix(PACKAGE + ".") for m in json.loads(done.stdout.strip().splitlines()[-1])}


@pytest.fixture(scope="module")
def loads() -> dict[str, set[str]]:
    return {name: loaded_by(f"{PACKAGE}.{name}") for name in answers.SUBMODULES}


def test_every_submodule_imports_alone_and_without_a_cycle(loads):
    for name, loaded in loads.items():
        assert name in loaded
        for other in loaded - {name}:
            assert name not in loads[other], f"{name} and {other} import each other"
    assert set(answers.SUBMODULES) == {p.stem for p in (ROOT / "pipeline" / "answers").glob("*.py")} - {"__init__"}


def test_the_layers_import_only_what_is_below_them(loads):
    assert loads["records"] == {"records"}
    assert loads["agreement"] == {"agreement"}
    assert loads["client"] == {"client"}  # the generic client knows nothing of the answers
    assert loads["judge"] == {"judge", "client", "records"}
    assert loads["series"] == {"series", "heuristics", "agreement", "records"}
    assert "client" not in loads["stored"] and "judge" not in loads["series"]
    assert loads["run"] == set(answers.SUBMODULES)


def test_importing_the_package_loads_no_submodule():
    assert loaded_by(PACKAGE) == set()


def test_the_old_modules_are_gone():
    for old in ("pipeline.judge", "pipeline.agreement"):
        assert importlib.util.find_spec(old) is None, old
    for path in ("pipeline/answers.py", "pipeline/judge.py", "pipeline/agreement.py"):
        assert not (ROOT / path).exists(), path


def test_the_callers_names_resolve_from_the_package():
    from pipeline.answers import AnswerRecord, Context, Judgement, Label, read_logged  # noqa: F401 (resolves)

    assert answers.run_answers is run.run_answers and answers.write_run is run.write_run
    assert answers.check_inputs is run.check_inputs and answers.summary is run.summary
    assert answers.AnswerRun is run.AnswerRun and answers.alert_inputs is stored.alert_inputs
    assert answers.LOGGED == records.LOGGED == "logged" and AnswerRecord is records.AnswerRecord
    assert answers.read_logged is inputs.read_logged and answers.read_labels is inputs.read_labels
    assert answers.score_records is series.score_records and answers.Scored is series.Scored
    assert answers.read_records is stored.read_records and answers.trusted_metrics is stored.trusted_metrics
    assert answers.undetermined(answers.REFUSAL) == "undetermined:refusal"
    assert answers.judge is judge and answers.client is endpoint  # the LLM side is reached as modules
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        answers.no_such_name  # noqa: B018
    assert {"run_answers", "AnswerRecord", "client", "judge"} <= set(dir(answers))


@dataclass(frozen=True)
class Section:
    """A configuration section other than [generation] (the judging loop's), as the client reads it."""

    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 64
    timeout: float = 5.0
    retries: int = 1
    concurrency: int = 1
    max_calls: int = 10
    max_tokens_per_run: int = 10_000


def test_the_client_serves_another_section_with_a_json_reply(httpserver: HTTPServer, tmp_path, monkeypatch):
    monkeypatch.delenv("DW_TEST_JUDGING_KEY", raising=False)
    with pytest.raises(endpoint.JudgeError, match=r"^judging\.api_key_env: the environment variable DW_TEST_"):
        endpoint.Client(Section(api_key_env="DW_TEST_JUDGING_KEY"), tmp_path, section="judging")
    replies = iter(["Sure: here it is", '```json\n{"grade": 2}\n```'])
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
        lambda request: Response(json.dumps(completion(next(replies))), content_type="application/json"))
    c = endpoint.Client(Section(base_url=httpserver.url_for("/v1")), tmp_path, backoff=0.01, section="judging")
    try:
        assert c.chat("grader", "Grade it.", "doc", endpoint.parse_json) == {"grade": 2}  # the prose asked again
        assert c.chat("grader", "Grade it.", "doc", endpoint.parse_json) == {"grade": 2}  # from the cache
        assert (c.budget.calls, c.cached) == (2, 1)
    finally:
        c.close()
    for bad in ("[1, 2]", "not json", ""):
        with pytest.raises(ValueError):
            endpoint.parse_json(bad)

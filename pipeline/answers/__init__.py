"""The answer layer: answer records (logged or generated) and their readers, the human labels, the offline
heuristics, the LLM judge, layer attribution, and the rows of generation.csv, per_answer.csv, agreement.csv
and answers/.

The modules, each importing only those before it (no cycle):
  records     the records, verdicts, labels and the constants they share
  inputs      the logged answers and the human labels, read and validated
  heuristics  the offline checks (K-precision, unsupported facts, citations, refusals, qa_cosine)
  agreement   Cohen's kappa and the agreement of a judge or a heuristic with the labels
  series      per_answer.csv, generation.csv and agreement.csv rows, the layer attribution
  stored      answers/DATE.jsonl and the trust read back from agreement.csv
  client      the generic OpenAI-compatible client (deadline, retries, budget, cache): knows nothing of answers
  judge       the answer-judging and generation prompts and parsers, on the client
  run         one run date: run_answers, write_run, check_inputs

The callers' names are re-exported here lazily (`answers.run_answers`, `from pipeline.answers import
AnswerRecord`): importing this package loads nothing, so `import pipeline.answers.client` does not load the
records, and the judging loop can reuse the client alone."""

from __future__ import annotations

import importlib
import types

# In this order a name is looked up; the client and the judge are reached as modules (answers.client, ...).
_EXPORTING = ("records", "inputs", "heuristics", "series", "stored", "run")
SUBMODULES = (*_EXPORTING[:3], "agreement", *_EXPORTING[3:5], "client", "judge", "run")
_MISSING = object()


def __getattr__(name: str) -> object:
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if not name.startswith("_"):
        for module_name in _EXPORTING:
            module = importlib.import_module(f"{__name__}.{module_name}")
            value = getattr(module, name, _MISSING)
            if value is not _MISSING and not isinstance(value, types.ModuleType):
                globals()[name] = value
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    names = set(globals()) | set(SUBMODULES)
    for module_name in _EXPORTING:
        module = importlib.import_module(f"{__name__}.{module_name}")
        names |= {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    return sorted(names)

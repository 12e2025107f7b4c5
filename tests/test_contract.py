"""The data directory's contract has one owner: `pipeline.contract` costs nothing to import, its named columns are
its files' columns, and no module reads a contract name through another module (store, alerts, drift, views...)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

from pipeline import contract

ROOT = Path(__file__).resolve().parents[1]
NAMES = {n for n in vars(contract) if n.isupper()}
SOURCES = sorted([*ROOT.glob("pipeline/**/*.py"), *ROOT.glob("pages/*.py"), *ROOT.glob("tests/*.py"),
                  *ROOT.glob("bench/*.py"), ROOT / "app.py"])


def test_the_contract_imports_nothing():
    """config and alerts import it at their own import: it must not pull numpy, pandas or anything else in."""
    tree = ast.parse((ROOT / "pipeline" / "contract.py").read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [ast.unparse(n) for n in imports] == ["from __future__ import annotations"]
    loaded = subprocess.run([sys.executable, "-c", "import sys, pipeline.contract; print(' '.join(sys.modules))"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert not {"numpy", "pandas", "scipy"} & set(loaded)


def test_every_named_column_is_a_column_of_a_file():
    columns = {c for schema in contract.SCHEMAS.values() for c in schema}
    named = {"RUN_DATE", "PIPELINE", "K", "METRIC", "VALUE", "QUESTION_ID", "FIRST_RANK", "RETRIEVED", "STATISTIC",
             "REFERENCE_DATE", "VERDICT", "RULE", "SEVERITY", "MESSAGE", "EVENTS", "DOCS_TOTAL", "SOURCE",
             "GOLD_IN_CONTEXT", "LAYER"}
    assert {getattr(contract, n) for n in named} <= columns
    assert contract.TEXT_COLUMNS <= columns and contract.INT_COLUMNS <= columns
    assert not contract.TEXT_COLUMNS & contract.INT_COLUMNS
    assert all(len(set(schema)) == len(schema) for schema in contract.SCHEMAS.values())


def test_the_drift_family_and_the_alert_values_are_distinct():
    statistics = [*contract.DRIFT_FAMILY, contract.EVIDENTLY_MODEL_AUC, contract.EVIDENTLY_DRIFTED,
                  contract.TOP1_COSINE]
    assert len(set(statistics)) == len(statistics)
    assert not any(s.startswith(contract.QUERY_PREFIX) for s in statistics)
    assert len(set(contract.RULES)) == len(contract.RULES)
    verdicts = {contract.DRIFTED, contract.STABLE, contract.NOT_ENOUGH_DATA, contract.CONTEXT}
    assert len(verdicts) == 4


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:  # a page or a bench script: not importable as a module, and nothing reads through it
        return None


def _reads_through_others(path: Path) -> list[str]:
    """`from pipeline.X import NAME` and `alias.NAME` where NAME is the contract's object held by another module
    (a descriptor of the same name, such as drift.PSI_MEAN, is that module's own)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: dict[str, str] = {}  # local name -> module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _module(full) is not None and full != "pipeline.contract":
                    modules[alias.asname or alias.name] = full
                elif node.module != "pipeline.contract" and alias.name in NAMES:
                    holder = _module(node.module)
                    if getattr(holder, alias.name, None) is getattr(contract, alias.name):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pipeline.") and alias.asname and alias.name != "pipeline.contract":
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr in NAMES):
            holder = _module(modules[node.value.id])
            if getattr(holder, node.attr, None) is getattr(contract, node.attr):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {modules[node.value.id]}.{node.attr}")
    return found


def test_contract_names_are_read_from_the_contract():
    assert [line for path in SOURCES for line in _reads_through_others(path)] == []

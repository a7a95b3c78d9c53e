"""The experiment catalog: complete and exact against the registering modules, and ``get(name)``
imports that one module only."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tdlab.config import ConfigError
from tdlab.experiments.base import _REGISTRY, get, registry
from tdlab.experiments.catalog import CATALOG

EXPERIMENTS = Path(__file__).resolve().parents[2] / "src" / "tdlab" / "experiments"


def _registering_modules() -> list[str]:
    """Every module of the seed packages with a class decorated ``@register`` (read from the source, so a
    module nobody imports is found too)."""
    out = []
    for path in sorted(EXPERIMENTS.glob("seed*/*.py")):
        tree = ast.parse(path.read_text())
        if any(
            isinstance(node, ast.ClassDef) and any(ast.unparse(d) == "register" for d in node.decorator_list)
            for node in ast.walk(tree)
        ):
            out.append("tdlab.experiments." + ".".join(path.relative_to(EXPERIMENTS).with_suffix("").parts))
    return out


def _entry_source(exp) -> str:
    """The catalog entry of ``exp`` as it should read (printed when the table drifted)."""
    return (
        f'    "{exp.name}": Entry(\n        "{type(exp).__module__}",\n        {json.dumps(exp.paper, ensure_ascii=False)},\n'
        f"        {json.dumps(exp.figure, ensure_ascii=False)},\n        {json.dumps(exp.description, ensure_ascii=False)}),"
    )


def test_every_registering_module_is_in_the_catalog_under_the_names_it_registers():
    modules = _registering_modules()
    assert len(modules) >= 31
    for module in modules:
        importlib.import_module(module)
    by_module: dict[str, set[str]] = {}
    for name, exp in _REGISTRY.items():
        if type(exp).__module__.startswith("tdlab.experiments."):  # not one a test defined
            by_module.setdefault(type(exp).__module__, set()).add(name)
    assert set(by_module) == set(modules)  # every @register class registered itself on import
    expected = {name: module for module, names in by_module.items() for name in names}
    missing = sorted(set(expected) - set(CATALOG))
    assert not missing, "add to tdlab/experiments/catalog.py:\n" + "\n".join(
        _entry_source(_REGISTRY[n]) for n in missing
    )
    assert sorted(set(CATALOG) - set(expected)) == []  # no entry without its experiment
    assert {name: e.module for name, e in CATALOG.items()} == expected


def test_catalog_metadata_equals_the_class_attributes():
    for name, exp in registry().items():
        entry = CATALOG[name]
        got = (entry.paper, entry.figure, entry.description, entry.profiles)
        want = (exp.paper, exp.figure, exp.description, tuple(exp.profiles))
        assert got == want, f"{name}: the catalog drifted; the entry should read:\n{_entry_source(exp)}"
        assert exp.name == name


def test_registry_holds_every_catalog_experiment():
    assert set(registry()) == set(CATALOG)


def test_get_refuses_an_unknown_name_listing_the_catalog():
    with pytest.raises(ConfigError, match=r"unknown experiment.*markov-init"):
        get("no-such-experiment")


def _fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (nothing imported yet); it prints one JSON object."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_get_imports_its_module_only_and_nothing_heavy_it_does_not_use():
    seen = _fresh(
        "import json, sys\n"
        "from tdlab.experiments.base import get\n"
        "exp = get('markov-init')\n"
        "from tdlab.experiments.catalog import CATALOG\n"
        "print(json.dumps({'experiments': sorted(n for n, e in CATALOG.items() if e.module in sys.modules),\n"
        "                  'modules': sorted(m for m in sys.modules if m.startswith(('matplotlib', 'torch._dynamo')))}))\n"
    )
    assert seen == {"experiments": ["markov-init"], "modules": []}


def test_the_catalog_and_the_seed_packages_import_no_experiment():
    seen = _fresh(
        "import json, sys\n"
        "import tdlab.experiments, tdlab.experiments.catalog\n"
        "import tdlab.experiments.seed000_local_to_global, tdlab.experiments.seed001_reasoning_bias\n"
        "import tdlab.experiments.seed002_cross_attention, tdlab.experiments.seed003_attention_markov\n"
        "import tdlab.experiments.seed004_topics\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('torch', 'tdlab.experiments.base')))))\n"
    )
    assert seen == []


def test_tdlab_list_imports_no_torch_pandas_or_pyarrow():
    """``tdlab list`` reads the catalog only: the run storage imports its heavy libraries where it uses them."""
    seen = _fresh(
        "import contextlib, io, json, sys\n"
        "from typer.testing import CliRunner\n"
        "from tdlab.cli import app\n"
        "res = CliRunner().invoke(app, ['list'])\n"
        "assert res.exit_code == 0 and 'markov-init' in res.output, res.output\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pandas', 'pyarrow', 'safetensors'))))\n"
    )
    assert seen == []

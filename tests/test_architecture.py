"""The house's structure, checked from the source: no import circle between tdlab's modules (lazy,
function-level imports count: a circle is broken by moving data, not by hiding an import), no import
from a low room (theory, tasks, models, probes and the modules they share) up into the rooms above,
and no verdict set anywhere but in the claims layer."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "tdlab"


def _module(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(src: Path = SRC) -> dict[str, Path]:
    return {_module(p, src): p for p in (src / "tdlab").rglob("*.py")}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    return skip


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _type_checking_nodes(tree)
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_modules():
    mods = _modules()
    known = set(mods)
    # a package's __init__ re-exporting its own modules is not a dependency of those modules
    graph = {
        m: {d for d in _imports(m, p, known) if not (p.name == "__init__.py" and d.startswith(m + "."))}
        for m, p in mods.items()
    }
    assert _cycles(graph) == []


def test_cycle_finder_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The low rooms of the house (README, Architecture) and the small top-level modules they share. The rooms
# above (train, claims, experiments, report, cli, the run store and index, sweeps, batches, the atlas)
# may use them; a low room gets what it needs from above passed in, or the piece moves down.
LOW_ROOMS = (
    "tdlab.theory",
    "tdlab.tasks",
    "tdlab.models",
    "tdlab.probes",
    "tdlab.config",
    "tdlab.seeding",
    "tdlab.safeio",
    "tdlab.progress",
    "tdlab.machine",
)


def _in_rooms(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in rooms)


def _upward_imports(src: Path) -> list[str]:
    """``"low -> high"`` for every import (lazy ones included) from a low room to a module outside them."""
    mods = _modules(src)
    known = set(mods)
    return sorted(
        f"{m} -> {d}"
        for m, p in mods.items()
        if _in_rooms(m, LOW_ROOMS)
        for d in _imports(m, p, known)
        if not _in_rooms(d, LOW_ROOMS)
    )


def test_low_rooms_import_nothing_from_the_rooms_above():
    assert _upward_imports(SRC) == []


def test_upward_import_finder_sees_a_lazy_import(tmp_path):
    for name, text in {
        "__init__.py": "",
        "train/__init__.py": "",
        "train/flow.py": "",
        "theory/__init__.py": "",
        "theory/landscape.py": "def run():\n    from tdlab.train.flow import gradient_flow\n",
        "theory/closed.py": "from tdlab.theory import landscape\n",
    }.items():
        f = tmp_path / "tdlab" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    assert _upward_imports(tmp_path) == ["tdlab.theory.landscape -> tdlab.train.flow"]


def test_no_verdict_is_set_outside_the_claims_layer():
    offenders = []
    for path in PKG.rglob("*.py"):
        if path.is_relative_to(PKG / "claims"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in ("verdict", "cause"):
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


def test_every_experiment_declares_its_claims_and_leaves_judging_to_the_framework():
    from tdlab.experiments.base import Experiment, registry

    for name, exp in registry().items():
        assert type(exp).analyse is Experiment.analyse, f"{name} overrides analyse"
        assert exp.claims, f"{name} declares no claims"
        assert type(exp).measure is not Experiment.measure, f"{name} has no measure()"
        assert any(s.kind == "paper" for s in exp.claims), f"{name} declares no paper claim"


def test_every_module_is_in_the_architecture_page():
    """docs/architecture.md is the map of the house: every module of src/tdlab is named there (by file or
    module name), so a new module cannot be added without saying where it lives and what it holds."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [
        str(f.relative_to(root / "src" / "tdlab"))
        for f in sorted((root / "src" / "tdlab").rglob("*.py"))
        if f.name != "__init__.py" and f.name not in page and f.stem not in page
    ]
    assert not missing, f"modules not named in docs/architecture.md: {missing}"

"""The house's structure, checked from the source: no import circle between tdlab's modules (lazy,
function-level imports count: a circle is broken by moving data, not by hiding an import), no import
from a low room (theory, tasks, models, probes and the modules they share) up into the rooms above, every
module on its floor (no import up a floor, none between rooms kept apart, none out of theory, the leaf),
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


# The floors of the house, lowest first. A module imports only from its own room, from rooms of lower
# floors, and from rooms of its own floor that are not kept apart below; never from a floor above. Every
# module of tdlab lies in one room (a new top-level module or package names its floor here).
FLOORS: tuple[tuple[str, ...], ...] = (
    # 0: numerics and the small modules every room shares (the package root holds the version)
    (
        "tdlab",
        "tdlab.theory",
        "tdlab.config",
        "tdlab.config_fields",
        "tdlab.seeding",
        "tdlab.safeio",
        "tdlab.progress",
        "tdlab.machine",
        "tdlab.cores",
    ),
    # 1: what is learned and what learns it
    ("tdlab.tasks", "tdlab.models"),
    # 2: fitting and reading models, for any task
    ("tdlab.train", "tdlab.probes"),
    # 3: verdicts, the run store, what --decide's rounds grow and keep, and the profiles' cost data (the quick
    # profiles' measured times and the standard profile sized from them; the rest of tdlab.costs reads the
    # experiments, floor 5)
    (
        "tdlab.claims",
        "tdlab.runs",
        "tdlab.run_context",
        "tdlab.run_view",
        "tdlab.index",
        "tdlab.records",
        "tdlab.report",
        "tdlab.cluster",
        "tdlab.rounds",
        "tdlab.costs.quick_times",
        "tdlab.costs.standard",
    ),
    # 4: where tasks, models, trainers, probes and theory meet
    ("tdlab.experiments",),
    # 5: what is done with experiments and their runs
    (
        "tdlab.runner",
        "tdlab.decide",
        "tdlab.results",
        "tdlab.reproduce",
        "tdlab.explain",
        "tdlab.export",
        "tdlab.sweep",
        "tdlab.costs",
        "tdlab.batch",
        "tdlab.atlas",
    ),
    # 6: the pages and the command
    ("tdlab.pages", "tdlab.cli"),
)

# Rooms that must not know each other, whatever their floors: tasks know nothing of models and models
# nothing of tasks; the trainer and the probes are siblings; train knows no paper's task (an objective or
# a task passes what is task-specific in).
APART: tuple[tuple[str, str], ...] = (
    ("tdlab.tasks", "tdlab.models"),
    ("tdlab.models", "tdlab.tasks"),
    ("tdlab.train", "tdlab.probes"),
    ("tdlab.probes", "tdlab.train"),
    ("tdlab.train", "tdlab.tasks"),
)

# Rooms that import nothing of tdlab outside themselves: theory is numerics, what it needs is passed in.
LEAVES = ("tdlab.theory",)


def _room(module: str, rooms: tuple[str, ...]) -> str | None:
    """The most specific room holding ``module`` (the package root ``tdlab`` holds only itself)."""
    held = [r for r in rooms if module == r or (r != "tdlab" and module.startswith(r + "."))]
    return max(held, key=len) if held else None


def _floor_violations(
    src: Path,
    floors: tuple[tuple[str, ...], ...] = FLOORS,
    apart: tuple[tuple[str, str], ...] = APART,
    leaves: tuple[str, ...] = LEAVES,
) -> list[str]:
    """One line for every import (lazy ones included, ``TYPE_CHECKING`` ones not) that breaks a rule:
    up a floor, between rooms kept apart, out of a leaf; and for every module in no room."""
    floor_of = {r: i for i, rooms in enumerate(floors) for r in rooms}
    rooms = tuple(floor_of)
    mods = _modules(src)
    known = set(mods)
    out = []
    for m, p in mods.items():
        a = _room(m, rooms)
        if a is None:
            out.append(f"{m}: in no floor")
            continue
        for d in _imports(m, p, known):
            b = _room(d, rooms)
            if b is None or b == a:
                continue
            if floor_of[b] > floor_of[a]:
                out.append(f"{m} -> {d}: floor {floor_of[a]} imports floor {floor_of[b]}")
            if (a, b) in apart:
                out.append(f"{m} -> {d}: {a} must not know {b}")
            if a in leaves:
                out.append(f"{m} -> {d}: {a} is a leaf")
    return sorted(out)


def test_every_module_keeps_to_its_floor():
    assert _floor_violations(SRC) == []


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"__init__.py": "", **files}.items():
        f = root / "tdlab" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root


def test_floor_finder_sees_an_import_up_a_floor(tmp_path):
    src = _plant(
        tmp_path,
        {
            "tasks/__init__.py": "",
            "tasks/chain.py": "def draw():\n    from tdlab.experiments.base import Experiment\n",
            "experiments/__init__.py": "",
            "experiments/base.py": "from tdlab.tasks.chain import draw\n",
        },
    )
    assert _floor_violations(src) == ["tdlab.tasks.chain -> tdlab.experiments.base: floor 1 imports floor 4"]


def test_floor_finder_sees_tasks_and_models_know_each_other(tmp_path):
    src = _plant(
        tmp_path,
        {
            "tasks/__init__.py": "",
            "tasks/chain.py": "from tdlab.models.gpt import GPT\n",
            "models/__init__.py": "",
            "models/gpt.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tdlab.tasks.chain import X\n",
        },
    )
    assert _floor_violations(src) == ["tdlab.tasks.chain -> tdlab.models.gpt: tdlab.tasks must not know tdlab.models"]


def test_floor_finder_sees_train_import_a_task_or_a_probe(tmp_path):
    src = _plant(
        tmp_path,
        {
            "tasks/__init__.py": "",
            "tasks/topics.py": "",
            "probes/__init__.py": "",
            "probes/spectrum.py": "",
            "train/__init__.py": "",
            "train/objectives.py": "from tdlab.tasks.topics import mask\nfrom tdlab.probes import spectrum\n",
        },
    )
    assert _floor_violations(src) == [
        "tdlab.train.objectives -> tdlab.probes.spectrum: tdlab.train must not know tdlab.probes",
        "tdlab.train.objectives -> tdlab.tasks.topics: tdlab.train must not know tdlab.tasks",
    ]


def test_floor_finder_sees_theory_leave_its_leaf(tmp_path):
    src = _plant(
        tmp_path,
        {
            "config.py": "",
            "theory/__init__.py": "",
            "theory/kgram.py": "",
            "theory/icl.py": "from tdlab.theory import kgram\nfrom tdlab import config\n",
        },
    )
    assert _floor_violations(src) == ["tdlab.theory.icl -> tdlab.config: tdlab.theory is a leaf"]


def test_floor_finder_sees_a_module_in_no_floor(tmp_path):
    src = _plant(tmp_path, {"helpers.py": "", "theory/__init__.py": ""})
    assert _floor_violations(src) == ["tdlab.helpers: in no floor"]


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


PAPERS = "tdlab.experiments.paper"


def _experiment_imports(src: Path) -> list[str]:
    """``"importer -> imported"`` for every import (lazy ones included) by a module of a seed package from
    another seed's package, or from a module of its own package outside its ``common`` (a module, or a package
    of modules named for what they hold). What a seed's experiments share sits there or lower, in theory/,
    probes/ or tasks/; the framework (base, manifest, view, ...) is outside the seed packages."""
    mods = _modules(src)
    known = set(mods)
    out = []
    for m, p in mods.items():
        if not m.startswith(PAPERS):
            continue
        own = ".".join(m.split(".")[:3])  # tdlab.experiments.paperNNN_name, the package's __init__
        for d in _imports(m, p, known):
            common = own + ".common"
            if d.startswith(PAPERS) and d != own and d != common and not d.startswith(common + "."):
                out.append(f"{m} -> {d}")
    return sorted(out)


def test_no_experiment_module_imports_another():
    assert _experiment_imports(SRC) == []


def test_experiment_import_finder_sees_a_sibling_and_another_seed(tmp_path):
    exp = "from tdlab.experiments.base import register\n\n@register\nclass E:\n    pass\n"
    for name, text in {
        "__init__.py": "",
        "experiments/__init__.py": "",
        "experiments/base.py": "def register(cls):\n    return cls\n",
        "experiments/paper001_a/__init__.py": "",
        "experiments/paper001_a/common.py": "X = 1\n",
        "experiments/paper001_a/helper.py": "Y = 2\n",
        "experiments/paper001_a/one.py": exp,
        "experiments/paper001_a/two.py": exp
        + "from tdlab.experiments.paper001_a.common import X\nfrom tdlab.experiments.paper001_a import one\n",
        "experiments/paper001_a/four.py": exp + "from .helper import Y\n",
        "experiments/paper002_b/__init__.py": "",
        "experiments/paper002_b/common/__init__.py": "",
        "experiments/paper002_b/common/shared.py": "def f():\n    from tdlab.experiments.paper001_a.common import X\n",
        "experiments/paper002_b/three.py": exp
        + "from . import common\nfrom .common.shared import f\nfrom .. import paper002_b\n",
    }.items():
        f = tmp_path / "tdlab" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    assert _experiment_imports(tmp_path) == [
        "tdlab.experiments.paper001_a.four -> tdlab.experiments.paper001_a.helper",
        "tdlab.experiments.paper001_a.two -> tdlab.experiments.paper001_a.one",
        "tdlab.experiments.paper002_b.common.shared -> tdlab.experiments.paper001_a.common",
    ]


THEORY = "tdlab.theory"


def _theory_imports(src: Path) -> list[str]:
    """``"theory module -> imported"`` for every import by a module of tdlab.theory (lazy and ``TYPE_CHECKING``
    ones included: a type hint is a dependency too) of anything of tdlab outside tdlab.theory. What a closed form
    reads of a task or a model it names in a ``typing.Protocol`` of its own, which the real objects satisfy."""
    mods = _modules(src)
    out = set()
    for m, p in mods.items():
        if not _in_rooms(m, (THEORY,)):
            continue
        package = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names]  # a module, or a name in module base
                names = [sub if sub in mods or base == "tdlab" else base for sub in subs]
            else:
                continue
            out |= {f"{m} -> {d}" for d in names if _in_rooms(d, ("tdlab",)) and not _in_rooms(d, (THEORY,))}
    return sorted(out)


def test_theory_imports_nothing_of_tdlab_outside_theory_not_even_for_type_hints():
    assert _theory_imports(SRC) == []


def test_theory_import_finder_sees_a_type_checking_import(tmp_path):
    src = _plant(
        tmp_path,
        {
            "config.py": "",
            "tasks/__init__.py": "",
            "tasks/anchors.py": "from tdlab.theory.laws import law\n",
            "models/__init__.py": "",
            "models/gpt.py": "",
            "theory/__init__.py": "from tdlab.theory import laws\n",
            "theory/laws.py": (
                "from typing import TYPE_CHECKING\nfrom . import flows\n"
                "if TYPE_CHECKING:\n    from tdlab.tasks.anchors import Anchors\n"
            ),
            "theory/flows.py": "def run():\n    from ..models import gpt\n    import tdlab.theory.laws\n",
            "theory/sizes.py": "from tdlab import config, theory\n",
        },
    )
    assert _theory_imports(src) == [
        "tdlab.theory.flows -> tdlab.models.gpt",
        "tdlab.theory.laws -> tdlab.tasks.anchors",
        "tdlab.theory.sizes -> tdlab.config",
    ]
    assert not any(v.startswith("tdlab.theory.laws ") for v in _floor_violations(src))  # the floors skip type hints

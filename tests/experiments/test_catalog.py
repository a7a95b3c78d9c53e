"""The experiment catalog: derived from the YAML declarations beside the modules, complete against the
registering classes, each declared class given its attributes from its declaration, a bad declaration refused
naming its file and field, and ``get(name)`` importing that one module only."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

from tdlab.claims import ClaimSpec, Sample, Stage
from tdlab.claims.declare import Calibration, Hypothesis, Threshold
from tdlab.config import ConfigError
from tdlab.experiments import base
from tdlab.experiments.axes import AtlasAxes, AtlasAxis
from tdlab.experiments.base import Experiment, get, register, registry
from tdlab.experiments.catalog import CATALOG
from tdlab.experiments.declared import Declaration, DeclarationError, claim_specs, declarations, read_file
from tdlab.experiments.manifest import Note, Reading

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "src" / "tdlab" / "experiments"


def _registering_classes() -> set[tuple[str, str]]:
    """``(module, class)`` of every class of the seed packages decorated ``@register`` (read from the source,
    so a module nobody imports is found too)."""
    out = set()
    for path in sorted(EXPERIMENTS.glob("paper*/*.py")):
        module = "tdlab.experiments." + ".".join(path.relative_to(EXPERIMENTS).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(d) == "register" for d in node.decorator_list):
                out.add((module, node.name))
    return out


def test_every_registering_class_is_declared_once_and_registers_under_its_declared_name():
    declared = {(d.module, d.cls): name for name, d in declarations().items()}
    assert len(declared) == len(declarations()) >= 32  # no class implements two declarations
    assert set(declared) == _registering_classes()
    experiments = registry()
    for (module, cls), name in declared.items():
        assert (type(experiments[name]).__module__, type(experiments[name]).__name__) == (module, cls)


def test_the_catalog_is_derived_from_the_declarations_in_their_order():
    decls = declarations()
    assert list(CATALOG) == list(decls)
    for name, entry in CATALOG.items():
        d = decls[name]
        assert (entry.module, entry.paper, entry.figure, entry.description) == (
            d.module,
            d.paper,
            d.figure,
            d.description,
        )
    for name, exp in registry().items():
        if name in CATALOG:
            assert CATALOG[name].profiles == tuple(exp.profiles) == ("quick", "standard", "paper")


def test_a_declared_class_has_its_declarations_attributes():
    for name, d in declarations().items():
        exp = get(name)
        assert (exp.name, exp.paper, exp.figure, exp.description) == (name, d.paper, d.figure, d.description)
        assert exp.arm_fields == d.arm_fields and exp.paper_differs == d.paper_differs
        assert {k: v for k, v in exp.profiles.items() if k != "standard"} == d.profiles
        assert {k: (s.value, s.where, s.note) for k, s in exp.manifest.items()} == {
            k: (s.value, s.where, s.note) for k, s in d.manifest.items()
        }


def test_a_shared_anchor_is_merged_in_order_and_the_experiments_own_entries_override_it(tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(
        "shared:\n  table: &table\n    a: {value: 1, where: T1}\n    b: {value: 2, where: T1}\n"
        "x-exp:\n  implementation: mod.Cls\n  paper: P\n  figure: F\n  description: D\n"
        "  profiles: {quick: {}, paper: {members: 5}}\n"
        "  manifest:\n    <<: *table\n    b: {value: 3, where: T2, note: n}\n    c: {value: [1, 2], where: T3}\n"
    )
    (decl,) = read_file(path, "pkg").values()
    assert (decl.name, decl.module, decl.cls) == ("x-exp", "pkg.mod", "Cls")
    assert [(k, s.value, s.where, s.note) for k, s in decl.manifest.items()] == [
        ("a", 1, "T1", ""),
        ("b", 3, "T2", "n"),
        ("c", [1, 2], "T3", ""),
    ]
    assert decl.profile_names() == ("quick", "standard", "paper")


GOOD = "x-exp:\n  implementation: mod.Cls\n  paper: P\n  figure: F\n  description: D\n  profiles: {quick: {}}\n"


def _declared(monkeypatch, **fields) -> type:
    """A fresh experiment class (markov-rank's config) whose declaration is ``x-exp`` with ``fields``."""
    decl = Declaration(
        name="x-exp", module=__name__, cls="X", paper="P", figure="F", description="D", profiles={"quick": {}}, **fields
    )
    monkeypatch.setattr(base, "declaration_of", lambda cls: decl)
    return type("X", (Experiment,), {"Config": registry()["markov-rank"].Config, "run": lambda self, cfg, ctx: None})


def test_declared_readings_build_the_readings_and_an_option_must_be_a_config_field(monkeypatch, tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(
        GOOD + "  readings:\n    - {where: Sec. 2, paper: no step size, chosen: 0.3 (ours), option: train.lr}\n"
        "    - {where: App. C, paper: either factor, chosen: the better of the two}\n"
    )
    (decl,) = read_file(path, "pkg").values()
    assert decl.attributes()["readings"] == (
        Reading("Sec. 2", "no step size", "0.3 (ours)", "train.lr"),
        Reading("App. C", "either factor", "the better of the two"),
    )

    for option, refused in (("train.lr", False), ("train.lr_typo", True)):
        Reads = _declared(monkeypatch, readings=[{"where": "Sec. 2", "paper": "s", "chosen": "c", "option": option}])

        if refused:
            with pytest.raises(TypeError, match=r"reading of Sec\. 2 names option 'train\.lr_typo', not a field of"):
                register(Reads)
        else:
            assert register(Reads).readings[0].option == "train.lr"
        base._REGISTRY.pop("x-exp", None)


def test_declared_notes_fill_config_fields_and_show_only_where_their_condition_holds(tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(
        GOOD + "  notes:\n    - Every row is ours; {{braces}} stay\n"
        "    - {text: 'SGD at lr {train.lr:g}, {train.steps} steps', when: {train.optimizer: sgd}}\n"
        "    - {text: 'the rank-one arm is rank one by construction', when: {arms: rank-one}}\n"
    )
    (decl,) = read_file(path, "pkg").values()
    notes = decl.attributes()["declared_notes"]
    assert notes[1] == Note("SGD at lr {train.lr:g}, {train.steps} steps", {"train.optimizer": "sgd"})
    assert notes[1].fields() == ["train.lr", "train.steps", "train.optimizer"]
    exp = registry()["markov-rank"]
    sgd = exp.make_config("quick", ["train.optimizer=sgd", "train.lr=0.25", "train.steps=7", "arms=[standard]"])
    adam = exp.make_config("quick", ["arms=[standard,rank-one]"])
    assert [n.render(sgd) for n in notes] == ["Every row is ours; {braces} stay", "SGD at lr 0.25, 7 steps", None]
    assert [n.render(adam) for n in notes] == [
        "Every row is ours; {braces} stay",
        None,
        "the rank-one arm is rank one by construction",
    ]


def test_a_note_with_an_unmatched_brace_or_an_unknown_field_is_refused(monkeypatch, tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(GOOD + "  notes:\n    - 'lr {train.lr'\n")
    with pytest.raises(DeclarationError, match=r"x-exp\.notes\.0"):
        read_file(path, "pkg")
    for text, when, unknown in (
        ("lr {train.lr_typo:g}", {}, "train.lr_typo"),
        ("x", {"train.optimiser": "sgd"}, "train.optimiser"),
    ):
        Says = _declared(monkeypatch, notes=[{"text": text, "when": when}])
        with pytest.raises(TypeError, match=rf"reads '{unknown}', not a field of"):
            register(Says)
        base._REGISTRY.pop("x-exp", None)


def test_a_declared_atlas_builds_the_atlas_axes_its_fields_say(tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(
        GOOD + "  atlas:\n    axes:\n      - {field: train.lr, values: [0.001, 0.01], quick: [0.01], label: lr}\n"
        "      - {field: depths, values: [1, 2], as_list: true}\n"
        "    set: {cells: []}\n    profile_set: {quick: {members: 2}}\n    why: the lr decides it\n"
    )
    (decl,) = read_file(path, "pkg").values()
    axes = decl.attributes()["atlas_axes"]
    assert axes == AtlasAxes(
        (AtlasAxis("train.lr", (0.001, 0.01), (0.01,), "lr"), AtlasAxis("depths", (1, 2), as_list=True)),
        {"cells": []},
        {"quick": {"members": 2}},
        "the lr decides it",
    )
    assert axes.grid("quick") == {"train.lr": [0.01], "depths": [[1], [2]]}
    assert decl.attributes()["atlas_axes"].set is not axes.set  # each class gets its own copy


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (GOOD.replace("  figure: F\n", ""), r"x-exp\.figure: Field required"),
        (GOOD + "  colour: red\n", r"x-exp\.colour: Extra inputs"),
        (GOOD + "  manifest: {steps: {value: 8, wher: T2}}\n", r"x-exp\.manifest\.steps\.where: Field required"),
        (GOOD + "  profiles: {quick: 3}\n", r"x-exp\.profiles\.quick: Input should be a valid dictionary"),
        (GOOD.replace("mod.Cls", "Cls"), r"x-exp\.implementation: give it as module\.Class"),
        (GOOD + "  atlas: {axes: [{field: lr, value: [1]}]}\n", r"x-exp\.atlas\.axes\.0\.values: Field required"),
        (GOOD + "  readings: [{where: Sec. 2, paper: s}]\n", r"x-exp\.readings\.0\.chosen: Field required"),
        (GOOD + "  atlas: {axes: []}\n", r"x-exp\.atlas: Value error, atlas axes: at least one axis"),
        (
            GOOD + "  atlas: {axes: [{field: lr, values: [1, 1]}]}\n",
            r"x-exp\.atlas\.axes\.0: Value error, atlas axis lr: values repeats",
        ),
        (
            GOOD + "  atlas: {axes: [{field: lr, values: [1]}], set: {lr: 2}}\n",
            r"x-exp\.atlas: Value error, atlas axes: \['lr'\] both swept and fixed",
        ),
        ("x-exp: [1, 2]\n", r"x-exp: holds list"),
        ("x-exp: {a: [\n", r"not a valid declaration file"),
    ],
)
def test_a_bad_declaration_is_one_error_naming_its_file_and_field(tmp_path, text, field):
    path = tmp_path / "experiments.yaml"
    path.write_text(text)
    with pytest.raises(DeclarationError, match=rf"^{re.escape(str(path))}: {field}") as err:
        read_file(path, "pkg")
    assert "\n" not in str(err.value)


def test_a_declared_class_that_sets_a_declared_attribute_itself_is_refused(monkeypatch):
    decl = Declaration(
        name="x-exp", module=__name__, cls="Twice", paper="P", figure="F", description="D", profiles={"quick": {}}
    )
    monkeypatch.setattr(base, "declaration_of", lambda cls: decl)

    class Twice(Experiment):  # type: ignore[type-arg]
        figure = "F"

        def run(self, cfg, ctx):  # pragma: no cover - never run
            pass

    with pytest.raises(TypeError, match="figure declared in YAML already"):
        register(Twice)
    assert "x-exp" not in base.registered()


def test_the_declarations_ship_in_the_wheel():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "paper*/experiments.yaml" in data["tdlab.experiments"]
    assert len(sorted(EXPERIMENTS.glob("paper*/experiments.yaml"))) == 5


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
        "import tdlab.experiments.paper000_local_to_global, tdlab.experiments.paper001_reasoning_bias\n"
        "import tdlab.experiments.paper002_cross_attention, tdlab.experiments.paper003_attention_markov\n"
        "import tdlab.experiments.paper004_topics\n"
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


def _claims_module() -> types.ModuleType:
    """A stand-in implementing module: the names its declared claims refer to with ``!py``."""
    mod = types.ModuleType("pkg.mod")
    mod.AT_LEAST_TWO = Hypothesis("at least two members", lambda cfg: cfg.members >= 2)
    mod.TRAINED = Stage("trained", "every member trained")
    mod.plant = lambda cfg, context: (Sample([0.0, 0.0]), Sample([1.0, 1.0]))
    mod.gap = lambda cfg, row: 0.5 * cfg.members
    mod.BUILT = (ClaimSpec("built-in-python", "S", test="value", relation="close", quantity="q"),)

    def template(id: str, statement: str, **declared: object) -> ClaimSpec:
        return ClaimSpec(id, statement, test="value", relation="le", quantity="from the template", **declared)

    mod.template = template
    return mod


CLAIMS_YAML = """x-exp:
  implementation: mod.Cls
  paper: P
  figure: F
  description: D
  profiles: {quick: {}}
  claims:
    - id: gap-closes
      statement: The gap closes (Fig. 1)
      quote: it closes
      where: Fig. 1
      hypotheses: [!py AT_LEAST_TWO, {text: 'a row of ours', test: !py gap, on: row}]
      threshold:
        source: ours
        note: tol 0.1
        calibration: {method: planted, note: gap 0 holds and gap 1 fails, plant: !py plant, test: tests/x.py}
      test: value
      relation: close
      quantity: the gap
      expected: !py gap
      tolerance: 0.1
      stage: !py TRAINED
    - call: !py template
      id: from-a-template
      statement: T
      threshold: {source: paper, note: the figure's direction}
    - !py BUILT
"""


def test_declared_claims_build_the_claim_specs_their_fields_say(tmp_path):
    path = tmp_path / "experiments.yaml"
    path.write_text(CLAIMS_YAML)
    (decl,) = read_file(path, "pkg").values()
    mod = _claims_module()
    gap, template, built = claim_specs(decl, mod)
    assert gap == ClaimSpec(
        "gap-closes",
        "The gap closes (Fig. 1)",
        quote="it closes",
        where="Fig. 1",
        hypotheses=(mod.AT_LEAST_TWO, Hypothesis("a row of ours", mod.gap, on="row")),
        threshold=Threshold(
            "ours", "tol 0.1", Calibration("planted", "gap 0 holds and gap 1 fails", mod.plant, "tests/x.py")
        ),
        test="value",
        relation="close",
        quantity="the gap",
        expected=mod.gap,
        tolerance=0.1,
        stage=mod.TRAINED,
    )
    assert template == mod.template("from-a-template", "T", threshold=Threshold("paper", "the figure's direction"))
    assert built is mod.BUILT[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("!py gap\n      tolerance", "!py gapp\n      tolerance"),
            r"claims\[0\] \(gap-closes\)\.expected: !py gapp: pkg\.mod has no name",
        ),
        (
            ("      tolerance: 0.1\n", "      tolerance: 0.1\n      colour: red\n"),
            r"claims\[0\] \(gap-closes\): .*colour",
        ),
        (("relation: close", "relation: gt"), r"claims\[0\] \(gap-closes\): gap-closes: a value test takes relation"),
        (("    - !py BUILT\n", "    - !py TRAINED\n"), r"claims\[2\]: builds Stage, not a ClaimSpec"),
        (("id: from-a-template", "id: gap-closes"), r"claims: ids declared twice: gap-closes"),
        (
            ("!py AT_LEAST_TWO", "!py common.nowhere.AT_LEAST_TWO"),
            r"claims\[0\] \(gap-closes\)\.hypotheses: !py common",
        ),
    ],
)
def test_a_bad_declared_claim_is_one_error_naming_its_file_claim_and_field(tmp_path, change, message):
    path = tmp_path / "experiments.yaml"
    path.write_text(CLAIMS_YAML.replace(*change))
    (decl,) = read_file(path, "pkg").values()
    with pytest.raises(DeclarationError, match=rf"^{re.escape(str(path))}: x-exp\.{message}") as err:
        claim_specs(decl, _claims_module())
    assert "\n" not in str(err.value)


def test_every_experiment_of_the_seeds_takes_its_atlas_from_its_declaration():
    for name, d in declarations().items():
        assert d.atlas is not None, name
        assert get(name).atlas_axes == d.atlas, name
        # and says how it reads its seed, each option a field of its config (register refuses another)
        assert d.readings and get(name).readings == d.readings, name
    for exp in registry().values():
        for base_cls in type(exp).__mro__[1:]:
            assert "atlas_axes" not in vars(base_cls) or base_cls is Experiment, (type(exp).__name__, base_cls.__name__)


def test_every_experiment_of_the_seeds_takes_its_claims_from_its_declaration():
    for name, d in declarations().items():
        exp = get(name)
        declared = claim_specs(d, sys.modules[type(exp).__module__])
        assert [(c.id, c.statement, c.quote) for c in exp.claims] == [(c.id, c.statement, c.quote) for c in declared]
        assert declared, name
    # and no class of theirs sets claims itself: neither the registered class (read from its source: register sets
    # the attribute) nor a class it inherits from
    for path in sorted(EXPERIMENTS.glob("paper*/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(d) == "register" for d in node.decorator_list):
                assigned = [ast.unparse(t) for s in node.body if isinstance(s, ast.Assign) for t in s.targets]
                annotated = [ast.unparse(s.target) for s in node.body if isinstance(s, ast.AnnAssign)]
                assert "claims" not in assigned + annotated, f"{path.name}: {node.name}"
    for exp in registry().values():
        for base_cls in type(exp).__mro__[1:]:
            assert "claims" not in vars(base_cls) or base_cls is Experiment, (type(exp).__name__, base_cls.__name__)


def test_every_declared_note_renders_at_every_profile_of_its_experiment():
    """A placeholder whose format spec does not fit its field's value (``{model.checkpoint:g}``) fails only when a
    run writes its notes: every declared note is rendered here at every profile's config."""
    rendered = 0
    for name, exp in registry().items():
        for profile in exp.profiles:
            cfg = exp.make_config(profile)
            for note in exp.declared_notes:
                text = note.render(cfg)
                assert text is None or text.strip(), (name, profile, note.text)
                rendered += text is not None
    assert rendered > 0

"""Fuzz ``tdlab run markov-init --set ...`` with inputs that are bad by construction.

Every field of the experiment's config is read from its pydantic model (type, bounds, allowed
literals), and for each a value is drawn that the field must refuse: the wrong type (a YAML boolean
for an integer, a string for a number, a fraction for an integer), a non-finite float, a value
beyond a bound, a literal outside the allowed set. Besides: unknown and nested keys, keys the
experiment sets per arm, malformed items and YAML oddities (anchors and aliases, tags that build
Python objects or bytes or dates, unparseable text, deep nesting, huge strings, control characters).
Each input must be refused as the README promises (see conftest.check_refused); training is
replaced by a failure (``fz.no_training``), so an input wrongly accepted fails fast.
"""

from __future__ import annotations

import json
import math
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tdlab.experiments.seed000_local_to_global.initialisation import MarkovInit

EXP = MarkovInit()
VALID = ["task.p=0.3", "train.steps=7", "model.d=4", "claims.tol_nats=0.02"]  # mixed in: refusal must still name the bad key


@dataclass
class Leaf:
    """One config field: its dotted key, the kinds of value it takes, its bounds and literals."""

    key: str
    kinds: set[str] = field(default_factory=set)  # int, float, bool, str, none, list
    literals: set[Any] = field(default_factory=set)
    lo: float = -math.inf  # smallest allowed value (inclusive or not: see lo_open)
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False


def _describe(leaf: Leaf, ann: Any, meta: list[Any]) -> None:
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        _describe(leaf, args[0], [*meta, *args[1:]])
        return
    if origin in (Union, types.UnionType):
        for a in args:
            _describe(leaf, a, meta)
        return
    if origin is Literal:
        leaf.kinds.add("literal")
        leaf.literals.update(args)
        return
    if origin is list:
        leaf.kinds.add("list")
        return
    if ann is type(None):
        leaf.kinds.add("none")
        return
    leaf.kinds.add({int: "int", float: "float", bool: "bool", str: "str"}.get(ann, "other"))
    for m in meta:
        for cons in getattr(m, "metadata", [m]):
            if isinstance(cons, at.Ge):
                leaf.lo = cons.ge
            elif isinstance(cons, at.Gt):
                leaf.lo, leaf.lo_open = cons.gt, True
            elif isinstance(cons, at.Le):
                leaf.hi = cons.le
            elif isinstance(cons, at.Lt):
                leaf.hi, leaf.hi_open = cons.lt, True


def leaves(model: type[BaseModel], prefix: str = "") -> list[Leaf]:
    """Every field of ``model`` (nested configs walked), described from its annotation and metadata."""
    out = []
    for name, f in model.model_fields.items():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            out.extend(leaves(f.annotation, f"{prefix}{name}."))
            continue
        leaf = Leaf(f"{prefix}{name}")
        _describe(leaf, f.annotation, list(f.metadata))
        out.append(leaf)
    return out


LEAVES = [leaf for leaf in leaves(EXP.Config) if leaf.key not in EXP.arm_fields]
SECTIONS = sorted({leaf.key.split(".")[0] for leaf in LEAVES if "." in leaf.key})
KNOWN = {leaf.key for leaf in leaves(EXP.Config)} | set(SECTIONS)


def yaml_text(value: Any) -> str:
    """A YAML flow text that parses back to ``value`` (JSON is YAML; floats written YAML's way)."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value)


def _beyond(leaf: Leaf) -> st.SearchStrategy[Any]:
    """Numbers just beyond the field's bounds (integers for integer fields)."""
    opts = []
    integer = "float" not in leaf.kinds
    if math.isfinite(leaf.lo):
        edge = leaf.lo if leaf.lo_open else (leaf.lo - 1 if integer else leaf.lo - 1e-9 * max(1, abs(leaf.lo)))
        opts.append(st.integers(-10**6, int(math.floor(edge))) if integer else
                    st.floats(-1e9, edge, allow_nan=False, exclude_max=not leaf.lo_open))
    if math.isfinite(leaf.hi):
        edge = leaf.hi if leaf.hi_open else (leaf.hi + 1 if integer else leaf.hi + 1e-9 * max(1, abs(leaf.hi)))
        opts.append(st.integers(int(math.ceil(edge)), int(edge) + 10**12) if integer else
                    st.floats(edge, 1e12, allow_nan=False, exclude_min=not leaf.hi_open))
    return st.one_of(opts) if opts else st.nothing()


_JUNK_WORDS = st.from_regex(r"\A[a-z][a-z0-9_-]{0,12}\Z").filter(
    lambda w: w not in {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf"})


def bad_values(leaf: Leaf) -> st.SearchStrategy[str]:
    """YAML texts that ``leaf`` must refuse."""
    k = leaf.kinds
    numeric = k & {"int", "float"}
    opts: list[st.SearchStrategy[Any]] = [
        st.sampled_from([{"a": 1}, {"nested": {"x": [1]}}]),  # a mapping where a value is expected
        st.sampled_from([math.nan, math.inf, -math.inf]),  # never allowed
    ]
    if "bool" not in k:
        opts.append(st.booleans())
    if "none" not in k:
        opts.append(st.none())
    if "list" not in k:
        opts.append(st.lists(st.integers(), min_size=1, max_size=3))
    else:  # a list of things that are not the allowed literals
        opts.append(st.lists(st.one_of(st.integers(), _JUNK_WORDS.filter(lambda w: w not in leaf.literals)), min_size=1, max_size=3))
    if not numeric and "list" not in k:
        opts.append(st.integers(-5, 5))
    if "float" not in k and "list" not in k:
        opts.append(st.floats(-1e6, 1e6).filter(lambda x: x != int(x)))
    if numeric:
        opts.append(_beyond(leaf))
        if "literal" not in k:
            opts.append(_JUNK_WORDS)
    if "literal" in k and "str" not in k:
        opts.append(_JUNK_WORDS.filter(lambda w: w not in leaf.literals))
    if "str" not in k:
        opts.append(st.text(min_size=1, max_size=30).filter(lambda s: s not in leaf.literals))
        opts.append(st.just("x" * 100_000))  # a huge string
    return st.one_of(opts).map(yaml_text)


@st.composite
def bad_field_value(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """One known field set to a value it must refuse, among valid overrides."""
    leaf = draw(st.sampled_from(LEAVES))
    item = f"{leaf.key}={draw(bad_values(leaf))}"
    others = draw(st.lists(st.sampled_from([v for v in VALID if not v.startswith(leaf.key + "=")]), max_size=2, unique=True))
    items = draw(st.permutations([item, *others]))
    return items, [leaf.key]


_SEGMENT = st.text(st.characters(categories=["L", "N", "P", "S"], exclude_characters="=.[]"), min_size=1, max_size=16)


@st.composite
def unknown_key(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """A key that is not a field: new at the top, inside a section, or below a leaf."""
    where = draw(st.sampled_from(["top", "section", "below-leaf"]))
    seg = draw(_SEGMENT.filter(lambda s: s.strip() == s and s not in KNOWN and all(s != k.split(".")[-1] for k in KNOWN)))
    if where == "top":
        key, name = seg, seg
    elif where == "section":
        key = f"{draw(st.sampled_from(SECTIONS))}.{seg}"
        name = key
    else:  # a.b.c where a.b is a value: the value is not a mapping
        leaf = draw(st.sampled_from([lf for lf in LEAVES if "." in lf.key]))
        key, name = f"{leaf.key}.{seg}", leaf.key
    return [f"{key}={draw(st.sampled_from(['1', '0.5', 'x', '[1]']))}"], [name]


ALIAS_AND_TAGS = [
    "&a [*a, *a]", "[&x 1, *x]", "{a: &b [1, 2], c: *b}", "&anchor 5",
    "!!python/object/apply:os.system ['true']", "!!python/name:os.system", "!!python/tuple [1, 2]",
    "!!binary aGVsbG8=", "!!set {a, b}", "!!timestamp 2001-12-14", "2001-12-14", "!!omap [a: 1, b: 2]",
    "!!str 5", "!!float nan", "!!int 1.5", "!custom 3", "!!float abc", "!!timestamp x", "!!bool maybe", "!!binary ###",
    "!!float 1e999", "!!map [1]", "!!seq {a: 1}",
]
UNPARSEABLE = ["[a, b", "{a: 1", '"unterminated', "a: b: c", "[1]]", "'x", "{[", "- a\n- b: c\n  d", "@x", "%TAG"]


def _laughs(levels: int) -> str:
    """A few hundred bytes that expand to 10**levels elements through nested aliases."""
    parts = ["&l0 [x, x, x, x, x, x, x, x, x, x]"]
    parts += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


@st.composite
def yaml_oddity(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """A known field set to YAML that must be refused whatever the field takes."""
    leaf = draw(st.sampled_from(LEAVES))
    text = draw(st.one_of(
        st.sampled_from(ALIAS_AND_TAGS + UNPARSEABLE),
        st.integers(2, 6).map(_laughs),
        st.integers(20, 200).map(lambda n: "[" * n + "1" + "]" * n),  # deep nesting
        st.text(st.characters(categories=["Cc"], exclude_characters="\n\r\t"), min_size=1, max_size=5)
          .map(lambda c: f"a{c}b"),  # control characters
    ))
    return [f"{leaf.key}={text}"], [leaf.key]


@st.composite
def malformed(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Items that are not KEY=VALUE with a dotted key."""
    kind = draw(st.sampled_from(["no-equals", "empty-segment"]))
    if kind == "no-equals":
        item = draw(st.text(st.characters(categories=["L", "N", "P"], exclude_characters="="), min_size=1, max_size=20))
    else:
        item = draw(st.sampled_from(["=1", ".p=1", "p.=1", "task..p=1", "a...b=2", " =3"]))
    return [item], ["--set"]


ARM_FIELDS = st.sampled_from(sorted(EXP.arm_fields)).map(lambda k: ([f"{k}=gpt2"], [k]))


def _run(fz, tmp: Path, items: list[str]):  # noqa: ANN001
    out = tmp / "runs"
    before = fz.digest(out)
    args = ["run", "markov-init", "--quiet", "--out", str(out)]
    for it in items:
        args += ["--set", it]
    return fz.invoke(args), out, before


def _case(category: str, fz, tmp_path_factory, case) -> None:  # noqa: ANN001
    items, names = case
    tmp = tmp_path_factory.mktemp("fuzz-set", numbered=True)
    with fz.no_training():
        result, out, before = _run(fz, tmp, items)
    fz.refused(category, result, names, before, out)
    assert not out.exists(), "a refused run created --out"


@given(case=bad_field_value())
def test_bad_field_values_are_refused(fz, tmp_path_factory, case):
    _case("--set wrong type/range", fz, tmp_path_factory, case)


@given(case=unknown_key())
def test_unknown_and_nested_keys_are_refused(fz, tmp_path_factory, case):
    _case("--set unknown/nested key", fz, tmp_path_factory, case)


@given(case=yaml_oddity())
def test_yaml_oddities_are_refused(fz, tmp_path_factory, case):
    _case("--set YAML oddity", fz, tmp_path_factory, case)


@given(case=st.one_of(malformed(), ARM_FIELDS))
def test_malformed_items_and_per_arm_keys_are_refused(fz, tmp_path_factory, case):
    _case("--set malformed/per-arm", fz, tmp_path_factory, case)


def test_the_generator_knows_the_config():
    """The fuzz reads the config's fields: if it found none (or no bounds), it would test nothing."""
    keys = {leaf.key: leaf for leaf in LEAVES}
    assert {"train.steps", "task.p", "model.init_e", "train.chunk", "archs"} <= set(keys)
    assert keys["train.steps"].kinds == {"int"} and keys["train.steps"].lo == 1
    assert keys["task.p"].lo == 0.0 and keys["task.p"].lo_open and keys["task.p"].hi_open
    assert keys["train.chunk"].kinds == {"int", "literal"} and keys["train.chunk"].literals == {"auto"}

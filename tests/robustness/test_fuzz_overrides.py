"""Fuzz ``tdlab run EXPERIMENT --set ...`` for every registered experiment with inputs that are bad
by construction.

Every field of each experiment's config is read from its pydantic model (type, bounds, allowed
literals, a list's item kinds: :func:`tdlab.config_fields.config_fields`), and for each a value is
drawn that the field must refuse: the wrong type (a YAML boolean for an integer, a string for a
number, a fraction for an integer), a non-finite float, a value beyond a bound, a literal outside the
allowed set, a list with an item of the wrong kind. Besides: unknown and nested keys, keys the
experiment sets per arm, malformed items and YAML oddities (anchors and aliases, tags that build
Python objects or bytes or dates, unparseable text, deep nesting, huge strings, control characters).
Each input must be refused as the README promises (see conftest.check_refused); training is
replaced by a failure (``fz.no_training``), so an input wrongly accepted fails fast.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tdlab.config_fields import ConfigField, config_fields
from tdlab.experiments.base import registry

EXPS = dict(sorted(registry().items()))
# Fields a value is drawn for: not the per-arm ones (refused for another reason, see ARM_FIELDS) and
# not those of a type the generator does not describe (an optional sub-config, a list of configs).
LEAVES = {
    name: [
        f
        for f in config_fields(e.Config)
        if f.key not in e.arm_fields and "other" not in f.kinds and "other" not in f.item_kinds
    ]
    for name, e in EXPS.items()
}
SECTIONS = {name: sorted({f.key.split(".")[0] for f in leaves if "." in f.key}) for name, leaves in LEAVES.items()}
KNOWN = {name: {f.key for f in config_fields(e.Config)} | set(SECTIONS[name]) for name, e in EXPS.items()}
VALID = ["seed=7", "members=1"]  # mixed in: refusal must still name the bad key (every experiment has both)


def yaml_text(value: Any) -> str:
    """A YAML flow text that parses back to ``value`` (JSON is YAML; floats written YAML's way)."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value)


def _beyond(leaf: ConfigField) -> st.SearchStrategy[Any]:
    """Numbers just beyond the field's bounds (integers for integer fields)."""
    opts = []
    integer = "float" not in leaf.kinds
    if math.isfinite(leaf.lo):
        edge = leaf.lo if leaf.lo_open else (leaf.lo - 1 if integer else leaf.lo - 1e-9 * max(1, abs(leaf.lo)))
        opts.append(
            st.integers(-(10**6), math.floor(edge))
            if integer
            else st.floats(-1e9, edge, allow_nan=False, exclude_max=not leaf.lo_open)
        )
    if math.isfinite(leaf.hi):
        edge = leaf.hi if leaf.hi_open else (leaf.hi + 1 if integer else leaf.hi + 1e-9 * max(1, abs(leaf.hi)))
        opts.append(
            st.integers(math.ceil(edge), int(edge) + 10**12)
            if integer
            else st.floats(edge, 1e12, allow_nan=False, exclude_min=not leaf.hi_open)
        )
    return st.one_of(opts) if opts else st.nothing()


_JUNK_WORDS = st.from_regex(r"\A[a-z][a-z0-9_-]{0,12}\Z").filter(
    lambda w: w not in {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf"}
)


def bad_values(leaf: ConfigField) -> st.SearchStrategy[str]:
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
    else:  # a list holding an item of a kind its items may not be
        opts.append(st.lists(_bad_item(leaf), min_size=1, max_size=3))
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


def _bad_item(leaf: ConfigField) -> st.SearchStrategy[Any]:
    """One list item that ``leaf``'s items must refuse (a mapping is never an allowed item)."""
    k = leaf.item_kinds
    opts: list[st.SearchStrategy[Any]] = [st.just({"a": 1})]
    if "str" not in k:
        opts.append(_JUNK_WORDS.filter(lambda w: w not in leaf.literals))
    if "float" not in k and "str" not in k:
        opts.append(st.just(1.5))
    if "bool" not in k and "str" not in k:
        opts.append(st.booleans())
    return st.one_of(opts)


experiment_names = st.sampled_from(sorted(EXPS))


@st.composite
def bad_field_value(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """One known field of one experiment set to a value it must refuse, among valid overrides."""
    name = draw(experiment_names)
    leaf = draw(st.sampled_from(LEAVES[name]))
    item = f"{leaf.key}={draw(bad_values(leaf))}"
    others = draw(
        st.lists(st.sampled_from([v for v in VALID if not v.startswith(leaf.key + "=")]), max_size=2, unique=True)
    )
    items = draw(st.permutations([item, *others]))
    return name, items, [leaf.key]


_SEGMENT = st.text(st.characters(categories=["L", "N", "P", "S"], exclude_characters="=.[]"), min_size=1, max_size=16)


@st.composite
def unknown_key(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """A key that is not a field: new at the top, inside a section, or below a leaf."""
    name = draw(experiment_names)
    known = KNOWN[name]
    where = draw(st.sampled_from(["top", "section", "below-leaf"] if SECTIONS[name] else ["top"]))
    seg = draw(
        _SEGMENT.filter(lambda s: s.strip() == s and s not in known and all(s != k.split(".")[-1] for k in known))
    )
    if where == "top":
        key, named = seg, seg
    elif where == "section":
        key = f"{draw(st.sampled_from(SECTIONS[name]))}.{seg}"
        named = key
    else:  # a.b.c where a.b is a value: the value is not a mapping
        leaf = draw(st.sampled_from([lf for lf in LEAVES[name] if "." in lf.key]))
        key, named = f"{leaf.key}.{seg}", leaf.key
    return name, [f"{key}={draw(st.sampled_from(['1', '0.5', 'x', '[1]']))}"], [named]


ALIAS_AND_TAGS = [
    "&a [*a, *a]",
    "[&x 1, *x]",
    "{a: &b [1, 2], c: *b}",
    "&anchor 5",
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system",
    "!!python/tuple [1, 2]",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!timestamp 2001-12-14",
    "2001-12-14",
    "!!omap [a: 1, b: 2]",
    "!!str 5",
    "!!float nan",
    "!!int 1.5",
    "!custom 3",
    "!!float abc",
    "!!timestamp x",
    "!!bool maybe",
    "!!binary ###",
    "!!float 1e999",
    "!!map [1]",
    "!!seq {a: 1}",
]
UNPARSEABLE = ["[a, b", "{a: 1", '"unterminated', "a: b: c", "[1]]", "'x", "{[", "- a\n- b: c\n  d", "@x", "%TAG"]


def _laughs(levels: int) -> str:
    """A few hundred bytes that expand to 10**levels elements through nested aliases."""
    parts = ["&l0 [x, x, x, x, x, x, x, x, x, x]"]
    parts += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


@st.composite
def yaml_oddity(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """A known field set to YAML that must be refused whatever the field takes."""
    name = draw(experiment_names)
    leaf = draw(st.sampled_from(LEAVES[name]))
    text = draw(
        st.one_of(
            st.sampled_from(ALIAS_AND_TAGS + UNPARSEABLE),
            st.integers(2, 6).map(_laughs),
            st.integers(20, 200).map(lambda n: "[" * n + "1" + "]" * n),  # deep nesting
            st.text(st.characters(categories=["Cc"], exclude_characters="\n\r\t"), min_size=1, max_size=5).map(
                lambda c: f"a{c}b"
            ),  # control characters
        )
    )
    return name, [f"{leaf.key}={text}"], [leaf.key]


@st.composite
def malformed(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """Items that are not KEY=VALUE with a dotted key."""
    kind = draw(st.sampled_from(["no-equals", "empty-segment"]))
    if kind == "no-equals":
        item = draw(st.text(st.characters(categories=["L", "N", "P"], exclude_characters="="), min_size=1, max_size=20))
    else:
        item = draw(st.sampled_from(["=1", ".p=1", "p.=1", "task..p=1", "a...b=2", " =3"]))
    return draw(experiment_names), [item], ["--set"]


# Every experiment's per-arm keys (set by the experiment itself): refused whatever the value.
ARM_FIELDS = st.sampled_from(sorted((n, k) for n, e in EXPS.items() for k in e.arm_fields)).map(
    lambda nk: (nk[0], [f"{nk[1]}=1"], [nk[1]])
)


def _case(category: str, fz, tmp_path_factory, case) -> None:
    name, items, names = case
    out = tmp_path_factory.mktemp("fuzz-set", numbered=True) / "runs"
    args = ["run", name, "--quiet", "--out", str(out)]
    for it in items:
        args += ["--set", it]
    with fz.no_training():
        result = fz.invoke(args)
    fz.refused(category, result, names, {}, out, key=(name, *items))
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


def test_the_generator_knows_every_config():
    """The fuzz reads every experiment's fields: if it found none (or no bounds), it would test nothing."""
    assert len(EXPS) >= 20 and all(LEAVES[n] for n in EXPS)
    keys = {leaf.key: leaf for leaf in LEAVES["markov-init"]}
    assert {"train.steps", "task.p", "model.init_e", "train.chunk", "archs"} <= set(keys)
    assert keys["train.steps"].kinds == {"int"} and keys["train.steps"].lo == 1
    assert keys["task.p"].lo == 0.0 and keys["task.p"].lo_open and keys["task.p"].hi_open
    assert keys["train.chunk"].kinds == {"int", "literal"} and keys["train.chunk"].literals == {"auto"}
    assert keys["archs"].kinds == {"list"} and keys["archs"].item_kinds == {"literal"}
    described = sum(len(v) for v in LEAVES.values())
    total = sum(len(config_fields(e.Config)) for e in EXPS.values())
    assert described >= 0.95 * total, (described, total)  # only a few fields of types it cannot draw for


def test_every_experiment_is_valid_with_the_mixed_in_overrides():
    """The valid overrides mixed into the examples are valid for every experiment on their own."""
    for exp in EXPS.values():
        exp.make_config("quick", VALID)

"""Typed configs: --set parsing, validation errors naming the field, profile layering."""

from __future__ import annotations

import json
from typing import Annotated

import pytest
import yaml
from pydantic import Field

from tdlab.config import (
    Config,
    ConfigError,
    Distinct,
    apply_overrides,
    build_config,
    deep_merge,
    parse_overrides,
    to_yaml,
    validate_config,
)
from tdlab.experiments.paper000_local_to_global.initialisation import MarkovInit, MarkovInitConfig


class Inner(Config):
    rate: float = Field(0.5, gt=0.0, lt=1.0)
    n: int = Field(3, ge=1)


class Outer(Config):
    name: str = "x"
    tags: list[str] = ["a"]
    inner: Inner = Inner()


# --- parse_overrides -----------------------------------------------------------------------------


def test_parse_overrides_builds_nested_dicts_with_yaml_values():
    got = parse_overrides(
        [
            "task.p=0.7",
            "train.steps=20",
            "archs=[sec2, gpt2]",
            "model.out_proj=false",
            "name=hello world",
            "train.grad_clip=null",
            "a.b.c=1.5e+3",
            "empty=",
        ]
    )
    assert got == {
        "task": {"p": 0.7},
        "train": {"steps": 20, "grad_clip": None},
        "archs": ["sec2", "gpt2"],
        "model": {"out_proj": False},
        "name": "hello world",
        "a": {"b": {"c": 1500.0}},
        "empty": "",
    }
    assert isinstance(got["train"]["steps"], int) and isinstance(got["task"]["p"], float)


def test_parse_overrides_value_may_contain_equals_signs():
    assert parse_overrides(["note=a=b"]) == {"note": "a=b"}


@pytest.mark.parametrize("bad", ["task.p", "task..p=1", ".p=1", "p.=1", "=1"])
def test_parse_overrides_rejects_malformed_items(bad):
    with pytest.raises(ConfigError, match="--set"):
        parse_overrides([bad])


def test_parse_overrides_rejects_value_and_section_on_the_same_key():
    with pytest.raises(ConfigError, match="'a'"):
        parse_overrides(["a=1", "a.b=2"])


def test_parse_overrides_rejects_unparseable_yaml():
    with pytest.raises(ConfigError, match="cannot parse"):
        parse_overrides(["tags=[a, b"])


# --- validation ----------------------------------------------------------------------------------


def test_build_config_layers_later_wins_and_validates():
    cfg = build_config(Outer, {"inner": {"rate": 0.2, "n": 5}}, {"inner": {"rate": 0.3}}, {"tags": ["b", "c"]})
    assert cfg.inner.rate == 0.3 and cfg.inner.n == 5 and cfg.tags == ["b", "c"] and cfg.name == "x"


@pytest.mark.parametrize(
    "items, field, words",
    [
        (["inner.rate=1.5"], "inner.rate", "less than 1"),
        (["inner.rate=0"], "inner.rate", "greater than 0"),
        (["inner.n=abc"], "inner.n", "integer"),
        (["inner.n=2.5"], "inner.n", "integer"),
        (["tags=5"], "tags", "list"),
        (["inner=7"], "inner", "dictionary"),
    ],
)
def test_bad_values_raise_config_error_naming_the_field(items, field, words):
    with pytest.raises(ConfigError) as info:
        apply_overrides(Outer(), items)
    msg = str(info.value)
    assert msg.startswith(f"{field}:"), msg
    assert words in msg


def test_unknown_field_is_named_and_known_fields_listed():
    with pytest.raises(ConfigError) as info:
        apply_overrides(Outer(), ["inner.rat=0.2"])
    msg = str(info.value)
    assert "inner.rat: unknown field" in msg
    assert "Known fields: name, tags, inner.rate, inner.n" in msg


def test_all_errors_are_reported_at_once():
    with pytest.raises(ConfigError) as info:
        apply_overrides(Outer(), ["inner.rate=2", "inner.n=0"])
    assert "inner.rate" in str(info.value) and "inner.n" in str(info.value)


def test_config_forbids_unknown_fields_and_validates_assignment():
    cfg = Outer()
    with pytest.raises(ValueError):
        cfg.inner.n = 0
    with pytest.raises(ValueError):
        Outer(bogus=1)


def test_apply_overrides_returns_new_config_and_keeps_the_original():
    base = Outer()
    new = apply_overrides(base, ["inner.n=9", "name=y"])
    assert (new.inner.n, new.name) == (9, "y")
    assert (base.inner.n, base.name) == (3, "x")


def test_deep_merge_is_recursive_and_does_not_mutate_inputs():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 4}
    upd = {"a": {"c": [3]}, "e": {"f": 5}}
    out = deep_merge(base, upd)
    assert out == {"a": {"b": 1, "c": [3]}, "d": 4, "e": {"f": 5}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 4} and upd == {"a": {"c": [3]}, "e": {"f": 5}}
    out["a"]["c"].append(9)
    assert upd["a"]["c"] == [3]


def test_to_yaml_round_trips():
    cfg = apply_overrides(Outer(), ["inner.rate=0.25", "tags=[p, q]"])
    assert Outer.model_validate(yaml.safe_load(to_yaml(cfg))) == cfg


# --- experiment profiles -------------------------------------------------------------------------


def test_quick_profile_overrides_defaults_and_keeps_the_rest():
    exp = MarkovInit()
    default = MarkovInitConfig()
    quick = exp.make_config("quick")
    prof = MarkovInit.profiles["quick"]
    assert quick.members == prof["members"]
    for k, v in prof["train"].items():
        assert getattr(quick.train, k) == v
    # Fields the profile does not name keep their defaults (deep merge, not replacement).
    assert quick.train.lr == default.train.lr and quick.train.batch == default.train.batch
    assert quick.task == default.task and quick.model == default.model
    paper = exp.make_config("paper")
    assert paper.train.steps == MarkovInit.profiles["paper"]["train"]["steps"]
    assert paper.train.seq_len == MarkovInit.profiles["paper"]["train"]["seq_len"]


def test_overrides_win_over_profile_and_seeds_flags_set_members_and_seed():
    exp = MarkovInit()
    cfg = exp.make_config("quick", ["train.steps=20", "task.p=0.3"], members=2, seed=9)
    assert cfg.train.steps == 20 and cfg.task.p == 0.3
    assert cfg.train.seq_len == MarkovInit.profiles["quick"]["train"]["seq_len"]
    assert cfg.members == 2 and cfg.seed == 9


def test_unknown_profile_and_bad_override_raise_config_error():
    exp = MarkovInit()
    with pytest.raises(ConfigError, match=r"profile.*allowed: quick, standard, paper"):
        exp.make_config("fast")
    with pytest.raises(ConfigError, match=r"^task\.p:"):
        exp.make_config("quick", ["task.p=1.5"])
    with pytest.raises(ConfigError, match=r"archs\.1"):
        exp.make_config("quick", ["archs=[sec2, lstm]"])
    with pytest.raises(ConfigError, match=r"^inits: list each value once"):
        exp.make_config("quick", ["inits=[standard, standard]"])
    with pytest.raises(ConfigError, match="members"):
        exp.make_config("quick", members=0)


# --- hardening: strict types, finite floats, YAML oddities, one-line capped messages ----


def _laughs(levels: int) -> str:
    """A few hundred bytes of YAML that expand tenfold per level through nested aliases."""
    parts = ["&l0 [x, x, x, x, x, x, x, x, x, x]"]
    parts += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


@pytest.mark.parametrize("raw", ["&a [*a, *a]", "[&x 1, *x]", "&anchor 5", _laughs(6)])
def test_yaml_anchors_and_aliases_are_refused_in_one_short_line(raw):
    with pytest.raises(ConfigError, match="anchors and aliases") as err:
        parse_overrides([f"tags={raw}"])
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize(
    "raw", ["[a, b", "{a: 1", "a: b: c", "- a\n- b: c\n  d", "!!python/object/apply:os.system ['true']"]
)
def test_yaml_errors_are_one_line(raw):
    with pytest.raises(ConfigError, match="tags") as err:
        parse_overrides([f"tags={raw}"])
    assert "\n" not in str(err.value)


def test_deep_nesting_is_refused():
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_overrides(["tags=" + "[" * 40 + "1" + "]" * 40])


def test_exponent_floats_are_numbers():
    """YAML 1.1 reads ``1e-3`` as a string; --set reads it as the number everybody means."""
    assert parse_overrides(["a=1e-3", "b=-2E+2", "c=1e3x"]) == {"a": 0.001, "b": -200.0, "c": "1e3x"}


@pytest.mark.parametrize(
    "items, field",
    [
        (["inner.n=true"], "inner.n"),  # a YAML boolean is not an integer
        (["inner.n=on"], "inner.n"),
        (['inner.n="5"'], "inner.n"),  # a string is not a number
        (["inner.n=2.0"], "inner.n"),  # a float is not an integer
        (["inner.rate=true"], "inner.rate"),
        (['inner.rate="0.5"'], "inner.rate"),
        (["inner.rate=.nan"], "inner.rate"),  # floats are finite
        (["inner.rate=.inf"], "inner.rate"),
        (["name=5"], "name"),  # a number is not a string
        (["tags=[1]"], "tags.0"),
    ],
)
def test_types_are_strict_and_floats_finite(items, field):
    with pytest.raises(ConfigError) as err:
        build_config(Outer, parse_overrides(items))
    assert str(err.value).startswith(f"{field}: ")


class Pair(Config):
    x: float = 0.0
    span: tuple[float, float] = (0.0, 1.0)
    spans: list[tuple[int, int]] = []


def test_an_integer_is_a_float():
    cfg = build_config(Pair, parse_overrides(["x=1"]))
    assert cfg.x == 1.0 and isinstance(cfg.x, float)


def test_lists_are_accepted_for_tuples_as_configs_reread_from_yaml_have_them():
    cfg = build_config(Pair, {"span": [0.5, 2], "spans": [[1, 2], [3, 4]]})
    assert cfg.span == (0.5, 2.0) and cfg.spans == [(1, 2), (3, 4)]
    assert build_config(Pair, yaml.safe_load(to_yaml(cfg))) == cfg
    with pytest.raises(ConfigError, match="span"):
        build_config(Pair, {"span": [1, 2, 3]})
    with pytest.raises(ConfigError, match=r"spans\.0"):
        build_config(Pair, {"spans": [[1, True]]})


def test_echoed_values_are_capped_and_errors_are_counted():
    with pytest.raises(ConfigError) as err:
        build_config(Outer, {"inner": {"n": "x" * 100_000}})
    msg = str(err.value)
    assert msg.startswith("inner.n: ") and len(msg) < 300 and "..." in msg
    with pytest.raises(ConfigError) as err:
        build_config(Outer, {"tags": list(range(50))})
    assert "and 47 more field(s)" in str(err.value) and len(str(err.value)) < 500


def test_union_errors_name_the_field_once():
    from tdlab.train.trainer import TrainConfig

    with pytest.raises(ConfigError) as err:
        build_config(TrainConfig, {"chunk": 0})
    assert str(err.value) == "chunk: Input should be greater than 0, or Input should be 'auto' (got 0)"


@pytest.mark.parametrize("chunk", [0, -1, True, "all"])
def test_train_chunk_must_be_positive_or_auto(chunk):
    """chunk=0 divided by zero and chunk=-1 trained nothing, both after the run directory existed."""
    with pytest.raises(ConfigError, match=r"^train\.chunk: "):
        MarkovInit().make_config("quick", [f"train.chunk={json.dumps(chunk)}"])


def test_updated_copies_are_validated():
    """``model_copy(update=...)`` validates nothing; per-arm configs go through ``Config.updated``."""
    from tdlab.models.gpt import GPTConfig

    m = GPTConfig(arch="gpt2", vocab=3)
    assert m.updated({"d": 4}).d == 4 and m.d == 8
    with pytest.raises(ConfigError, match="vocab must be 2"):
        m.updated({"arch": "sec2"})
    with pytest.raises(ConfigError, match="max_len"):
        m.updated({"max_len": 0})


# --- per-arm keys and memory --------------------------------------------------------------------------


@pytest.mark.parametrize("item", ["model.arch=gpt2", "model.init=standard", "model={arch: gpt2}", "model.max_len=64"])
def test_keys_the_experiment_sets_per_arm_are_refused(item):
    with pytest.raises(ConfigError, match=r"sets it per arm.*use (archs=|inits=|train\.seq_len)"):
        MarkovInit().make_config("quick", [item])


def test_the_sec2_arm_cannot_get_a_vocabulary_it_does_not_support():
    """Issue 12: --set model.arch=gpt2 --set model.vocab=3 ran the sec2 arm with vocab 3."""
    with pytest.raises(ConfigError, match="vocab must be 2"):
        MarkovInit().make_config("quick", ["model.vocab=3"])


def test_every_arm_field_is_a_config_field():
    from tdlab.config import _known_fields
    from tdlab.experiments.base import registry

    for name, exp in registry().items():
        known = set(_known_fields(exp.Config))
        assert set(exp.arm_fields) <= known, name


def test_every_profile_validates_round_trips_and_fits_in_memory(monkeypatch):
    import tdlab.train.memory as memory
    from tdlab.experiments.base import registry
    from tdlab.train.memory import GB, check_memory, estimate

    # quick profiles are for small CPU machines: they fit 4 GB. Paper profiles are for the machine the
    # paper used (a GPU advised for seed 001's GPT-2 small: anchors-text needs ~23 GB): they fit 40 GB,
    # half of one lent H100, and are built here as on such a machine. Standard profiles are for the laptop too.
    limit = {"quick": 4 * GB, "standard": 4 * GB, "paper": 40 * GB}
    for name, exp in registry().items():
        for profile in exp.profiles:
            monkeypatch.setattr(memory, "machine_bytes", lambda p=profile: limit[p])
            cfg = exp.make_config(profile)  # checks memory against "this machine"
            assert exp.Config.model_validate(yaml.safe_load(to_yaml(cfg))) == cfg, (name, profile)
            assert estimate(cfg).bytes < limit[profile], (name, profile)
            check_memory(cfg, available=limit[profile])
    assert limit["quick"] < estimate(registry()["anchors-text"].make_config("paper")).bytes  # the exception is real


def test_a_configuration_that_cannot_fit_is_refused_naming_the_fields():
    with pytest.raises(ConfigError) as err:
        MarkovInit().make_config("quick", ["train.batch=1000000", "train.seq_len=65536"])
    msg = str(err.value)
    assert "train.batch" in msg and "train.seq_len" in msg and "GB" in msg and "\n" not in msg


def test_memory_estimate_grows_with_every_size_it_names():
    from tdlab.train.memory import check_memory, estimate

    exp = MarkovInit()
    base = estimate(exp.make_config("quick")).bytes
    for item in ["train.batch=64", "train.seq_len=512", "model.d=64", "model.layers=4", "members=6"]:
        assert estimate(exp.make_config("quick", [item])).bytes > base, item
    with pytest.raises(ConfigError, match="needs ~"):
        check_memory(exp.make_config("quick"), available=base / 2)


def test_a_nested_override_changes_one_field_of_the_experiments_default_model():
    """``--set model.d_a=7`` keeps the rest of the experiment's default model (topics-wv's one-hot model),
    instead of replacing it with the nested class's own defaults (onehot=False)."""
    from tdlab.experiments.paper004_topics.wv import TopicsWV

    cfg = TopicsWV().make_config("quick", ["model.d_a=7"])
    assert cfg.model.onehot is True and cfg.model.d_a == 7
    assert TopicsWV().make_config("quick").model.onehot is True


def test_a_validators_message_is_shown_without_pydantics_value_error_prefix():
    from pydantic import model_validator

    class Inner(Config):
        a: int = 1

        @model_validator(mode="after")
        def _check(self):
            if self.a > 1:
                raise ValueError("inner.a must be 1 here")
            return self

    class Outer(Config):
        inner: Inner = Inner()

    with pytest.raises(ConfigError) as err:
        build_config(Outer, {"inner": {"a": 2}})
    assert str(err.value) == "inner: inner.a must be 1 here"


def test_a_distinct_list_refuses_a_repeat_naming_the_field_and_the_value():
    class Arms(Config):
        lrs: Annotated[list[Annotated[float, Field(gt=0.0)]], Field(min_length=1), Distinct] = [0.1]
        cells: Annotated[list[tuple[float, float]], Distinct] = []

    assert validate_config(Arms, {"lrs": [0.1, 0.2], "cells": [[0.2, 0.3], [0.3, 0.2]]}).lrs == [0.1, 0.2]
    with pytest.raises(ConfigError, match=r"^lrs: list each value once \(0\.1 more than once\)"):
        validate_config(Arms, {"lrs": [0.1, 0.2, 0.1]})
    with pytest.raises(ConfigError, match=r"^cells: list each value once \(\(0\.0, 0\.3\) more than once\)"):
        validate_config(Arms, {"cells": [[0.0, 0.3], [0.0, 0.3]]})
    with pytest.raises(ConfigError, match=r"^cells: list each value once \(\(0\.2, 0\.3\) more than once\)"):
        validate_config(Arms, {"cells": [[0.2, 0.3], [0.2, 0.3]]})
    with pytest.raises(ConfigError, match=r"^lrs\.1: Input should be greater than 0"):
        validate_config(Arms, {"lrs": [0.1, -0.1]})

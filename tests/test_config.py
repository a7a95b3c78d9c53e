"""Typed configs: --set parsing, validation errors naming the field, profile layering."""

from __future__ import annotations

import pytest
import yaml
from pydantic import Field

from tdlab.config import Config, ConfigError, apply_overrides, build_config, deep_merge, parse_overrides, to_yaml
from tdlab.experiments.markov_init import MarkovInit, MarkovInitConfig


class Inner(Config):
    rate: float = Field(0.5, gt=0.0, lt=1.0)
    n: int = Field(3, ge=1)


class Outer(Config):
    name: str = "x"
    tags: list[str] = ["a"]
    inner: Inner = Inner()


# --- parse_overrides -----------------------------------------------------------------------------


def test_parse_overrides_builds_nested_dicts_with_yaml_values():
    got = parse_overrides(["task.p=0.7", "train.steps=20", "archs=[sec2, gpt2]", "model.out_proj=false",
                           "name=hello world", "train.grad_clip=null", "a.b.c=1.5e+3", "empty="])
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


def test_overrides_win_over_profile_and_seeds_flags_win_over_overrides():
    exp = MarkovInit()
    cfg = exp.make_config("quick", ["train.steps=20", "task.p=0.3", "members=7"], members=2, seed=9)
    assert cfg.train.steps == 20 and cfg.task.p == 0.3
    assert cfg.train.seq_len == MarkovInit.profiles["quick"]["train"]["seq_len"]
    assert cfg.members == 2 and cfg.seed == 9


def test_unknown_profile_and_bad_override_raise_config_error():
    exp = MarkovInit()
    with pytest.raises(ConfigError, match="profile.*allowed: quick, paper"):
        exp.make_config("fast")
    with pytest.raises(ConfigError, match=r"^task\.p:"):
        exp.make_config("quick", ["task.p=1.5"])
    with pytest.raises(ConfigError, match=r"archs\.1"):
        exp.make_config("quick", ["archs=[sec2, lstm]"])
    with pytest.raises(ConfigError, match="repeat"):
        exp.make_config("quick", ["inits=[standard, standard]"])
    with pytest.raises(ConfigError, match="members"):
        exp.make_config("quick", members=0)

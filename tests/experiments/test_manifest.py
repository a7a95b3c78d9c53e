"""The seeds' settings as manifests: every experiment states the settings its seed gives, with their place,
and its paper profile equals them field by field except where it names the field and why."""

from __future__ import annotations

import pytest

from tdlab.config import Config, build_config, read_field
from tdlab.experiments.base import registry
from tdlab.experiments.manifest import Setting, ours_fields, settings_diff, values_equal

NAMES = sorted(registry())


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_states_the_seeds_settings_with_their_place(name: str) -> None:
    exp = registry()[name]
    assert exp.manifest, f"{name}: no manifest of the settings its seed states"
    cfg = build_config(exp.Config, exp.profiles["paper"])
    for field, setting in exp.manifest.items():
        read_field(cfg, field)  # a config field (raises otherwise)
        assert setting.where.strip(), f"{name}: {field} says not where the seed states it"


@pytest.mark.parametrize("name", NAMES)
def test_the_paper_profile_is_the_manifest_except_where_it_says_why(name: str) -> None:
    exp = registry()[name]
    cfg = build_config(exp.Config, exp.profiles["paper"])
    off = {d["field"] for d in settings_diff(exp.manifest, cfg)}
    assert off == set(exp.paper_differs), (
        f"{name}: the paper profile departs from the seed in {sorted(off)}; declared: {sorted(exp.paper_differs)}"
    )
    assert all(why.strip() for why in exp.paper_differs.values())


class _Inner(Config):
    steps: int = 100
    lr: float = 0.1


class _Cfg(Config):
    seed: int = 0
    train: _Inner = _Inner()
    sizes: tuple[int, ...] = (1, 2)
    name: str = "a"


def test_a_diff_names_each_field_off_the_seeds_and_the_rest_are_ours() -> None:
    manifest = {"train.steps": Setting(100, "Table 2"), "sizes": Setting([1, 2], "§4"), "train.lr": Setting(0.1, "T2")}
    cfg = _Cfg()
    assert settings_diff(manifest, cfg) == []
    assert ours_fields(manifest, cfg) == ["name"]  # the root seed is never the paper's
    off = _Cfg(train=_Inner(steps=50), sizes=(1, 3))
    assert settings_diff(manifest, off) == [
        {"field": "train.steps", "paper": 100, "run": 50, "where": "Table 2"},
        {"field": "sizes", "paper": [1, 2], "run": [1, 3], "where": "§4"},
    ]
    assert ours_fields({"train": Setting({"steps": 100, "lr": 0.1}, "T2")}, cfg) == ["sizes", "name"]


def test_values_compare_as_settings() -> None:
    assert values_equal(0.1 + 0.2, 0.3) and values_equal(8, 8.0) and values_equal((1, 2), [1, 2])
    assert not values_equal(0.001, 0.0011) and not values_equal([1], [1, 2]) and not values_equal("a", "b")
    assert values_equal(_Inner(), {"steps": 100, "lr": 0.1}) and not values_equal(True, 1.5)

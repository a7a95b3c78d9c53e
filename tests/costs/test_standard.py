"""The standard profile: one rule from a measured quick time, between quick and paper, within its budget."""

from __future__ import annotations

import math

import pytest

from tdlab.config import read_field
from tdlab.costs.quick_times import quick_times
from tdlab.costs.standard import EXPLICIT, MARGIN, TARGET_SECONDS, paper_learning_rates, standard_of
from tdlab.experiments.base import ExperimentConfig
from tdlab.experiments.catalog import CATALOG
from tdlab.rounds import LENGTH_FIELDS, length_field
from tdlab.train.trainer import TrainConfig

BUDGET = MARGIN * TARGET_SECONDS


class _Cfg(ExperimentConfig):
    train: TrainConfig = TrainConfig()


class _Fake:
    """The attributes the rule reads, for a made-up experiment (its length field: the decide layer's table)."""

    name = "fake"
    Config = _Cfg
    atlas_axes = None


@pytest.fixture(autouse=True)
def _fake_length(monkeypatch):
    monkeypatch.setitem(LENGTH_FIELDS, "fake", "train.steps")


QUICK = {"members": 3, "train": {"steps": 1000}}
PAPER = {"members": 5, "train": {"steps": 8000}}


def test_a_cheap_quick_profile_gets_the_seeds_length_and_members_with_the_time_left():
    st = standard_of(_Fake, QUICK, PAPER, seconds=60)  # 8x the length: 480 s; 5 members: 800 s <= 1440 s
    assert st.layer["train"]["steps"] == 8000 and st.layer["members"] == 5
    assert st.predicted_s == pytest.approx(60 * 8 * 5 / 3)


def test_members_grow_only_as_far_as_the_budget_allows():
    st = standard_of(_Fake, QUICK, PAPER, seconds=170)  # 8x: 1360 s for 3 members; a 4th would not fit
    assert st.layer["train"]["steps"] == 8000 and st.layer["members"] == 3


def test_an_expensive_quick_profile_trains_longer_by_what_fits_rounded_down():
    st = standard_of(_Fake, QUICK, PAPER, seconds=290)  # 1440 / 290 = 4.97: 4900 steps, quick's members
    assert st.layer["train"]["steps"] == 4900 and st.layer["members"] == 3
    assert st.predicted_s <= BUDGET
    slow = standard_of(_Fake, QUICK, PAPER, seconds=5000)  # not even one quick pass fits: quick's length
    assert slow.layer["train"]["steps"] == 1000 and slow.layer["members"] == 3


def test_the_seeds_learning_rate_comes_back_only_where_the_longer_schedule_covers_quicks():
    quick = {**QUICK, "train": {"steps": 1000, "lr": 1e-2}}
    paper = {**PAPER, "train": {"steps": 8000, "lr": 3e-3}}
    long = standard_of(_Fake, quick, paper, seconds=290)  # 4900 steps x 3e-3 = 14.7 >= 1000 x 1e-2 = 10
    assert long.layer["train"]["lr"] == 3e-3 and "the seed's train.lr" in long.reason
    short = standard_of(_Fake, quick, paper, seconds=1000)  # 1400 steps x 3e-3 = 4.2 < 10: quick's rate stays
    assert short.layer["train"]["lr"] == 1e-2 and short.layer["train"]["steps"] == 1400
    slower = standard_of(_Fake, {**quick, "train": {"steps": 1000, "lr": 1e-3}}, paper, seconds=60)
    assert slower.layer["train"]["lr"] == 1e-3  # quick's rate is below the seed's: nothing to take back


def test_without_a_length_field_or_a_measured_time_standard_is_quick():
    class NoField(_Fake):
        name = "fake-without-a-length"

    assert standard_of(NoField, QUICK, PAPER, seconds=10).layer == QUICK
    assert standard_of(_Fake, QUICK, PAPER).layer == QUICK  # "fake" has no measured quick time


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_standard_profile_lies_between_quick_and_paper_and_fits_its_budget(name):
    from tdlab.experiments.base import get

    exp = get(name)
    assert list(exp.profiles)[:3] == ["quick", "standard", "paper"] and CATALOG[name].profiles == tuple(exp.profiles)
    quick, std, paper = (exp.make_config(p) for p in ("quick", "standard", "paper"))
    assert quick.members <= std.members <= max(quick.members, paper.members)
    field = length_field(exp)
    if field is not None and name not in EXPLICIT:
        lq, ls, lp = (read_field(c, field) for c in (quick, std, paper))
        assert lq <= ls <= max(lq, lp)
        if name in quick_times():
            t = quick_times()[name].seconds
            assert t * (ls / lq) * (std.members / quick.members) <= max(BUDGET, t) + 1e-9
            assert ls == lp or ls > lq or t * 1.1 > BUDGET  # it grew, unless quick alone nearly fills the budget
    if field is None and name not in EXPLICIT:
        assert std == quick
    if EXPLICIT.get(name, (None,))[0] == "paper":
        assert std == paper
    rest = {k: v for k, v in std.model_dump().items() if k != "members"}
    qrest = {k: v for k, v in quick.model_dump().items() if k != "members"}
    if field is not None and "." in field:  # only the length field (and members) differ from quick
        head, leaf = field.rsplit(".", 1)
        node_s, node_q = rest, qrest
        for part in head.split("."):
            node_s, node_q = node_s[part], node_q[part]
        node_s.pop(leaf), node_q.pop(leaf)
    for f in paper_learning_rates(quick, paper, (read_field(std, field) / read_field(quick, field)) if field else 1.0):
        head, leaf = f.rsplit(".", 1) if "." in f else ("", f)
        node_s, node_q = rest, qrest
        for part in filter(None, head.split(".")):
            node_s, node_q = node_s[part], node_q[part]
        assert node_s.pop(leaf) == read_field(paper, f) and node_q.pop(leaf) == read_field(quick, f)
    if name not in EXPLICIT:
        assert rest == qrest


def test_every_measured_time_says_where_it_comes_from():
    assert set(quick_times()) <= set(CATALOG)
    assert all(t > 0 and math.isfinite(t) and src for t, src in quick_times().values())

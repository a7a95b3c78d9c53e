"""Each experiment's work as a function of its config: the defaults where the tables list none, and arm names
that are the experiments' own (what the batch's pace of a stopped run compares with the stored fits)."""

from __future__ import annotations

from tdlab.config import build_config
from tdlab.costs.work import FIT_ARMS, FIT_WORK, WORK, fit_arms, fit_work, work
from tdlab.experiments.base import get
from tdlab.experiments.catalog import CATALOG


def test_the_tables_name_known_experiments_and_the_others_get_the_defaults():
    assert set(FIT_WORK) | set(FIT_ARMS) | set(WORK) <= set(CATALOG)
    exp = get("topics-wv")
    cfg = build_config(exp.Config, exp.profiles["paper"])
    assert (fit_work(exp, cfg), fit_arms(exp, cfg), work(exp, cfg)) == (1.0, None, None)


def test_every_listed_cost_is_positive_at_quick_and_paper():
    for name in sorted(set(FIT_WORK) | set(FIT_ARMS) | set(WORK)):
        exp = get(name)
        for profile in ("quick", "paper"):
            cfg = build_config(exp.Config, exp.profiles[profile])
            assert fit_work(exp, cfg) > 0
            assert fit_arms(exp, cfg) is None or len(set(fit_arms(exp, cfg))) == len(fit_arms(exp, cfg)) > 0
            assert work(exp, cfg) is None or work(exp, cfg) > 0

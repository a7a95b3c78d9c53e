"""Claims: a paper's statements declared as data and judged on a run's own measurements.

* :mod:`tdlab.claims.declare` — what an experiment declares (:class:`ClaimSpec`, :class:`Stage`) and
  what its ``measure()`` returns (:class:`Measurements` of :class:`Row` s of :class:`Sample` s);
* :mod:`tdlab.claims.judge` — the one place verdicts are made (holds / fails / not resolved / not
  evaluable), with every rule that keeps them honest;
* :mod:`tdlab.claims.stats` — intervals, exact tests, Holm's correction;
* :mod:`tdlab.claims.health` — the training-health gate and end drift;
* :mod:`tdlab.claims.sequential` — the fixed schedule of looks that ``--decide`` adds members by.
"""

from tdlab.claims.declare import ClaimSpec, Kind, Measurements, Row, Sample, Stage, StageCheck, resolve
from tdlab.claims.health import ArmHealth, assess_arm, end_drift
from tdlab.claims.judge import VERDICTS, GroupResult, RowResult, Verdict, group_verdict, judge, judge_row
from tdlab.claims.sequential import Looks, growable, round_plan
from tdlab.claims.stats import (
    Interval,
    difference_interval,
    holm,
    mean_interval,
    p_outside,
    proportion_interval,
    proportion_p_outside,
    sign_test,
)

__all__ = [
    "VERDICTS",
    "ArmHealth",
    "ClaimSpec",
    "GroupResult",
    "Interval",
    "Kind",
    "Looks",
    "Measurements",
    "Row",
    "RowResult",
    "Sample",
    "Stage",
    "StageCheck",
    "Verdict",
    "assess_arm",
    "difference_interval",
    "end_drift",
    "group_verdict",
    "growable",
    "holm",
    "judge",
    "judge_row",
    "mean_interval",
    "p_outside",
    "proportion_interval",
    "proportion_p_outside",
    "resolve",
    "round_plan",
    "sign_test",
]

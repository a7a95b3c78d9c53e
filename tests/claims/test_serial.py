"""The judge's inputs as JSON and back: every field of a sample, row, stage check and arm health survives,
and judging the round trip gives the same groups; what tdlab never writes is refused naming the part."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tdlab.claims.declare import ClaimSpec, Measurements, Sample, Stage
from tdlab.claims.health import ArmHealth
from tdlab.claims.judge import judge
from tdlab.claims.serial import (
    SerialError,
    health_from_json,
    health_to_json,
    measurements_from_json,
    measurements_to_json,
)

STAGE = Stage("past-plateau", "left the plateau")
SPECS = (
    ClaimSpec("v", "a value", "value", "close", "loss", expected=1.0, tolerance=0.1, stage=STAGE),
    ClaimSpec("c", "a comparison", "compare", "gt", "step", margin=0.0, horizon="budget"),
)


def _measured() -> Measurements:
    m = Measurements({"table": [1, 2]})
    m.row(
        "v",
        "a",
        Sample((1.01, 0.99, 1.02), se=(0.01, 0.01, 0.02), resolution=0.001, mc_se=0.002, drift=1e-4),
        arms=["A"],
        context={"k": np.int64(2), "pq": (0.2, 0.3), "name": "x", "flag": np.bool_(True)},
        label="row a",
    )
    m.row("v", "b", Sample((float("nan"), 1.0, 1.0)), arms=["B"], provenance="ours")
    m.row(
        "c",
        "ab",
        Sample((300.0, 500.0, 500.0), censored=(False, True, True), resolution=100.0),
        Sample((100.0, 200.0, 100.0), deterministic=False),
        arms=["A", "B"],
    )
    m.row("c", "p", Sample((1.0, 0.0, 1.0), proportion=True), Sample((0.0, 0.0, 1.0), proportion=True), arms=["A"])
    m.stage("A", STAGE, [0.1, 0.2, 0.3], 0.5, "lt", "gap vs bound")
    m.stage("B", STAGE, [0.9, 0.2, 0.3], [0.5, 0.5, 0.5])
    return m


def test_round_trip_keeps_every_field_and_the_verdicts():
    m = _measured()
    doc = json.loads(json.dumps(measurements_to_json(m), allow_nan=True))
    back = measurements_from_json(doc)
    for claim, rows in m.rows.items():
        for r, b in zip(rows, back.rows[claim], strict=True):
            assert (r.key, r.arms, r.provenance, r.label) == (b.key, b.arms, b.provenance, b.label)
            for s, t in ((r.measured, b.measured), (r.reference, b.reference)):
                if s is None:
                    assert t is None
                    continue
                assert np.array_equal(np.array(s.values), np.array(t.values), equal_nan=True)
                assert (s.se, s.censored, s.censor, s.resolution, s.mc_se, s.deterministic, s.proportion, s.drift) == (
                    t.se,
                    t.censored,
                    t.censor,
                    t.resolution,
                    t.mc_se,
                    t.deterministic,
                    t.proportion,
                    t.drift,
                )
    assert back.rows["v"][0].context == {"k": 2, "pq": [0.2, 0.3], "name": "x", "flag": True}
    assert back.stages["A"]["past-plateau"] == m.stages["A"]["past-plateau"]
    health = {
        "A": ArmHealth("A", True, True, [], {"final_loss": [0.5, math.nan]}),
        "B": ArmHealth("B", True, False, ["above H"]),
    }
    hback = health_from_json(json.loads(json.dumps(health_to_json(health), allow_nan=True)))
    assert [(h.arm, h.moved, h.trained, h.reasons) for h in hback.values()] == [
        (h.arm, h.moved, h.trained, h.reasons) for h in health.values()
    ]

    def judged(meas, h):  # a row's shown context keeps plain numbers only: numpy ones come back plain
        groups = [g.to_dict() for g in judge(SPECS, meas, None, h)]
        for g in groups:
            for r in g["rows"]:
                r.pop("context")
        return groups

    a, b = judged(m, health), judged(back, hback)
    assert json.dumps(a, allow_nan=True, default=str) == json.dumps(b, allow_nan=True, default=str)
    assert {g["verdict"] for g in a} - {"not evaluable"}  # something was decided


@pytest.mark.parametrize(
    "doc, part",
    [
        ({"rows": {}}, "stages"),
        ({"rows": {"v": {}}, "stages": {}}, "measured.rows.v"),
        (
            {"rows": {"v": [{"key": "a", "provenance": "theirs", "measured": {"values": [1]}}]}, "stages": {}},
            r"measured.rows.v\[0\]",
        ),
        ({"rows": {"v": [{"key": "a", "provenance": "paper"}]}, "stages": {}}, "no measured sample"),
        (
            {
                "rows": {"v": [{"key": "a", "provenance": "paper", "measured": {"values": [1], "se": [1, 2]}}]},
                "stages": {},
            },
            "se has",
        ),
        ({"rows": {}, "stages": {"A": {"s": {"value": [1], "bound": [], "relation": "lt"}}}}, "measured.stages.A.s"),
    ],
)
def test_what_tdlab_never_writes_is_refused_naming_the_part(doc, part):
    with pytest.raises(SerialError, match=part):
        measurements_from_json(doc)


def test_health_needs_moved_and_trained():
    with pytest.raises(SerialError, match=re.escape("arms.A")):
        health_from_json({"A": {"moved": "yes", "trained": True}})

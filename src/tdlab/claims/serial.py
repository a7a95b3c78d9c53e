"""What the judge reads, as JSON and back: :class:`~tdlab.claims.declare.Measurements` (claim rows with
their samples, stage checks) and :class:`~tdlab.claims.health.ArmHealth`.

A published record (:mod:`tdlab.records`) keeps them so that a later rule re-judges a run without
training it again: ``judge(specs, measurements_from_json(doc), cfg, health_from_json(arms), confidence)``
gives what judging the run itself gives (tested over every committed record). Non-finite floats are kept
(``NaN`` / ``Infinity`` tokens, as Python's ``json`` writes them). A row's context keeps numbers, text,
booleans and lists of them; a tuple comes back as a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tdlab.claims.declare import Measurements, Row, Sample, StageCheck
from tdlab.claims.health import ArmHealth

__all__ = ["SerialError", "health_from_json", "health_to_json", "measurements_from_json", "measurements_to_json"]


class SerialError(ValueError):
    """A stored measurement that is not what :func:`measurements_to_json` writes (names the part)."""


def _plain(x: Any) -> Any:
    """``x`` as JSON-ready Python: numpy scalars and arrays to numbers and lists, tuples to lists."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x)
    if isinstance(x, str) or x is None:
        return x
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    return str(x)


def _sample_to(s: Sample | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "values": list(s.values),
        "se": list(s.se) if s.se is not None else None,
        "censored": list(s.censored) if s.censored is not None else None,
        "censor": s.censor,
        "resolution": s.resolution,
        "mc_se": s.mc_se,
        "deterministic": s.deterministic,
        "proportion": s.proportion,
        "drift": s.drift,
    }


def _sample_from(d: Any, where: str) -> Sample | None:
    if d is None:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("values"), list):
        raise SerialError(f"{where}: a sample needs a list of values")
    try:
        return Sample(
            tuple(float(v) for v in d["values"]),
            se=None if d.get("se") is None else tuple(float(v) for v in d["se"]),
            censored=None if d.get("censored") is None else tuple(bool(v) for v in d["censored"]),
            censor=d.get("censor", "above"),
            resolution=float(d.get("resolution", 0.0)),
            mc_se=float(d.get("mc_se", 0.0)),
            deterministic=bool(d.get("deterministic", False)),
            proportion=bool(d.get("proportion", False)),
            drift=None if d.get("drift") is None else float(d["drift"]),
        )
    except (TypeError, ValueError) as exc:
        raise SerialError(f"{where}: {exc}") from None


def measurements_to_json(m: Measurements) -> dict[str, Any]:
    """``{"rows": {claim: [row, ...]}, "stages": {arm: {stage: check}}}`` of ``m`` (its ``values``, the
    report's tables, are the summary's ``measurements`` and are not repeated here)."""
    rows = {
        claim: [
            {
                "key": r.key,
                "measured": _sample_to(r.measured),
                "reference": _sample_to(r.reference),
                "arms": list(r.arms),
                "provenance": r.provenance,
                "context": _plain(dict(r.context)),
                "label": r.label,
            }
            for r in rs
        ]
        for claim, rs in m.rows.items()
    }
    stages = {
        arm: {
            sid: {"value": list(c.value), "bound": list(c.bound), "relation": c.relation, "evidence": c.evidence}
            for sid, c in checks.items()
        }
        for arm, checks in m.stages.items()
    }
    return {"rows": rows, "stages": stages}


def measurements_from_json(doc: Any) -> Measurements:
    """The :class:`Measurements` :func:`measurements_to_json` wrote; :class:`SerialError` names what is wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), dict) or not isinstance(doc.get("stages"), dict):
        raise SerialError("measured: needs 'rows' and 'stages' objects")
    m = Measurements()
    for claim, rows in doc["rows"].items():
        if not isinstance(rows, list):
            raise SerialError(f"measured.rows.{claim}: not a list of rows")
        for i, r in enumerate(rows):
            where = f"measured.rows.{claim}[{i}]"
            if isinstance(r, dict) and r.get("provenance") == "seed":  # written before "seed" meant only a random seed
                r = {**r, "provenance": "paper"}
            if (
                not isinstance(r, dict)
                or not isinstance(r.get("key"), str)
                or r.get("provenance") not in ("paper", "ours")
            ):
                raise SerialError(f"{where}: a row needs a key and a provenance (paper or ours)")
            measured = _sample_from(r.get("measured"), where)
            if measured is None:
                raise SerialError(f"{where}: no measured sample")
            m.rows.setdefault(claim, []).append(
                Row(
                    r["key"],
                    measured,
                    _sample_from(r.get("reference"), where),
                    tuple(str(a) for a in r.get("arms", [])),
                    r["provenance"],
                    dict(r.get("context") or {}),
                    str(r.get("label", "")),
                )
            )
    for arm, checks in doc["stages"].items():
        if not isinstance(checks, dict):
            raise SerialError(f"measured.stages.{arm}: not an object of stage checks")
        for sid, c in checks.items():
            if (
                not isinstance(c, dict)
                or c.get("relation") not in ("lt", "gt")
                or not isinstance(c.get("value"), list)
                or not isinstance(c.get("bound"), list)
                or len(c["value"]) != len(c["bound"])
            ):
                raise SerialError(f"measured.stages.{arm}.{sid}: needs value and bound lists of one length and lt/gt")
            m.stages.setdefault(arm, {})[sid] = StageCheck(
                sid,
                tuple(float(v) for v in c["value"]),
                tuple(float(v) for v in c["bound"]),
                c["relation"],
                str(c.get("evidence", "")),
            )
    return m


def health_to_json(health: Mapping[str, ArmHealth]) -> dict[str, Any]:
    """Every arm's health as the summary writes it (:meth:`ArmHealth.to_dict`)."""
    return {arm: _plain(h.to_dict()) for arm, h in health.items()}


_HEALTH_KEYS = ("arm", "status", "moved", "trained", "reasons")


def health_from_json(doc: Any) -> dict[str, ArmHealth]:
    """The :class:`ArmHealth` of every arm :func:`health_to_json` wrote."""
    if not isinstance(doc, dict):
        raise SerialError("arms: not an object of arm health")
    out: dict[str, ArmHealth] = {}
    for arm, h in doc.items():
        if not isinstance(h, dict) or not isinstance(h.get("moved"), bool) or not isinstance(h.get("trained"), bool):
            raise SerialError(f"arms.{arm}: needs moved and trained (true/false)")
        facts = {k: v for k, v in h.items() if k not in _HEALTH_KEYS}
        out[arm] = ArmHealth(
            str(h.get("arm", arm)), h["moved"], h["trained"], [str(r) for r in h.get("reasons", [])], facts
        )
    return out

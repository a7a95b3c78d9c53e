"""Fuzz ``tdlab sweep SPEC.yaml`` with specs that are bad by construction (validation only).

A valid two-point spec of ``markov-init`` gets one defect: a top-level field of the wrong type or
out of range, an unknown field, a bad override in ``set``, ``grid`` or ``points`` (the same kinds of
bad values as the ``--set`` fuzz), or a file that is not a YAML mapping at all. ``run_sweep`` is
replaced by a failure, so a spec wrongly accepted shows up as one instead of running points.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from unittest import mock

import yaml
from hypothesis import given
from hypothesis import strategies as st

import tdlab.sweep

BASE = {
    "name": "fz",
    "experiment": "markov-init",
    "profile": "quick",
    "seeds": 1,
    "set": {"train.steps": 3, "archs": ["sec2"], "inits": ["standard"]},
    "grid": {"task.p": [0.2, 0.5]},
}

BAD_OVERRIDES = st.sampled_from(
    [
        ("train.steps", True),
        ("train.steps", "many"),
        ("train.steps", 2.5),
        ("train.steps", 0),
        ("task.p", 1.5),
        ("task.p", float("nan")),
        ("model.init_e", float("inf")),
        ("train.chunk", 0),
        ("train.lr", -1.0),
        ("no_such.key", 1),
        ("task.bogus", 2),
        ("model.arch", "gpt2"),
        ("archs", ["bogus"]),
        ("train.seq_len", [1]),
        ("train.batch", {"a": 1}),
        ("task.q", dt.date(2020, 1, 1)),
        ("task.q", b"\x00\x01"),
    ]
)


@st.composite
def bad_spec(draw: st.DrawFn) -> tuple[str, list[str]]:
    """``(spec file text, names the error may give)``."""
    spec = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    where = draw(st.sampled_from(["top", "unknown", "set", "grid", "points", "file"]))
    if where == "top":
        key, value = draw(
            st.sampled_from(
                [
                    ("name", "../escape"),
                    ("name", ""),
                    ("name", "a b"),
                    ("name", 5),
                    ("experiment", "no-such"),
                    ("experiment", ["a", "b"]),
                    ("profile", "slow"),
                    ("profile", 3),
                    ("seeds", 0),
                    ("seeds", "x"),
                    ("seeds", True),
                    ("seed", -1),
                    ("seed", 1.5),
                    ("set", [1, 2]),
                    ("grid", "task.p"),
                    ("points", {"a": 1}),
                ]
            )
        )
        spec[key] = value
        names = [key]
    elif where == "unknown":
        key = draw(st.from_regex(r"\A[a-z]{1,10}\Z").filter(lambda k: k not in tdlab.sweep.SweepSpec.model_fields))
        spec[key] = 1
        names = [key]
    elif where in ("set", "grid", "points"):
        key, value = draw(BAD_OVERRIDES.filter(lambda kv: where != "set" or kv[0] not in BASE["grid"]))  # the grid wins
        if where == "set":
            spec["set"][key] = value
        elif where == "grid":
            spec["grid"][key] = draw(st.sampled_from([[value], [0.3, value], []]))
        else:
            spec["points"] = [{"task.p": 0.3}, {key: value}]
        names = [key, key.split(".")[0], where]
    else:
        text = draw(
            st.one_of(
                st.sampled_from(["", "- a\n- b\n", "just a string", "[1, 2", "{a: &x [*x]}", "\t- bad indent", "7"]),
                st.binary(min_size=1, max_size=300).map(lambda b: b.decode("latin-1")),
            )
        )
        return text, ["sweep spec"]
    return yaml.dump(spec, sort_keys=False), names


def _no_points(*args, **kwargs):
    raise AssertionError("a bad sweep spec was accepted and would have run")


@given(case=bad_spec())
def test_bad_sweep_specs_are_refused(fz, tmp_path_factory, case):
    text, names = case
    tmp = tmp_path_factory.mktemp("fuzz-sweep", numbered=True)
    spec = tmp / "spec.yaml"
    spec.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
    out = tmp / "runs"
    before = fz.digest(tmp)
    with mock.patch.object(tdlab.sweep, "run_sweep", _no_points):
        result = fz.invoke(["sweep", str(spec), "--out", str(out)])
    fz.refused("sweep spec", result, names, before, tmp, key=text)
    assert not out.exists()


def test_the_base_spec_is_valid(tmp_path):
    """The defects are the only thing wrong: the base spec itself loads and validates."""
    f = tmp_path / "spec.yaml"
    f.write_text(yaml.safe_dump(BASE))
    spec = tdlab.sweep.load_spec(Path(f))
    assert len(tdlab.sweep.plan(spec)) == 2

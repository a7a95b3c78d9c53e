"""Fuzz the options of ``tdlab run`` and ``tdlab sweep`` with values they must refuse: text where a
number is expected, numbers out of range, unknown profiles and devices, unknown options. Click
refuses some (usage errors), tdlab the rest (config errors): both must keep the promise."""

from __future__ import annotations

import math
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

import tdlab.sweep

# Not integers. An integral float ("2.0") is left out: typer reads it as the integer, as click did.
NOT_AN_INT = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9.]{0,8}\Z"),
    st.floats().filter(lambda x: not (math.isfinite(x) and x == int(x))).map(str),
)
WORDS = st.from_regex(r"\A[a-z][a-z0-9_-]{0,10}\Z")

RUN_OPTIONS = st.one_of(
    st.tuples(
        st.just("--seeds"), st.one_of(NOT_AN_INT, st.integers(-(10**6), 0).map(str), st.integers(4097, 10**9).map(str))
    ).map(lambda t: (t, ["--seeds", "members"])),
    st.tuples(
        st.just("--seed"),
        st.one_of(NOT_AN_INT, st.integers(-(10**6), -1).map(str), st.integers(2**62 + 1, 2**70).map(str)),
    ).map(lambda t: (t, ["--seed", "seed"])),
    st.tuples(st.just("--profile"), WORDS.filter(lambda w: w not in ("quick", "paper"))).map(
        lambda t: (t, ["profile"])
    ),
    st.tuples(st.just("--device"), WORDS.filter(lambda w: w != "cpu" and not w.startswith("cuda"))).map(
        lambda t: (t, ["device"])
    ),
    WORDS.map(lambda w: ((f"--{w}x", "1"), [f"--{w}x"])),  # an unknown option (no tdlab option ends in x)
)


@given(case=RUN_OPTIONS)
def test_bad_run_options_are_refused(fz, tmp_path_factory, case):
    (option, value), names = case
    out = tmp_path_factory.mktemp("fuzz-opt", numbered=True) / "runs"
    with fz.no_training():
        result = fz.invoke(["run", "markov-init", "--quiet", "--out", str(out), option, value])
    fz.refused("run options", result, names, {}, out, key=(option, value))
    assert not out.exists()


def _no_points(*args, **kwargs):
    raise AssertionError("a bad sweep option was accepted and would have run")


@given(
    case=st.one_of(
        st.tuples(st.just("--workers"), st.one_of(NOT_AN_INT, st.integers(-(10**6), 0).map(str))).map(
            lambda t: (t, ["--workers"])
        ),
        st.tuples(st.just("--backend"), WORDS.filter(lambda w: w not in ("local", "ray"))).map(
            lambda t: (t, ["backend"])
        ),
    )
)
def test_bad_sweep_options_are_refused(fz, tmp_path_factory, case):
    (option, value), names = case
    tmp = tmp_path_factory.mktemp("fuzz-sweep-opt", numbered=True)
    spec = tmp / "spec.yaml"
    spec.write_text("name: fz\nexperiment: markov-init\nset: {train.steps: 3}\n")
    before = fz.digest(tmp)
    with mock.patch.object(tdlab.sweep, "run_sweep", _no_points):
        result = fz.invoke(["sweep", str(spec), "--out", str(tmp / "runs"), option, value])
    fz.refused("sweep options", result, names, before, tmp, key=(option, value))

"""Fuzz ``tdlab report RUN_DIR`` with corrupt copies of a small finished run.

Each example copies the session's tiny run and damages one file: truncated, replaced by garbage,
deleted, or rewritten with the right format and the wrong content (a YAML or JSON value of another
shape, a metrics table with a string ``step`` column, zero rows, unknown metric names, a missing
column). Damage to a file the report reads (``config.yaml``, ``metrics.parquet``, ``summary.json``)
must be refused as promised: exit 2, one line naming the file, the run directory unchanged. Damage
that leaves a file readable (a truncated YAML that still parses, a deleted figure) may instead be
rebuilt (exit 0); no input may end in a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

# Files of the tiny run, and whether any damage to them must be refused (the report reads them).
READ = ["config.yaml", "metrics.parquet", "summary.json"]
OTHER = ["report.html", "arrays/sec2__standard.safetensors", "figures/fig4_test_loss.png"]

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8,
)


@st.composite
def damage(draw: st.DrawFn, files: list[str]) -> tuple[str, str, Callable[[Path], None], bool]:
    """``(file, how, apply(run_dir), must_refuse)`` for one of ``files``."""
    name = draw(st.sampled_from(files))
    how = draw(st.sampled_from(["truncate", "garbage", "delete"] + (["wrong-content"] * 3 if name in READ else [])))
    if how == "delete":
        return name, how, lambda d: (d / name).unlink(), name in ("config.yaml", "metrics.parquet")
    if how == "truncate":
        frac = draw(st.floats(0.0, 0.999))

        def cut(d: Path) -> None:
            data = (d / name).read_bytes()
            (d / name).write_bytes(data[: int(len(data) * frac)])

        # a truncated YAML may still parse (dropped keys take their defaults); JSON and parquet may not
        return name, how, cut, name in ("metrics.parquet", "summary.json")
    if how == "garbage":
        junk = draw(st.binary(min_size=0, max_size=2000))
        # random bytes are never a parquet file, nor a YAML mapping with an experiment; they may be
        # a JSON object ("{}") by chance
        return name, how, lambda d: (d / name).write_bytes(junk), name in ("config.yaml", "metrics.parquet")
    return (name, how, *draw(wrong_content(name)))


def wrong_content(name: str) -> st.SearchStrategy[tuple[Callable[[Path], None], bool]]:
    """The right format with the wrong content, for each file the report reads."""
    if name == "config.yaml":
        return st.one_of(
            JSON_VALUES.filter(lambda v: not isinstance(v, dict)).map(lambda v: _write_yaml(v)),
            st.sampled_from(["experiment", "config", "profile", "sweep"]).flatmap(
                lambda key: JSON_VALUES.filter(lambda v: not isinstance(v, (str, dict, type(None)))).map(
                    lambda v, key=key: _edit_yaml(key, v)
                )
            ),
            st.sampled_from(
                [
                    ("train", "steps", True),
                    ("train", "steps", "many"),
                    ("model", "init_e", float("nan")),
                    ("train", "chunk", 0),
                    ("task", "p", 2.0),
                    ("model", "vocab", 3),
                ]
            ).map(lambda t: _edit_yaml_config(*t)),
            st.just(_edit_yaml("experiment", "no-such-experiment")),
        ).map(lambda f: (f, True))
    if name == "summary.json":
        return st.one_of(
            JSON_VALUES.filter(lambda v: not isinstance(v, dict)).map(lambda v: _write_json(v)),
            st.sampled_from(["status", "run_id", "wall_time_s", "env", "member"]).flatmap(
                lambda key: (
                    st.sampled_from([[1], {"a": 1}, "x" * 3, True])
                    .filter(lambda v, key=key: not (key in ("status", "run_id") and isinstance(v, str)))
                    .map(lambda v, key=key: _edit_json(key, v))
                )
            ),
        ).map(lambda f: (f, True))
    return st.sampled_from(
        [
            lambda df: df.iloc[:0],  # zero rows
            lambda df: df.assign(name="junk"),  # none of the expected names
            lambda df: df[df["name"] != "test_loss"],  # the main series missing
            lambda df: df.assign(step=df["step"].astype(str)),  # a string step column
            lambda df: df.assign(value=df["value"].astype(str)),
            lambda df: df.assign(member=df["member"].astype(float) + 0.5),
            lambda df: df.drop(columns=["arm"]),
            lambda df: df.assign(arm=1),
        ]
    ).map(lambda f: (lambda d: _edit_metrics(d, f), True))


def _write_yaml(value: object) -> Callable[[Path], None]:
    return lambda d: (d / "config.yaml").write_text(yaml.safe_dump(value))


def _edit_yaml(key: str, value: object) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        conf = yaml.safe_load((d / "config.yaml").read_text())
        conf[key] = value
        (d / "config.yaml").write_text(yaml.safe_dump(conf))

    return f


def _edit_yaml_config(section: str, key: str, value: object) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        conf = yaml.safe_load((d / "config.yaml").read_text())
        conf["config"][section][key] = value
        (d / "config.yaml").write_text(yaml.safe_dump(conf))

    return f


def _write_json(value: object) -> Callable[[Path], None]:
    return lambda d: (d / "summary.json").write_text(json.dumps(value))


def _edit_json(key: str, value: object) -> Callable[[Path], None]:
    def f(d: Path) -> None:
        s = json.loads((d / "summary.json").read_text())
        s[key] = value
        (d / "summary.json").write_text(json.dumps(s))

    return f


def _edit_metrics(d: Path, f: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    df = pd.read_parquet(d / "metrics.parquet")
    f(df).to_parquet(d / "metrics.parquet")


@given(case=damage(READ))
def test_damage_to_the_files_the_report_reads_is_refused(fz, tiny_run, tmp_path_factory, case):
    _report_on_damaged_copy(fz, tiny_run, tmp_path_factory, case)


# A rebuilt report draws its figures (~1 s an example): fewer examples, the same share under --fuzz-long.
@settings(max_examples=max(3, settings.default.max_examples // 5))
@given(case=damage(OTHER))
def test_damage_to_other_files_is_rebuilt_or_refused(fz, tiny_run, tmp_path_factory, case):
    _report_on_damaged_copy(fz, tiny_run, tmp_path_factory, case)


def _report_on_damaged_copy(fz, tiny_run, tmp_path_factory, case) -> None:
    name, how, apply, must_refuse = case
    out = tmp_path_factory.mktemp("fuzz-run", numbered=True)
    run = fz.copy_run(tiny_run, out)
    apply(run)
    before = fz.digest(out)
    result = fz.invoke(["report", str(run)])
    fz.refused(
        f"report: {how}",
        result,
        [Path(name).name] if must_refuse else [Path(name).name, str(run)],
        before,
        out,
        allow_ok=not must_refuse,
    )


def test_the_tiny_run_is_what_the_fuzz_damages(tiny_run):
    """The files the strategies name exist in the tiny run (else the fuzz would damage nothing)."""
    for name in READ + OTHER:
        assert (tiny_run / name).is_file(), name

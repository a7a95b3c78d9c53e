"""Fixtures of seed 002's experiment tests: one tiny end-to-end run per experiment (module scope), then
its stored measurements replaced by chosen ones (:class:`Patched`) so that every group is shown to
hold, fail and stay undecided on measurements whose verdict is known."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tdlab.runner import execute
from tdlab.runs import Run


class Patched(Run):
    """A stored run whose metrics and arrays are replaced where the test says (``measure`` reads only
    ``metrics()`` and ``arrays(arm)`` through :class:`~tdlab.run_view.RunView`).

    ``metrics``: ``{(arm, name, step): per-member values}`` (``step=None``: every step, a flat curve);
    ``arrays``: ``{arm: {name: array with a member axis}}``.
    """

    def __init__(self, run: Run, metrics: dict | None = None, arrays: dict | None = None):
        super().__init__(run.path)
        self._base, self._m, self._a = run, metrics or {}, arrays or {}

    def metrics(self):
        df = self._base.metrics().copy()
        for (arm, name, step), values in self._m.items():
            sel_arm = (df["arm"] == arm) & (df["name"] == name)
            members = sorted(df.loc[sel_arm, "member"].unique())
            for e, v in zip(members, np.broadcast_to(np.asarray(values, float), (len(members),)), strict=True):
                sel = sel_arm & (df["member"] == e)
                if step is not None:
                    sel &= df["step"] == step
                    assert sel.sum() == 1, (arm, name, step, e)
                df.loc[sel, "value"] = float(v)
        return df

    def arrays(self, arm):
        out = dict(self._base.arrays(arm))
        out.update({k: torch.as_tensor(np.asarray(v)) for k, v in self._a.get(arm, {}).items()})
        return out


def run_tiny(exp, overrides, factory, members: int = 3) -> tuple[object, Run]:
    """A tiny quick run of ``exp`` through the runner; checks it finished with figures and a summary."""
    cfg = exp.make_config("quick", overrides, members=members)
    run = execute(exp, cfg, "quick", factory.mktemp(exp.name) / "runs", progress=False)
    assert run.summary["status"] == "done", run.summary.get("error")
    assert (run.path / "figures").is_dir() and any((run.path / "figures").iterdir())
    assert run.summary["claims_total"] == len(run.summary["claims"]) and "arms" in run.summary
    return cfg, Run(run.path)


def groups(analysis) -> dict:
    return {g.id: g for g in analysis.groups}


def rows(group) -> dict:
    return {r.id.split("/", 1)[1]: r for r in group.rows}


@pytest.fixture(scope="session")
def s2(tmp_path_factory):
    """The helpers above (test modules cannot import this conftest under ``--import-mode=importlib``), with
    the Monte-Carlo references of every run cached in a private folder (never the user's cache)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TDLAB_CACHE", str(tmp_path_factory.mktemp("tdlab-cache")))
    yield SimpleNamespace(
        Patched=Patched,
        run_tiny=lambda exp, over, members=3: run_tiny(exp, over, tmp_path_factory, members),
        groups=groups,
        rows=rows,
    )
    mp.undo()

"""CheckpointedMemo: evaluations kept by key in a checkpoint, saved on the wall-time interval and at a stop,
replayed on resume (a Nelder-Mead path included), refused when another run or computation wrote them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from tdlab.safeio import CheckpointError
from tdlab.train.memo import CheckpointedMemo, array_key
from tdlab.train.stopping import RunStopped, stopping


def _rosen(calls: list[int]):
    def f(v: np.ndarray) -> np.ndarray:
        calls.append(1)
        return np.array([(1 - v[0]) ** 2 + 100 * (v[1] - v[0] ** 2) ** 2])

    return f


def _polish(memo: CheckpointedMemo, calls: list[int]) -> np.ndarray:
    f = _rosen(calls)
    res = minimize(
        lambda v: float(memo(array_key(v), lambda: f(v))[0]),
        np.array([-1.0, 1.5]),
        method="Nelder-Mead",
        options={"maxfev": 60},
    )
    return res.x


def test_a_stopped_computation_resumes_from_its_memo_to_the_same_path(tmp_path):
    whole_calls: list[int] = []
    whole = _polish(CheckpointedMemo(None), whole_calls)
    path = tmp_path / "memo.json"
    calls: list[int] = []
    stops = 0
    while True:  # stopped after every new evaluation: each attempt adds one and replays the others
        try:
            with stopping(until_s=0, signals=False):
                again = _polish(CheckpointedMemo(path, "hash", {"what": "rosen"}, label="polish"), calls)
            break
        except RunStopped as s:
            stops += 1
            assert s.label == "polish" and s.step == stops
    assert np.array_equal(again, whole)
    assert len(calls) == len(whole_calls) == stops  # every evaluation computed once (the last one stopped too)
    memo = CheckpointedMemo(path, "hash", {"what": "rosen"})
    assert memo.loaded == len(memo) == stops


def test_without_a_policy_nothing_is_saved_and_nothing_stops(tmp_path):
    memo = CheckpointedMemo(tmp_path / "m.json", "h")
    assert memo("a", lambda: np.ones(2)).tolist() == [1.0, 1.0]
    assert memo("a", lambda: np.zeros(2)).tolist() == [1.0, 1.0]  # kept, not recomputed
    assert not (tmp_path / "m.json").exists()
    memo.save()
    assert CheckpointedMemo(tmp_path / "m.json", "h").values["a"].tolist() == [1.0, 1.0]


def test_a_memo_of_another_run_or_computation_is_refused(tmp_path):
    path = tmp_path / "m.json"
    memo = CheckpointedMemo(path, "h", {"panel": "T5"})
    memo("a", lambda: np.ones(1))
    memo.save()
    with pytest.raises(CheckpointError, match="different run config"):
        CheckpointedMemo(path, "other", {"panel": "T5"})
    with pytest.raises(CheckpointError, match="different config"):
        CheckpointedMemo(path, "h", {"panel": "T10"})


def test_array_keys_tell_exact_inputs_apart():
    a = np.array([0.1, 0.2])
    assert array_key(a) == array_key(a.copy())
    assert array_key(a) != array_key(np.nextafter(a, 1.0))
    assert array_key(a) != array_key(a.astype(np.float32))
    assert array_key(a, a) != array_key(np.concatenate([a, a]))

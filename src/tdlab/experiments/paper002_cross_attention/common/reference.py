"""The finite-context references of seed 002's trained models: the minimisers of the loss the models
are trained on, by replicate Monte-Carlo draws.

Each replicate draw minimises ``l_{n, L}`` on ``n`` fresh prompts; drawn at the arms' ``n = N`` the replicates are
independent copies of what the arms reach, and their standard error enters the members' interval
(:class:`tdlab.claims.Row` ``reference``). Why these are the references (and not the closed forms of
:func:`tdlab.theory.icl.alpha_star_T`, :func:`tdlab.theory.icl.two_param_stationary`, nor a large ``n``) is the
reading ``finite_context_reference`` of the seed's ``experiments.yaml``.

The minimisers are :mod:`tdlab.theory.icl_minimisers` (on prompt statistics, the numbers of the trainer's own
prediction path :func:`tdlab.train.regression.predict`, so a reference minimises exactly the objective the arms
were trained on); this module keeps each draw on disk (:func:`cache_dir`), keyed by the task and the draw's
settings.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from tdlab.tasks.multimodal import MultiModalPrompts
from tdlab.theory.icl_minimisers import TiedMinimisers, UntiedOptimum, tied_minimisers, untied_minimiser

_VERSION = 3  # the cache key's version: bumped whenever what is computed changes


def cache_dir() -> Path:
    """Where results of expensive reference computations are kept: ``$TDLAB_CACHE`` or
    ``$XDG_CACHE_HOME/tdlab`` (default ``~/.cache/tdlab``)."""
    root = os.environ.get("TDLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tdlab"
    )
    return Path(root)


def _cached(kind: str, key: dict, compute, use_cache: bool):
    """``compute()``, kept on disk under a hash of ``key`` (JSON-ready results only)."""
    text = json.dumps({"v": _VERSION, "kind": kind, **key}, sort_keys=True)
    path = cache_dir() / "icl_reference" / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"
    if use_cache and path.is_file():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    out = compute()
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(out))
            tmp.replace(path)
        except OSError:
            pass
    return out


def _task_key(task: MultiModalPrompts) -> list:
    return [list(task.dims), list(task.norm_range), task.norm_mode, task.zeta]


def finite_context_minimisers(
    task: MultiModalPrompts,
    depths: Sequence[int],
    L: int,
    *,
    n_prompts: int,
    seed: int,
    one_param_start: float,
    two_param_starts: Mapping[int, tuple[float, float]] | None = None,
    use_cache: bool = True,
) -> TiedMinimisers:
    """One replicate of the minimisers of ``l_{n, L}`` for the tied LCA_T reached from the trained arms'
    initialisations (:func:`tdlab.theory.icl_minimisers.tied_minimisers`), cached on disk (:func:`cache_dir`).

    Returns:
        ``{"one": {T: alpha}, "two": {T: (alpha, beta)}}``.
    """
    depths = [int(T) for T in depths]
    starts = {int(T): (float(a), float(b)) for T, (a, b) in (two_param_starts or {}).items()}

    def compute() -> dict:
        got = tied_minimisers(
            task, depths, L, n_prompts=n_prompts, seed=seed, one_param_start=one_param_start, two_param_starts=starts
        )
        return {
            "one": {str(T): v for T, v in got["one"].items()},
            "two": {str(T): list(v) for T, v in got["two"].items()},
        }

    key = {
        "task": _task_key(task),
        "depths": depths,
        "L": int(L),
        "n": int(n_prompts),
        "seed": int(seed),
        "one_start": float(one_param_start),
        "starts": sorted(starts.items()),
    }
    raw = _cached("tied", key, compute, use_cache)
    return {
        "one": {int(T): float(v) for T, v in raw["one"].items()},
        "two": {int(T): (float(v[0]), float(v[1])) for T, v in raw["two"].items()},
    }


def untied_optimum(
    task: MultiModalPrompts,
    T: int,
    L: int,
    *,
    n_prompts: int,
    seed: int,
    max_iter: int = 2000,
    grad_tol: float = 1e-6,
    use_cache: bool = True,
    device: str | torch.device = "cpu",
) -> UntiedOptimum:
    """One replicate of the optimum of ``l_{L}`` for the untied scalar LCA_T of Fig. 3
    (:func:`tdlab.theory.icl_minimisers.untied_minimiser`), cached on disk (:func:`cache_dir`; an entry is kept per
    device kind: a GPU's float64 differs from the CPU's in the last bits only).

    Returns:
        ``{"alpha": [alpha_t], "beta": [beta_t], "grad_norm": g, "iterations": k}``.
    """

    def compute() -> UntiedOptimum:
        return untied_minimiser(
            task, T, L, n_prompts=n_prompts, seed=seed, max_iter=max_iter, grad_tol=grad_tol, device=device
        )

    key = {
        "task": _task_key(task),
        "T": int(T),
        "L": int(L),
        "n": int(n_prompts),
        "seed": int(seed),
        "max_iter": int(max_iter),
        "grad_tol": float(grad_tol),
    }
    kind = torch.device(device).type
    if kind != "cpu":  # the CPU's entries keep their keys
        key["device"] = kind
    return _cached("untied", key, compute, use_cache)

"""Batched gradient flow: integrate ``d theta / dt = -grad L(theta)`` for many initial points at once.

Generic over the loss: an integrator takes a gradient function ``grad_fn(x, *args) -> (N, D)`` and an
``(N, D)`` batch of initial points, and integrates all rows together (one batched gradient call per
stage, so 10^4 trajectories cost about as much Python overhead as one). The landscape of a paper is
supplied by the caller, e.g. :func:`tdlab.theory.markov_landscape.grad_loss` (seed 000, Sec. 4
"GF" and App. A.2 "GF-attn").

Three schemes:

* ``"rk4"``: classical fixed-step Runge-Kutta 4; every row takes the same steps (reference runs,
  energy-conservation checks).
* ``"dopri5"``: Dormand-Prince 5(4), explicit, adaptive, accurate on non-stiff stretches.
* ``"rosenbrock23"``: Shampine-Reichelt ode23s, linearly implicit and L-stable, adaptive. For long
  horizons: near a minimum with large curvature (e.g. the global-minimum manifold at large |e|)
  explicit methods are held at their stability limit for the rest of the run (thousands of
  steps, the step controller keeping the stiff mode at tolerance level so the row never looks
  converged); ode23s damps that mode, the row comes to rest and leaves (``g_tol``).

The adaptive schemes use a *per-row* step size and clock: gradient flows of non-convex losses
mix fast transients (large |theta|) with very slow approach to degenerate critical sets (rate
~ |p+q-1| near the local-minimum line of Thm. 1), so one shared step would be set by the worst row.
Rows that have reached ``t_eval[-1]`` (or come to rest) leave the working set, which is compacted
once a quarter of it has finished.

Per-point data (e.g. a different Markov chain ``(p, q)`` per trajectory) travels in ``args``: every
tensor in ``args`` whose leading dimension is ``N`` is sliced together with the rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "FlowResult",
    "GradCheck",
    "autograd_gradient",
    "check_gradients",
    "gradient_flow",
]

GradFn = Callable[..., torch.Tensor]


@dataclass
class FlowResult:
    """Output of :func:`gradient_flow` for ``N`` trajectories in ``R^D`` saved at ``K`` times.

    Attributes:
        t: ``(K,)`` save times (float64).
        trajectory: ``(K, N, D)`` states at the save times; rows that did not reach a save time
            (iteration budget exhausted) hold NaN there.
        final: ``(N, D)`` last state of each row (``trajectory[-1]`` for finished rows).
        final_t: ``(N,)`` time reached by each row (``t[-1]`` when finished).
        finished: ``(N,)`` bool, row reached ``t[-1]`` (or came to rest, see ``frozen``).
        frozen: ``(N,)`` bool, row came to rest (``|grad| <= g_tol``, adaptive methods) and was held there.
        n_steps: ``(N,)`` accepted steps per row.
        n_rejected: ``(N,)`` rejected steps per row (always 0 for rk4).
        n_grad_calls: number of batched ``grad_fn`` calls.
        n_grad_rows: total rows passed through ``grad_fn`` (the honest cost measure when adaptive).
        final_grad_norm: ``(N,)`` Euclidean norm of the gradient at ``final`` (convergence check).
    """

    t: torch.Tensor
    trajectory: torch.Tensor
    final: torch.Tensor
    final_t: torch.Tensor
    finished: torch.Tensor
    frozen: torch.Tensor
    n_steps: torch.Tensor
    n_rejected: torch.Tensor
    n_grad_calls: int
    n_grad_rows: int
    final_grad_norm: torch.Tensor


def _slice_args(args: tuple[Any, ...], idx: torch.Tensor, n: int) -> tuple[Any, ...]:
    """Rows ``idx`` of every per-row tensor in ``args`` (leading dim ``n``); others pass through."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.ndim >= 1 and a.shape[0] == n:
            out.append(a[idx])
        else:
            out.append(a)
    return tuple(out)


def _check_args(args: tuple[Any, ...], n: int) -> None:
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.ndim >= 1 and a.shape[0] != n and a.numel() != 1:
            raise ValueError(
                f"args[{i}] has leading dim {a.shape[0]}; per-row args need leading dim N={n}"
                " (scalars and 0-d tensors are shared by all rows)"
            )


# Dormand-Prince 5(4) tableau (autonomous system, so the nodes c_i are not needed).
_A: tuple[tuple[float, ...], ...] = (  # row i: the weights of stages 0..i-1 (ragged)
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),  # = 5th-order weights (FSAL)
)
_B5 = _A[6]
_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
_E = tuple(b5 - b4 for b5, b4 in zip((*_B5, 0.0), _B4, strict=True))


def gradient_flow(
    grad_fn: GradFn,
    x0: torch.Tensor,
    t_eval: Sequence[float] | torch.Tensor,
    *,
    args: tuple[Any, ...] = (),
    method: str = "dopri5",
    dt: float = 1e-2,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    h0: float = 1e-3,
    h_max: float = math.inf,
    max_iters: int = 200_000,
    g_tol: float = 0.0,
    num_threads: int | None = 1,
) -> FlowResult:
    """Integrate the gradient flow ``dx/dt = -grad_fn(x, *args)`` for a batch of points.

    Args:
        grad_fn: ``(M, D)`` tensor (and the matching rows of ``args``) -> ``(M, D)`` gradient; must
            act row-wise (row i of the output depends on row i of the input only).
        x0: ``(N, D)`` initial points at ``t = 0``.
        t_eval: ``(K,)`` non-decreasing save times, ``t_eval[0] >= 0``; ``t_eval[-1]`` is the end.
        args: extra arguments for ``grad_fn``; tensors with leading dim ``N`` are per-row.
        method: ``"rk4"`` (fixed step ``<= dt``, exact landing on every save time), ``"dopri5"`` or
            ``"rosenbrock23"`` (adaptive, per-row step, local error per row
            ``||err / (atol + rtol |x|)||_rms <= 1``, exact landing on save times).
        dt: rk4 step (each save interval is split into ``ceil(interval / dt)`` equal steps).
        rtol, atol: adaptive tolerances.
        h0: adaptive initial step.
        h_max: adaptive largest step.
        max_iters: adaptive iteration budget (one iteration = one attempted step of the working set).
        g_tol: adaptive only; a row whose velocity norm is ``<= g_tol`` after an accepted step is at
            rest: it is held at its state for the remaining save times and leaves the working set
            (0 disables). Near a critical set with smallest non-zero curvature ``lam`` the state is
            then within about ``g_tol / lam`` of the true limit; a row started within about
            ``g_tol / mu`` of a critical point with escape rate ``mu`` is held there too.
        num_threads: torch intra-op threads while integrating (restored afterwards); ``None``
            leaves the setting alone. Default 1: the work is thousands of small elementwise ops,
            where OpenMP fork/join and spin-waiting cost more than they save (measured ~7x more CPU
            time with 2 threads on a loaded 2-core machine).
    Returns:
        :class:`FlowResult`.
    """
    x0 = torch.as_tensor(x0)
    if x0.ndim != 2:
        raise ValueError(f"x0 must be (N, D), got shape {tuple(x0.shape)}")
    te = torch.as_tensor(t_eval, dtype=torch.float64).reshape(-1).to(x0.device)
    if te.numel() == 0 or bool((te[1:] < te[:-1]).any()) or float(te[0]) < 0:
        raise ValueError("t_eval must be a non-empty, non-decreasing sequence of times >= 0")
    n = x0.shape[0]
    _check_args(args, n)
    if method not in ("rk4", "dopri5", "rosenbrock23"):
        raise ValueError(f"unknown method {method!r}; use 'rk4', 'dopri5' or 'rosenbrock23'")
    prev_threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        if method == "rk4":
            res = _rk4(grad_fn, x0, te, args, dt)
        else:
            stepper = _Dopri5() if method == "dopri5" else _Rosenbrock23()
            res = _adaptive(stepper, grad_fn, x0, te, args, rtol, atol, h0, h_max, max_iters, g_tol)
        with torch.no_grad():
            ok = torch.isfinite(res.final).all(dim=-1)
            g = torch.full((n,), math.nan, dtype=x0.dtype, device=x0.device)
            if bool(ok.any()):
                idx = ok.nonzero().squeeze(-1)
                g[idx] = grad_fn(res.final[idx], *_slice_args(args, idx, n)).norm(dim=-1)
        res.final_grad_norm = g
    finally:
        torch.set_num_threads(prev_threads)
    return res


def _rk4(grad_fn: GradFn, x0: torch.Tensor, te: torch.Tensor, args: tuple, dt: float) -> FlowResult:
    if not dt > 0:
        raise ValueError("dt must be > 0")
    n, d = x0.shape
    k_save = te.numel()
    traj = torch.empty((k_save, n, d), dtype=x0.dtype, device=x0.device)
    x = x0.clone()
    t_prev = 0.0
    steps = 0
    calls = 0

    def v(y: torch.Tensor) -> torch.Tensor:
        return -grad_fn(y, *args)

    with torch.no_grad():
        for k in range(k_save):
            span = float(te[k]) - t_prev
            m = math.ceil(span / dt - 1e-9) if span > 0 else 0
            if m:
                h = span / m
                for _ in range(m):
                    k1 = v(x)
                    k2 = v(x + (0.5 * h) * k1)
                    k3 = v(x + (0.5 * h) * k2)
                    k4 = v(x + h * k3)
                    x = x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
                steps += m
                calls += 4 * m
            traj[k] = x
            t_prev = float(te[k])
    full = torch.full((n,), steps, dtype=torch.long, device=x0.device)
    return FlowResult(
        t=te,
        trajectory=traj,
        final=x,
        final_t=torch.full((n,), float(te[-1]), dtype=torch.float64, device=x0.device),
        finished=torch.ones(n, dtype=torch.bool, device=x0.device),
        frozen=torch.zeros(n, dtype=torch.bool, device=x0.device),
        n_steps=full,
        n_rejected=torch.zeros_like(full),
        n_grad_calls=calls,
        n_grad_rows=calls * n,
        final_grad_norm=torch.empty(0),
    )


def _repeat_args(args: tuple[Any, ...], reps: int, n: int) -> tuple[Any, ...]:
    """Per-row args repeated ``reps`` times each (row i -> rows i*reps .. i*reps+reps-1)."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.ndim >= 1 and a.shape[0] == n:
            out.append(a.repeat_interleave(reps, dim=0))
        else:
            out.append(a)
    return tuple(out)


class _Dopri5:
    """Dormand-Prince 5(4) step with FSAL; 6 new velocity evaluations per attempted step."""

    order = 5

    def __call__(self, vel, x, f, hs, a):
        ks = [f]
        for i in range(1, 6):
            acc = _A[i][0] * ks[0]
            for j in range(1, i):
                if _A[i][j] != 0.0:
                    acc = acc + _A[i][j] * ks[j]
            ks.append(vel(x + hs * acc, a))
        acc = _B5[0] * ks[0]
        for j in range(2, 6):
            acc = acc + _B5[j] * ks[j]
        x5 = x + hs * acc
        f7 = vel(x5, a)
        ks.append(f7)
        err = _E[0] * ks[0]
        for j in range(2, 7):
            err = err + _E[j] * ks[j]
        return x5, f7, hs * err, 6, 6 * x.shape[0]


class _Rosenbrock23:
    """Shampine-Reichelt ode23s step (SIAM J. Sci. Comput. 18, 1997), autonomous form: an L-stable
    linearly implicit 2nd-order method with a 3rd-order error estimate. The Jacobian of the
    velocity is taken by forward differences, one batched call on ``M * D`` rows. L-stability
    damps stiff components instead of keeping them at the error-tolerance level, so rows that have
    converged onto a stiff minimum actually come to rest (``g_tol``) and stop costing steps."""

    order = 3
    _d = 1.0 / (2.0 + math.sqrt(2.0))
    _e32 = 6.0 + math.sqrt(2.0)

    def __call__(self, vel, x, f, hs, a):
        m, d = x.shape
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        eps = 1.5e-8 * x.abs().clamp_min(1.0)  # ~sqrt(machine eps), relative to |x_j|
        xp = (x.unsqueeze(1) + eye * eps.unsqueeze(1)).reshape(m * d, d)  # row i*d+j: x_i + eps e_j
        fp = vel(xp, _repeat_args(a, d, m)).reshape(m, d, d)  # [i, j, :] = f(x_i + eps_ij e_j)
        jac = ((fp - f.unsqueeze(1)) / eps.unsqueeze(-1)).transpose(1, 2)  # [i, :, j] = df/dx_j
        wi = torch.linalg.inv(eye - (hs * self._d).unsqueeze(-1) * jac)

        def solve(r: torch.Tensor) -> torch.Tensor:
            return torch.einsum("mij,mj->mi", wi, r)

        k1 = solve(f)
        f1 = vel(x + 0.5 * hs * k1, a)
        k2 = solve(f1 - k1) + k1
        xn = x + hs * k2
        f2 = vel(xn, a)
        k3 = solve(f2 - self._e32 * (k2 - f1) - 2.0 * (k1 - f))
        err = (hs / 6.0) * (k1 - 2.0 * k2 + k3)
        return xn, f2, err, 3, m * d + 2 * m


def _adaptive(
    stepper,
    grad_fn: GradFn,
    x0: torch.Tensor,
    te: torch.Tensor,
    args: tuple,
    rtol: float,
    atol: float,
    h0: float,
    h_max: float,
    max_iters: int,
    g_tol: float,
) -> FlowResult:
    n, d = x0.shape
    dev, dt_ = x0.device, x0.dtype
    k_save = te.numel()
    t_end = float(te[-1])
    traj = torch.full((k_save, n, d), math.nan, dtype=dt_, device=dev)
    n_steps = torch.zeros(n, dtype=torch.long, device=dev)
    n_rej = torch.zeros(n, dtype=torch.long, device=dev)
    final = x0.clone()
    final_t = torch.zeros(n, dtype=torch.float64, device=dev)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)
    frozen = torch.zeros(n, dtype=torch.bool, device=dev)
    save_idx = torch.arange(k_save, device=dev).unsqueeze(-1)  # (K, 1)
    q = float(stepper.order)
    # PI controller (Gustafsson): exponents 0.7/q and 0.4/q on this and the previous error; it damps
    # the accept/reject oscillation of explicit steps at their stability limit.
    kI, kP = 0.7 / q, 0.4 / q

    def vel(y: torch.Tensor, a: tuple) -> torch.Tensor:
        return -grad_fn(y, *a)

    with torch.no_grad():
        k0 = int((te <= 0).sum())  # save times at t = 0 hold x0
        if k0:
            traj[:k0] = x0
        if k0 == k_save:
            finished[:] = True
            return FlowResult(te, traj, final, final_t, finished, frozen, n_steps, n_rej, 0, 0, torch.empty(0))

        # Working set: compact copies of the rows still integrating; idx maps them to global rows.
        idx = torch.arange(n, device=dev)
        x = x0.clone()
        t = torch.zeros(n, dtype=torch.float64, device=dev)
        h = torch.full((n,), float(h0), dtype=torch.float64, device=dev)
        e_prev = torch.ones(n, dtype=torch.float64, device=dev)
        k = torch.full((n,), k0, dtype=torch.long, device=dev)
        a = args
        f = vel(x, a)  # FSAL: velocity at x
        calls, rows = 1, n
        done = torch.zeros(n, dtype=torch.bool, device=dev)
        it = 0
        while idx.numel() and it < max_iters:
            it += 1
            live = ~done
            target = te[k]
            remaining = target - t
            hit = h >= remaining
            step = torch.where(hit, remaining, h)
            hs = step.to(dt_).unsqueeze(-1)
            xn, fn, err, c_calls, c_rows = stepper(vel, x, f, hs, a)
            calls += c_calls
            rows += c_rows
            scale = atol + rtol * torch.maximum(x.abs(), xn.abs())
            enorm = (err / scale).pow(2).mean(dim=-1).sqrt().to(torch.float64)
            enorm = torch.where(torch.isfinite(enorm), enorm, torch.full_like(enorm, math.inf))
            accept = (enorm <= 1.0) & live
            en = enorm.clamp_min(1e-10)
            fac = torch.where(accept, 0.9 * en.pow(-kI) * e_prev.pow(kP), 0.9 * en.pow(-1.0 / q))
            h_new = step * fac.clamp(0.2, 10.0)
            # A step shortened to land on a save time says nothing against the longer proposal.
            h = torch.where(accept & hit, torch.maximum(h_new, h), h_new).clamp_max(h_max)
            e_prev = torch.where(accept, en.clamp_min(1e-4), e_prev)

            acc2 = accept.unsqueeze(-1)
            x = torch.where(acc2, xn, x)
            f = torch.where(acc2, fn, f)
            t = torch.where(accept, torch.where(hit, target, t + step), t)
            n_steps[idx] += accept.long()
            n_rej[idx] += (live & ~accept).long()
            saved = accept & hit
            if bool(saved.any()):
                sv = saved.nonzero().squeeze(-1)
                traj[k[sv], idx[sv]] = x[sv]
                k = k + saved.long()
                done = done | (k >= k_save)
            if g_tol > 0:
                # At rest: |dx/dt| <= g_tol. The row is held at x for all remaining save times.
                rest = accept & (k < k_save) & (f.norm(dim=-1) <= g_tol)
                if bool(rest.any()):
                    rs = rest.nonzero().squeeze(-1)
                    g_rows = idx[rs]
                    fill = save_idx >= k[rs].unsqueeze(0)  # (K, R)
                    traj[:, g_rows] = torch.where(fill.unsqueeze(-1), x[rs].unsqueeze(0), traj[:, g_rows])
                    frozen[g_rows] = True
                    k = torch.where(rest, torch.full_like(k, k_save), k)
                    t = torch.where(rest, torch.full_like(t, t_end), t)
                    done = done | rest
            # A row whose step has collapsed (non-finite velocity, blow-up) is given up on.
            done = done | (live & ~accept & (step <= 1e-14 * (1.0 + t.abs())))
            n_done = int(done.sum())
            if n_done and 4 * n_done >= idx.numel():
                dd = done.nonzero().squeeze(-1)
                final[idx[dd]] = x[dd]
                final_t[idx[dd]] = t[dd]
                finished[idx[dd]] = t[dd] >= t_end
                keep = (~done).nonzero().squeeze(-1)
                a = _slice_args(a, keep, idx.numel())
                idx, x, t, h, k, f, e_prev = idx[keep], x[keep], t[keep], h[keep], k[keep], f[keep], e_prev[keep]
                done = done[keep]
            elif n_done:
                # Finished rows wait in the working set until the next compaction; park them on a
                # valid save index so ``te[k]`` stays in range (their steps are masked by ``live``).
                k = k.clamp_max(k_save - 1)
        if idx.numel():
            final[idx] = x
            final_t[idx] = t
            finished[idx] = t >= t_end
    return FlowResult(te, traj, final, final_t, finished, frozen, n_steps, n_rej, calls, rows, torch.empty(0))


def autograd_gradient(loss_fn: Callable[..., torch.Tensor]) -> GradFn:
    """Turn a per-row loss ``loss_fn(x, *args) -> (N,)`` into ``grad_fn(x, *args) -> (N, D)``.

    Rows are independent, so the gradient of ``loss.sum()`` w.r.t. ``x`` is the stack of per-row
    gradients (one backward pass for the whole batch).
    """

    def grad_fn(x: torch.Tensor, *args: Any) -> torch.Tensor:
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(loss_fn(xg, *args).sum(), xg)
        return g

    return grad_fn


@dataclass
class GradCheck:
    """Comparison of two gradients on a batch.

    Attributes:
        abs_err: ``(N,)`` max-abs difference per row.
        rel_err: ``(N,)`` ``abs_err / max(|g_ref|_inf, floor)`` per row.
        max_abs: largest ``abs_err``; max_rel: largest ``rel_err``.
    """

    abs_err: torch.Tensor
    rel_err: torch.Tensor
    max_abs: float
    max_rel: float


def check_gradients(
    loss_fn: Callable[..., torch.Tensor],
    grad_fn: GradFn,
    x: torch.Tensor,
    *args: Any,
    floor: float = 1e-12,
) -> GradCheck:
    """Autograd gradient of ``loss_fn`` (reference) vs ``grad_fn`` (e.g. a closed form) on ``(N, D)``
    points ``x``; see :class:`GradCheck`."""
    g_ref = autograd_gradient(loss_fn)(x, *args)
    with torch.no_grad():
        g = grad_fn(x, *args)
        abs_err = (g - g_ref).abs().amax(dim=-1)
        rel_err = abs_err / g_ref.abs().amax(dim=-1).clamp_min(floor)
    return GradCheck(abs_err, rel_err, float(abs_err.max()), float(rel_err.max()))

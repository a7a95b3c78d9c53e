"""The trainer: determinism, divergence handling, schedule, evaluation cadence, the loss."""

from __future__ import annotations

import math

import pytest
import torch

from tdlab.models.gpt import GPT, GPTConfig
from tdlab.seeding import Purpose, generators, member_seeds
from tdlab.tasks.markov import MarkovChain
from tdlab.train.trainer import DivergenceError, TrainConfig, Trainer, _cosine, auto_chunk, next_token_loss

TASK = MarkovChain(0.5, 0.8)
MODEL = GPTConfig(arch="sec2", d=4, max_len=16)


def _cfg(**kw):
    base = dict(steps=6, batch=4, seq_len=16, eval_every=3, eval_batches=1, log_every=1)
    base.update(kw)
    return TrainConfig(**base)


def _fit(cfg, seeds, build=None):
    return Trainer(cfg, progress=False).fit(build or (lambda s: GPT(MODEL, s)), seeds, TASK)


def test_same_config_and_seed_give_identical_metrics_and_weights():
    seeds = member_seeds(0, 2)
    a, b = _fit(_cfg(), seeds), _fit(_cfg(), seeds)
    assert a.rows == b.rows and len(a.rows) > 0
    for sa, sb in zip(a.states, b.states, strict=True):
        for k in sa:
            assert torch.equal(sa[k], sb[k])
    c = _fit(_cfg(), member_seeds(1, 2))
    assert [r[3] for r in c.rows if r[2] == "test_loss"] != [r[3] for r in a.rows if r[2] == "test_loss"]


class NaNAt(GPT):
    """A GPT whose training forward returns NaN for the member with seed ``bad_seed`` at the
    ``at``-th training step."""

    def __init__(self, cfg, seeds, bad_seed, at):
        super().__init__(cfg, seeds)
        self.bad_seed, self.at, self.calls = bad_seed, at, 0

    def forward(self, tokens):
        out = super().forward(tokens)
        if self.training:
            self.calls += 1
            if self.calls == self.at and self.bad_seed in self.seeds:
                out = out.clone()
                out[self.seeds.index(self.bad_seed)] = float("nan")
        return out


def test_nan_loss_raises_divergence_error_naming_member_and_step_and_keeps_rows():
    seeds = member_seeds(3, 4)
    cfg = _cfg(steps=5, eval_every=2, chunk=2)
    with pytest.raises(DivergenceError) as info:
        _fit(cfg, seeds, lambda s: NaNAt(MODEL, s, bad_seed=seeds[3], at=3))
    err = info.value
    assert (err.member, err.step) == (3, 3)
    assert "member 3" in str(err) and "step 3" in str(err)
    rows = err.result.rows
    # The first chunk (members 0, 1) finished; the second measured up to step 2.
    for m in (0, 1):
        assert sorted(s for s, mm, n, _ in rows if mm == m and n == "test_loss") == [0, 2, 4, 5]
    for m in (2, 3):
        assert sorted(s for s, mm, n, _ in rows if mm == m and n == "test_loss") == [0, 2]
        assert sorted(s for s, mm, n, _ in rows if mm == m and n == "train_loss") == [1, 2]
    assert all(math.isfinite(v) for *_, v in rows)
    assert len(err.result.states) == 4
    # What was measured equals the same members' numbers in a clean run.
    clean = _fit(cfg, seeds)
    clean_rows = {(s, m, n): v for s, m, n, v in clean.rows}
    for s, m, n, v in rows:
        assert clean_rows[(s, m, n)] == v


@pytest.mark.parametrize("steps, min_ratio", [(10, 0.0), (8, 0.1)])
def test_cosine_schedule_start_middle_end(steps, min_ratio):
    cfg = _cfg(steps=steps, min_lr_ratio=min_ratio, lr=2e-3)
    f = _cosine(cfg)
    assert f(0) == pytest.approx(1.0)
    assert f(steps // 2) == pytest.approx(min_ratio + (1 - min_ratio) * 0.5)
    assert f(steps) == pytest.approx(min_ratio)
    for s in range(steps + 1):
        assert f(s) == pytest.approx(min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    # The lr logged after step s is lr * f(s): monotone from lr down to min_lr_ratio * lr.
    res = _fit(cfg, member_seeds(0, 1))
    lrs = dict((s, v) for s, m, n, v in res.rows if n == "lr")
    assert sorted(lrs) == list(range(1, steps + 1))
    for s, v in lrs.items():
        assert v == pytest.approx(2e-3 * f(s))
    assert lrs[steps] == pytest.approx(2e-3 * min_ratio)


def test_warmup_and_constant_schedules():
    f = _cosine(_cfg(steps=10, warmup_steps=4))
    assert [f(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert f(4) == pytest.approx(1.0) and f(7) == pytest.approx(0.5) and f(10) == pytest.approx(0.0)
    g = _cosine(_cfg(steps=10, schedule="constant"))
    assert all(g(s) == 1.0 for s in range(11))


def test_evaluation_at_step_0_every_eval_every_and_last_step():
    res = _fit(_cfg(steps=7, eval_every=3, log_every=2), member_seeds(0, 2))
    for m in (0, 1):
        assert [s for s, mm, n, _ in res.rows if n == "test_loss" and mm == m] == [0, 3, 6, 7]
        assert [s for s, mm, n, _ in res.rows if n == "train_loss" and mm == m] == [2, 4, 6, 7]
    x, v = res.series("test_loss", 1)
    assert x == [0, 3, 6, 7] and len(v) == 4


def test_step_0_evaluation_is_the_untrained_models_loss_on_the_members_eval_stream():
    seeds = member_seeds(9, 3)
    cfg = _cfg(eval_batches=2)
    res = _fit(cfg, seeds)
    model = GPT(MODEL, seeds)
    gens = generators(seeds, Purpose.EVAL_DATA)
    with torch.no_grad():
        tot = torch.zeros(3, dtype=torch.float64)
        for _ in range(2):
            x = TASK.sample(gens, cfg.batch, cfg.seq_len + 1)
            tot += next_token_loss(model(x[..., :-1]), x[..., 1:]).double()
    got = [v for s, m, n, v in sorted(res.rows) if n == "test_loss" and s == 0]
    assert got == pytest.approx((tot / 2).tolist(), rel=1e-6)
    # A sigma = 0.02 init predicts ~(1/2, 1/2): the untrained loss is ln 2 to within a few 1e-3.
    assert all(abs(v - math.log(2)) < 5e-3 for v in got)


def test_next_token_loss_equals_a_manual_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 5, 6, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 6, (3, 4, 5), generator=g)
    manual = torch.zeros(3, 5, dtype=torch.float64)
    for e in range(3):
        for b in range(4):
            for t in range(5):
                z = logits[e, b, t]
                lse = math.log(sum(math.exp(float(v)) for v in z))
                manual[e, t] += (lse - float(z[targets[e, b, t]])) / 4
    torch.testing.assert_close(next_token_loss(logits, targets, reduce_positions=False), manual)
    torch.testing.assert_close(next_token_loss(logits, targets), manual.mean(1))
    # The sec2 head's logits (0, z) give the Bernoulli log loss of sigmoid(z).
    z = torch.tensor([[[[0.0, 1.3], [0.0, -0.4]]]], dtype=torch.float64)
    y = torch.tensor([[[1, 0]]])
    s = torch.sigmoid(torch.tensor([1.3, -0.4], dtype=torch.float64))
    expected = -(torch.log(s[0]) + torch.log(1 - s[1])) / 2
    torch.testing.assert_close(next_token_loss(z, y)[0], expected)


def test_per_member_gradient_clipping():
    model = GPT(MODEL, member_seeds(0, 2))
    for p in model.parameters():
        p.grad = torch.ones_like(p)
        p.grad[1] *= 1e-4  # member 1's gradient norm is far below the threshold
    norms = [math.sqrt(sum(p.grad[e].pow(2).sum().item() for p in model.parameters())) for e in (0, 1)]
    tr = Trainer(_cfg(grad_clip=1.0), progress=False)
    tr._clip(model)
    after = [math.sqrt(sum(p.grad[e].pow(2).sum().item() for p in model.parameters())) for e in (0, 1)]
    assert norms[0] > 1 and after[0] == pytest.approx(1.0, rel=1e-4)
    assert after[1] == pytest.approx(norms[1], rel=1e-6)


def test_auto_chunk():
    # equal chunks: as many as the bound needs, sizes within one
    for members in range(1, 40):
        for bound_tokens in (1, 3, 7, 11, 64):
            c = auto_chunk(members, 1, (1 << 17) // bound_tokens, "cpu")
            n = -(-members // min(members, bound_tokens))
            assert c <= bound_tokens and -(-members // c) == n and c * n - members < n
    assert auto_chunk(8, 16, 256, "cpu") == 8
    assert auto_chunk(8, 16, 1024, "cpu") == 8
    assert auto_chunk(20, 16, 2048, "cpu") == 4
    assert auto_chunk(5, 64, 4096, "cpu") == 1
    assert auto_chunk(64, 16, 4096, "cuda") == 64
    # wide outputs: a chunk's logits, softmax and gradient within CACHE_BYTES (32 MB)
    assert auto_chunk(8, 32, 64, "cpu", out_width=5003) == 1  # 123 MB a member
    assert auto_chunk(24, 16, 150, "cpu", out_width=101) == 8  # 2.9 MB a member: at most 11, in 3 equal chunks
    assert auto_chunk(8, 16, 256, "cpu", out_width=2) == 8
    assert auto_chunk(8, 32, 64, "cuda", out_width=5003) == 8
    # a large activation that is not an output: a chunk's copies within CACHE_BYTES
    assert auto_chunk(8, 64, 33, "cpu", member_bytes=64 * 2 * 16 * 28 * 28 * 4) == 4  # 6.4 MB a member: 5, 2 chunks
    assert auto_chunk(3, 256, 33, "cpu", member_bytes=256 * 2 * 16 * 28 * 28 * 4) == 1  # 25.7 MB a member
    assert auto_chunk(2, 64, 33, "cpu", member_bytes=1 << 20) == 2
    assert auto_chunk(8, 64, 33, "cuda", member_bytes=1 << 30) == 8


def test_markov_init_numbers_are_those_of_the_trainer_before_objectives_and_data_regimes():
    """The objective / data-regime refactor changes no number: a markov-init-style fit (Sec. 2 model,
    p=0.5, q=0.8, root seed 0) reproduces the losses and weights recorded with tdlab 57b60f7, the
    commit before it (float32 arithmetic: equal to 1e-5, identical on the machine that recorded them)."""
    cfg = TrainConfig(steps=40, batch=4, seq_len=32, eval_every=20, eval_batches=2, log_every=10)
    model = GPTConfig(d=8, max_len=32)
    res = Trainer(cfg, progress=False).fit(lambda s: GPT(model, s), member_seeds(0, 3), MarkovChain(0.5, 0.8))
    final = {(m, n): v for s, m, n, v in res.rows if s == 40}
    recorded = {
        "train_loss": [0.6902578473091125, 0.6908420324325562, 0.6898119449615479],
        "test_loss": [0.6901467740535736, 0.6909642219543457, 0.6901048421859741],
    }
    for name, values in recorded.items():
        assert [final[(m, name)] for m in range(3)] == pytest.approx(values, rel=1e-5, abs=0)
    sums = [float(v.double().sum()) for v in res.states[0].values()][:6]
    assert sums == pytest.approx(
        [
            0.024449251342957723,
            -0.02310882695019245,
            -0.25030857710225973,
            -0.22252501637558453,
            0.20719857087897253,
            -0.3110890961252153,
        ],
        rel=1e-5,
        abs=1e-7,
    )

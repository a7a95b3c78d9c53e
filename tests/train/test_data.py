"""Data regimes: a stream of fresh samples, and a fixed data set per member in shuffled epochs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tdlab.seeding import member_seeds
from tdlab.train.data import FixedDataset, steps_for
from tdlab.train.objectives import LastPosition, MaskedTokens
from tdlab.train.trainer import TrainConfig, Trainer

V, L = 8, 3


def make(gen: torch.Generator, device="cpu", n=40, n_test=16):
    """Label = the first token: learnable from the sequence, different data per generator."""

    def split(k):
        tokens = torch.randint(0, V, (k, L), generator=gen)
        return {"tokens": tokens, "label": tokens[:, 0].clone()}

    return {"train": split(n), "test": split(n_test), "probe": split(5)}


class BagModel(nn.Module):
    """A tiny ensemble model: logits = (sum over positions of a (token, position) embedding) W, pooled
    to ``(E, B, V)`` like Emb-MLP; member e from seed e."""

    def __init__(self, seeds):
        super().__init__()
        self.seeds = list(seeds)
        gens = [torch.Generator().manual_seed(s % 2**31) for s in seeds]
        self.emb = nn.Parameter(torch.stack([torch.randn(V * L, 6, generator=g) * 0.3 for g in gens]))
        self.W = nn.Parameter(torch.stack([torch.randn(6, V, generator=g) * 0.3 for g in gens]))

    def forward(self, tokens):
        E = tokens.shape[0]
        idx = tokens + V * torch.arange(tokens.shape[-1])
        x = torch.stack([self.emb[e][idx[e]] for e in range(E)]).sum(2)  # (E, B, 6)
        return torch.einsum("ebd,edv->ebv", x, self.W)

    def member_state(self, e):
        return {k: v[e].detach().clone() for k, v in self.state_dict().items()}


def test_an_epoch_visits_every_item_once_in_a_member_specific_order():
    data = FixedDataset(make, batch=8).bind(member_seeds(0, 2), "cpu")
    assert data.steps_per_epoch == 5 and steps_for(3, 40, 8) == 15
    seen = torch.cat([data.train_sample(step, [])["tokens"] for step in range(1, 6)], dim=1)  # (E, 40, L)
    for e in range(2):
        rows = {tuple(r) for r in seen[e].tolist()}
        assert sorted(seen[e].tolist()) == sorted(data.splits["train"]["tokens"][e].tolist()) and len(rows) > 1
    assert not torch.equal(data.epoch_order(0)[0], data.epoch_order(1)[0])  # reshuffled every epoch
    assert not torch.equal(data.epoch_order(0)[0], data.epoch_order(0)[1])  # and per member
    again = FixedDataset(make, batch=8).bind(member_seeds(0, 2), "cpu")
    assert torch.equal(again.train_sample(7, [])["tokens"], data.train_sample(7, [])["tokens"])


def test_a_members_data_do_not_depend_on_its_neighbours_and_can_be_shared():
    seeds = member_seeds(1, 3)
    both = FixedDataset(make, batch=8).bind(seeds, "cpu")
    alone = FixedDataset(make, batch=8).bind(seeds[2:], "cpu")
    assert torch.equal(both.splits["train"]["tokens"][2], alone.splits["train"]["tokens"][0])
    assert torch.equal(both.train_sample(3, [])["label"][2], alone.train_sample(3, [])["label"][0])
    shared = FixedDataset(make, batch=8, data_seeds={seeds[1]: seeds[0]}).bind(seeds, "cpu")
    assert torch.equal(shared.splits["train"]["tokens"][0], shared.splits["train"]["tokens"][1])


def test_a_data_set_is_drawn_on_the_cpu_and_moved_so_every_device_gets_the_same_data():
    seen = []

    def cpu_only(gen, device="cpu"):
        seen.append((gen.device.type, device))
        return make(gen, device)

    on_meta = FixedDataset(cpu_only, batch=8).bind(member_seeds(0, 2), "meta")  # a device that is not the CPU
    assert seen == [("cpu", "cpu")] * 2  # the maker never sees the target device (randperm refuses a GPU generator)
    assert all(t.device.type == "meta" for split in on_meta.splits.values() for t in split.values())
    on_cpu = FixedDataset(make, batch=8).bind(member_seeds(0, 2), "cpu")
    assert on_meta.splits["train"]["tokens"].shape == on_cpu.splits["train"]["tokens"].shape == (2, 40, L)


def test_evaluation_covers_each_split_in_full_or_up_to_its_limit():
    data = FixedDataset(make, batch=8, eval_splits=("test", "probe"), eval_batch=6).bind(member_seeds(0, 2), "cpu")
    got = {}
    for split, sample in data.eval_samples([]):
        got.setdefault(split, []).append(sample["tokens"].shape[1])
    assert got == {"test": [6, 6, 4], "probe": [5]}
    limited = FixedDataset(make, batch=8, eval_limit=10, eval_batch=6).bind(member_seeds(0, 2), "cpu")
    assert [s["tokens"].shape[1] for _, s in limited.eval_samples([])] == [6, 4]


def test_bad_data_sets_are_refused():
    with pytest.raises(ValueError, match="eval_splits"):
        FixedDataset(make, batch=8, eval_splits=("dev",)).bind([1], "cpu")
    with pytest.raises(ValueError, match="fewer than one batch"):
        FixedDataset(make, batch=64).bind([1], "cpu")
    with pytest.raises(ValueError, match="'train' split"):
        FixedDataset(lambda g, d: {"x": make(g)["test"]}, batch=4).bind([1], "cpu")
    with pytest.raises(ValueError, match="prepare_once"):
        FixedDataset(make, batch=8, prepare_once=True)


def test_masks_drawn_once_are_the_same_every_epoch():
    def docs(gen, device="cpu"):
        return {k: {"tokens": torch.randint(1, 9, (16, 20), generator=gen)} for k in ("train", "test")}

    obj = MaskedTokens(vocab=9, p_m=0.3)
    data = FixedDataset(docs, batch=16, prepare_once=True, objective=obj).bind([5], "cpu")
    a, b = data.train_sample(1, []), data.train_sample(2, [])  # one batch per epoch: two epochs
    order = data.epoch_order(0)[0], data.epoch_order(1)[0]
    inv = [torch.argsort(o) for o in order]
    assert torch.equal(a["inputs"][0][inv[0]], b["inputs"][0][inv[1]])  # same item, same corruption
    assert "weights" in a and bool((a["weights"] > 0).any())


def test_trainer_learns_a_fixed_data_set_and_reports_each_split():
    seeds = member_seeds(2, 2)
    cfg = TrainConfig(
        steps=steps_for(20, 40, 8), batch=8, lr=0.05, schedule="constant", weight_decay=0.0, eval_every=25, log_every=5
    )
    data = FixedDataset(make, batch=8, eval_splits=("test", "probe"))
    res = Trainer(cfg, progress=False, objective=LastPosition()).fit(BagModel, seeds, data)
    names = {r[2] for r in res.rows}
    assert {"test_loss", "test_acc", "probe_loss", "probe_acc", "train_loss"} <= names
    _, acc = res.series("test_acc", 0)
    _, loss = res.series("test_loss", 0)
    assert loss[-1] < 0.5 * loss[0] and acc[-1] > 0.9  # label = first token is learnt from 40 items


def test_fixed_data_set_fit_resumes_mid_epoch_with_the_same_numbers(tmp_path):
    seeds = member_seeds(3, 2)
    cfg = TrainConfig(steps=12, batch=8, lr=0.05, eval_every=4, log_every=2, checkpoint_every=7)
    data = lambda: FixedDataset(make, batch=8)  # noqa: E731
    full = Trainer(cfg, progress=False, objective=LastPosition()).fit(BagModel, seeds, data())

    class Stop(Exception):
        pass

    calls = {"n": 0}

    class Stopping(BagModel):
        def forward(self, tokens):
            if self.training:
                calls["n"] += 1
                if calls["n"] == 9:  # after the step-7 checkpoint, mid-way through epoch 2
                    raise Stop
            return super().forward(tokens)

    ck = tmp_path / "ck.json"
    with pytest.raises(Stop):
        Trainer(cfg, progress=False, checkpoint=ck, objective=LastPosition()).fit(Stopping, seeds, data())
    resumed = Trainer(cfg, progress=False, checkpoint=ck, objective=LastPosition()).fit(BagModel, seeds, data())
    assert resumed.rows == full.rows
    for a, b in zip(resumed.states, full.states, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_probes_and_snapshots_are_recorded_and_survive_a_resume(tmp_path):
    """Probes give rows at step 0, every probe_every steps and the end; snapshots keep each member's
    parameters after the named steps, also across an interruption."""
    seeds = member_seeds(4, 2)
    norm = lambda m: {"emb_norm": m.emb.detach().flatten(1).norm(dim=1)}  # noqa: E731
    kw = dict(objective=LastPosition(), probes=[norm], probe_every=4, snapshot_steps=[0, 5, 9, 99])
    cfg = TrainConfig(steps=10, batch=8, lr=0.05, eval_every=5, log_every=5, checkpoint_every=6)
    full = Trainer(cfg, progress=False, **kw).fit(BagModel, seeds, FixedDataset(make, batch=8))
    steps, values = full.series("emb_norm", 1)
    assert steps == [0, 4, 8, 10] and values[0] > 0
    assert sorted(full.snapshots) == [0, 5, 9] and len(full.snapshots[5]) == 2
    assert torch.equal(full.snapshots[0][1]["emb"], BagModel(seeds).member_state(1)["emb"])
    assert values[-1] == pytest.approx(float(full.states[1]["emb"].norm()))

    class Stop(Exception):
        pass

    class Stopping(BagModel):
        calls = 0

        def forward(self, tokens):
            if self.training:
                Stopping.calls += 1
                if Stopping.calls == 8:
                    raise Stop
            return super().forward(tokens)

    ck = tmp_path / "ck.json"
    with pytest.raises(Stop):
        Trainer(cfg, progress=False, checkpoint=ck, **kw).fit(Stopping, seeds, FixedDataset(make, batch=8))
    resumed = Trainer(cfg, progress=False, checkpoint=ck, **kw).fit(BagModel, seeds, FixedDataset(make, batch=8))
    assert resumed.rows == full.rows and sorted(resumed.snapshots) == [0, 5, 9]
    for step in (0, 5, 9):
        assert all(
            torch.equal(a[k], b[k])
            for a, b in zip(resumed.snapshots[step], full.snapshots[step], strict=True)
            for k in a
        )


@pytest.mark.parametrize("optimizer,momentum", [("sgd", 0.9), ("adamw", 0.0)])
def test_member_learning_rates_equal_members_trained_alone(optimizer, momentum):
    """A per-member learning rate scales each member's step exactly: the ensemble equals its members
    trained one by one with their own rates (SGD with momentum; AdamW with weight decay)."""
    seeds = member_seeds(5, 3)
    rates = {seeds[0]: 0.01, seeds[1]: 0.05, seeds[2]: 0.2}
    cfg = TrainConfig(
        steps=6, batch=8, lr=0.05, optimizer=optimizer, momentum=momentum, weight_decay=0.1, eval_every=3, log_every=3
    )
    together = Trainer(cfg, progress=False, objective=LastPosition(), member_lr=rates).fit(
        BagModel, seeds, FixedDataset(make, batch=8)
    )
    for i, s in enumerate(seeds):
        alone = Trainer(cfg.updated({"lr": rates[s]}), progress=False, objective=LastPosition()).fit(
            BagModel, [s], FixedDataset(make, batch=8)
        )
        for k in alone.states[0]:
            torch.testing.assert_close(together.states[i][k], alone.states[0][k], rtol=1e-5, atol=1e-6)


def test_rebinding_to_another_chunk_of_members_does_not_reuse_the_previous_shuffle():
    """The trainer binds one FixedDataset to each chunk in turn: the second chunk's epoch-0 batches
    are its own members' shuffle, not the cached one of the chunk before (same epoch number)."""
    seeds = member_seeds(6, 3)
    data = FixedDataset(make, batch=8)
    data.bind(seeds[:2], "cpu")
    data.train_sample(1, [])
    data.bind(seeds[2:], "cpu")
    alone = FixedDataset(make, batch=8).bind(seeds[2:], "cpu")
    assert torch.equal(data.train_sample(1, [])["tokens"], alone.train_sample(1, [])["tokens"])

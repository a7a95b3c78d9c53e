"""The anchor-function generator (seed 001 §3.1–3.2, §4.5) against a slow per-sequence check written
from the definitions: block place and type, noise in Z, labels, one memory label per (z_p, a)
everywhere, test = exactly M, per-tuple counts, F_mem,2 and group labels in range; each sequence's memory group, the stacked training sets, Fig. 8's
examples and chance accuracy on D_rsn,test; bad input."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tdlab.config import ConfigError, validate_config
from tdlab.tasks.anchors import (
    KIND_MEM,
    KIND_RSN_TRAIN,
    Anchors,
    AnchorsConfig,
    anchor_splits,
    chance_accuracy,
    example_sequences,
    label_marginal_losses,
    memory_splits,
    split_label_laws,
    training_sets,
)

CFG = AnchorsConfig()
Z = set(range(21, 121))
MEM, RSN = set(range(1, 11)), set(range(11, 21))
M = {(11, 13), (13, 11)}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def slow_check(data: dict, cfg: AnchorsConfig, mem_labels: dict) -> Counter:
    """Walk every sequence as §3.1 defines it; return the count per (kind, anchor tuple).

    ``mem_labels`` collects y^(z_p, a) across calls: a pair seen twice must carry one label."""
    Zs = set(range(cfg.key_min, cfg.key_max + 1))
    mem = set(range(cfg.mem_min, cfg.mem_max + 1))
    rsn = set(range(cfg.rsn_min, cfg.rsn_max + 1))
    counts: Counter = Counter()
    for row, y, kind, kp in zip(
        data["tokens"].tolist(), data["label"].tolist(), data["kind"].tolist(), data["key_pos"].tolist(), strict=True
    ):
        assert len(row) == cfg.L
        anchor_pos = [i for i, t in enumerate(row) if t not in Zs]
        # one block of q consecutive anchors, the key right before it, p in 1..L-q (1-based)
        assert len(anchor_pos) == cfg.q and anchor_pos == list(range(anchor_pos[0], anchor_pos[0] + cfg.q))
        p = anchor_pos[0]  # 0-based index of the first anchor = 1-based index of z_p
        assert cfg.p_min <= p <= cfg.p_hi and kp == p - 1
        z, a = row[p - 1], tuple(row[p : p + cfg.q])
        assert z in Zs and all(row[i] in Zs for i in range(cfg.L) if i not in anchor_pos)
        if cfg.mix != "memory" and set(a) <= rsn:  # (memory-only runs may reuse 11..20 as memory anchors)
            assert y == z + sum(a)
            assert kind == (2 if a in set(cfg.test_tuples) else 1)
        else:
            assert set(a) <= mem and kind == 0  # no mixed-type tuples
            assert mem_labels.setdefault((z, a), y) == y
        counts[(kind, a)] += 1
    return counts


def test_train_split_against_slow_check():
    task = Anchors(CFG)
    gen = _gen(3)
    n = 198 * 20 + 7
    data = task.dataset(gen, n)
    labels: dict = {}
    counts = slow_check(data, CFG, labels)
    assert sum(counts.values()) == n
    tuples = {a for _, a in counts}
    assert all(k != 2 for k, _ in counts) and not (tuples & M)
    assert len(tuples) == 198  # 100 memory + 98 reasoning-train tuples
    assert set(counts.values()) <= {20, 21} and sum(v == 21 for v in counts.values()) == 7
    assert all(labels[(z, a)] in Z for (z, a) in labels)  # F_mem,1: y ~ U(Z)
    # every key position 1..L-q occurs, keys and noise cover Z
    assert set(data["key_pos"].tolist()) == set(range(CFG.L - CFG.q))
    # the same member seed gives the same memory labels in another split and another call
    gen2 = _gen(3)
    gen2.manual_seed(3)
    slow_check(task.dataset(gen2, 3000, "mem"), CFG, labels)
    assert torch.equal(task.memory_table(_gen(3)), task.memory_table(3))


def test_test_split_is_exactly_M():
    task = Anchors(CFG)
    data = task.dataset(_gen(0), 1000, "test_rsn")
    counts = slow_check(data, CFG, {})
    assert {a for _, a in counts} == M and set(counts.values()) == {500}
    assert set(data["kind"].tolist()) == {2}
    rt = slow_check(task.dataset(_gen(0), 980, "rsn_train"), CFG, {})
    assert len(rt) == 98 and set(rt.values()) == {10}


def test_deterministic_and_member_seeds_differ():
    task = Anchors(CFG)
    a, b, c = task.dataset(_gen(5), 500), task.dataset(_gen(5), 500), task.dataset(_gen(6), 500)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["tokens"], c["tokens"])
    assert not torch.equal(task.memory_table(5), task.memory_table(6))


def test_fixed_key_position_and_emb_mlp_view():
    cfg = AnchorsConfig(p_min=3, p_max=3)
    data = Anchors(cfg).dataset(_gen(1), 400)
    slow_check(data, cfg, {})
    assert set(data["key_pos"].tolist()) == {2}
    view = Anchors.emb_mlp_view(data)
    assert view.shape == (400, 3)
    assert torch.equal(view[:, 0], data["key"]) and torch.equal(view[:, 1:], data["anchors"])
    # L = q + 1: the Emb-MLP task itself (p = 1, no noise)
    d3 = Anchors(AnchorsConfig(L=3)).dataset(_gen(1), 300)
    assert torch.equal(Anchors.emb_mlp_view(d3), d3["tokens"])


def test_window_labels_in_range():
    cfg = AnchorsConfig(memory_labels="window")
    task = Anchors(cfg)
    data = task.dataset(_gen(2), 4000, "mem")
    labels: dict = {}
    slow_check(data, cfg, labels)
    for (z, a), y in labels.items():
        assert z - sum(a) <= y <= z + sum(a)
    tab = task.memory_table(2)
    S = task.mem_tuples.sum(1)[None, :]
    lo, hi = task.keys[:, None] - S, task.keys[:, None] + S
    assert bool(((tab >= lo) & (tab <= hi)).all())
    assert bool((tab == lo).any()) and bool((tab == hi).any())  # both ends reachable


@pytest.mark.parametrize("ranges", ["nested", "disjoint"])
def test_group_labels_in_range(ranges):
    cfg = AnchorsConfig(mix="memory", mem_max=20, memory_groups=4, group_ranges=ranges)
    task = Anchors(cfg)
    data = task.dataset(_gen(4), 3000)
    labels: dict = {}
    counts = slow_check(data, cfg, labels)
    assert len(counts) == 4 * 25  # tuples within one group of 5 anchors
    for (_z, a), y in labels.items():
        g = (a[0] - 1) // 5
        assert all((x - 1) // 5 == g for x in a)
        lo = 30 if ranges == "nested" else 30 + 20 * g
        assert lo <= y <= 29 + 20 * (g + 1)
    assert task.group_range(3) == ((30, 109) if ranges == "nested" else (90, 109))


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"q": 9}, "q=9"),
        ({"key_min": 15}, "disjoint"),
        ({"rsn_min": 5, "rsn_max": 14}, "disjoint"),
        ({"test_tuples": [[1, 3]]}, "test_tuples"),
        ({"test_tuples": [[11, 13, 12]]}, "test_tuples"),
        ({"d_vob": 150}, "d_vob"),
        ({"p_min": 8}, "p_min"),
        ({"memory_groups": 3}, "memory_groups"),
        ({"memory_labels": "window", "key_min": 15, "mix": "memory"}, "window"),
        ({"n_train": 0}, "n_train"),
    ],
)
def test_bad_input_names_the_field(bad, field):
    with pytest.raises(ValidationError, match=field):
        AnchorsConfig(**bad)
    with pytest.raises(ConfigError, match=field):
        validate_config(AnchorsConfig, bad)


def test_bad_split():
    with pytest.raises(ValueError, match="split"):
        Anchors(CFG).dataset(_gen(0), 10, "heldout")
    with pytest.raises(ValueError, match="no anchor tuples"):
        Anchors(AnchorsConfig(mix="memory")).dataset(_gen(0), 10, "test_rsn")


def test_splits_for_a_fixed_dataset():
    cfg = AnchorsConfig(n_train=198 * 5 + 3, n_test=100)
    task = Anchors(cfg)
    sizes = None
    for seed in (0, 1):
        sp = task.splits(_gen(seed))
        assert set(sp) == {"train", "mem", "rsn_train", "test"}
        labels: dict = {}
        slow_check(sp["train"], cfg, labels)
        slow_check(sp["mem"], cfg, labels)  # the same memory labels
        assert set(sp["mem"]["kind"].tolist()) == {0} and set(sp["rsn_train"]["kind"].tolist()) == {1}
        assert len(sp["mem"]["label"]) + len(sp["rsn_train"]["label"]) == cfg.n_train
        assert {tuple(a) for a in sp["test"]["anchors"].tolist()} == M
        now = {k: len(v["label"]) for k, v in sp.items()}
        assert sizes is None or now == sizes  # members stack: equal split sizes
        sizes = now
    assert sizes["mem"] == 5 * 100 + 3  # the 3 extra sequences go to the first (memory) tuples
    assert set(Anchors(AnchorsConfig(mix="memory", n_train=300)).splits(_gen(0))) == {"train", "mem"}


def test_split_label_laws_are_the_populations_label_laws():
    task = Anchors(AnchorsConfig(key_min=21, key_max=30, n_train=600, n_test=40))
    laws = split_label_laws(task)
    assert sorted(laws) == ["mem", "rsn_train", "test_rsn"]
    # the memory law is U(Z) (F_mem,1, averaged over the table's draw); every law sums to one
    assert laws["mem"][21:31] == pytest.approx([0.1] * 10)
    assert all(law.sum() == pytest.approx(1.0) for law in laws.values())
    assert laws["test_rsn"][45:55] == pytest.approx([0.1] * 10)  # z + 24 for the tuples of M
    # reasoning-train: z + a1 + a2 over the training tuples, each tuple weighing the same
    want = np.zeros(task.cfg.d_vob)
    for t in task.rsn_train_tuples.tolist():
        want[np.arange(21, 31) + sum(t)] += 0.1 / len(task.rsn_train_tuples)
    np.testing.assert_allclose(laws["rsn_train"], want)


def test_anchor_splits_bound_the_evaluation_sets_and_view_the_inputs():
    task = Anchors(AnchorsConfig(key_min=21, key_max=30, n_train=500, n_test=40))
    g = torch.Generator().manual_seed(3)
    out = anchor_splits(task, 500, 50, 40)(g)
    assert sorted(out) == ["mem", "rsn_train", "test", "train"]
    full = task.dataset(torch.Generator().manual_seed(3), 500, "train")
    assert torch.equal(out["train"]["tokens"], full["tokens"]) and torch.equal(out["train"]["label"], full["label"])
    for split, kind in (("mem", KIND_MEM), ("rsn_train", KIND_RSN_TRAIN)):
        rows = full["kind"] == kind
        assert torch.equal(out[split]["tokens"], full["tokens"][rows][:50])
        assert torch.equal(out[split]["label"], full["label"][rows][:50])
    assert out["test"]["tokens"].shape == (40, task.cfg.L)
    mlp = anchor_splits(task, 500, 50, 40, view=Anchors.emb_mlp_view)(torch.Generator().manual_seed(3))
    assert torch.equal(mlp["train"]["tokens"], Anchors.emb_mlp_view(full)) and mlp["train"]["tokens"].shape[1] == 3
    reasoning_only = Anchors(AnchorsConfig(key_min=21, key_max=30, mix="reasoning", n_train=100, n_test=10))
    with pytest.raises(ValueError, match="no mem sequences"):
        anchor_splits(reasoning_only, 100, 10, 10)(torch.Generator().manual_seed(0))


def test_memory_splits_are_the_training_set_and_its_first_sequences():
    task = Anchors(AnchorsConfig(mix="memory", mem_max=20, memory_groups=4, n_train=600))
    d = memory_splits(task, 600, 60)(torch.Generator().manual_seed(3))
    assert sorted(d) == ["mem", "train"]
    full = task.dataset(torch.Generator().manual_seed(3), 600, "train")  # drawn alone from the same seed
    assert torch.equal(d["train"]["tokens"], full["tokens"]) and torch.equal(d["train"]["label"], full["label"])
    assert d["train"]["tokens"].shape == (600, 9)
    assert torch.equal(d["mem"]["tokens"], full["tokens"][:60]) and torch.equal(d["mem"]["label"], full["label"][:60])


def test_label_marginal_losses_match_an_empirical_count_over_generated_data():
    task = Anchors(AnchorsConfig(key_min=21, key_max=30, n_train=600, n_test=40))
    n = 200_000
    g = torch.Generator().manual_seed(0)
    train = task.dataset(g, n, "train", table=None)
    test = task.dataset(g, n // 4, "test_rsn")
    # memory labels come from one drawn table: average the empirical law over several tables
    mem = [task.dataset(torch.Generator().manual_seed(s), n // 10, "mem")["label"] for s in range(20)]
    marg = Counter(train["label"][train["kind"] == KIND_RSN_TRAIN].tolist())
    n_rsn = int((train["kind"] == KIND_RSN_TRAIN).sum())
    mem_all = torch.cat(mem).tolist()
    n_mem_share = len(task.mem_tuples) / (len(task.mem_tuples) + len(task.rsn_train_tuples))
    p = {y: (1 - n_mem_share) * c / n_rsn for y, c in marg.items()}
    for y, c in Counter(mem_all).items():
        p[y] = p.get(y, 0.0) + n_mem_share * c / len(mem_all)
    ce = {
        "rsn_train": np.mean([-math.log(p[y]) for y in train["label"][train["kind"] == KIND_RSN_TRAIN].tolist()]),
        "mem": np.mean([-math.log(p[y]) for y in mem_all]),
        "test": np.mean([-math.log(p[y]) for y in test["label"].tolist()]),
    }
    got = label_marginal_losses(task)
    for split, want in ce.items():
        assert got[split] == pytest.approx(want, abs=0.02), split
    # a model that knows only the marginal scores exactly this loss; one that knows more scores less
    assert got["mem"] > math.log(10)  # log N_Z: the loss of U(Z) on memory sequences


def test_memory_group_is_the_group_the_task_gave_each_tuple():
    task = Anchors(AnchorsConfig(mix="memory", mem_max=20, memory_groups=4, d_vob=200))
    tuples = torch.as_tensor([list(a) for a in task.mem_tuples])
    assert torch.equal(task.memory_group(tuples[:, 0]), task.mem_groups)
    assert torch.equal(task.memory_group(tuples[:, 1]), task.mem_groups)  # every anchor of a tuple: one group


def test_training_sets_stack_each_generators_first_draw_cut_to_first():
    task = Anchors(CFG)
    got = training_sets(task, [_gen(1), _gen(2)], 300, ("tokens", "label", "kind"), 50)
    for e, seed in enumerate((1, 2)):
        d = task.dataset(_gen(seed), 300, "train")
        for k in ("tokens", "label", "kind"):
            assert torch.equal(got[k][e], d[k][:50]), k
    full = training_sets(task, [_gen(1)], 300, ("tokens",))
    assert full["tokens"].shape == (1, 300, CFG.L) and set(full) == {"tokens"}
    make = anchor_splits(task, 300, 10, 10)(_gen(1))  # the fixed data set trains on the very same sequences
    assert torch.equal(full["tokens"][0], make["train"]["tokens"])


def test_example_sequences_and_chance_accuracy():
    task = Anchors(CFG)
    ex = example_sequences(task, 7, per_kind=3)
    assert set(ex) == {"memory", "reasoning"}
    assert (ex["memory"]["kind"] == KIND_MEM).all() and (ex["reasoning"]["kind"] == KIND_RSN_TRAIN).all()
    assert ex["memory"]["tokens"].shape == (3, CFG.L)
    again = example_sequences(task, 7, per_kind=3)
    assert torch.equal(again["reasoning"]["tokens"], ex["reasoning"]["tokens"])  # drawn from the seed alone
    assert chance_accuracy(CFG) == pytest.approx(1 / len(Z))  # 1/N_Z: Z = 21..120


def test_token_classes_are_the_keys_and_the_anchors_the_tuples_use():
    task = Anchors(CFG)
    ids = task.token_classes()
    assert ids["key"] == task.keys.tolist() and set(ids["key"]) == Z
    assert set(ids["memory"]) == {int(a) for a in task.mem_tuples.flatten()} == MEM
    assert set(ids["reasoning"]) == {int(a) for a in task.rsn_train_tuples.flatten()} == RSN

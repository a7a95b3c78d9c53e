"""seed 001 shared set-up: the γ-sweep as one ensemble (per-member γ, shared data), T50 samples with censoring
and resolution, the provenance of a parameter reading, and the training-set health gate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdlab.experiments.paper001_reasoning_bias.bias import AnchorsBias
from tdlab.experiments.paper001_reasoning_bias.common.training import (
    PAPER_LR_TRANSFORMER,
    GammaArms,
    gamma_gpt,
    parameter_reading,
    t50_sample,
)
from tdlab.models.gpt import GPT
from tdlab.probes.curves import t50
from tdlab.seeding import generators
from tdlab.tasks.anchors import KIND_MEM, KIND_RSN_TRAIN, Anchors, AnchorsConfig, anchor_splits
from tdlab.train.data import DATASET, FixedDataset

# --- measures --------------------------------------------------------------------------------------


def test_t50_sample_carries_censoring_and_resolution():
    epochs = np.array([0, 1, 2, 3, 4])
    acc = np.array([[0.0, 0.2, 0.51, 0.9, 0.4], [0.0, 0.1, 0.2, 0.3, 0.5]])  # the second never above 0.5
    s = t50_sample(t50(epochs, acc))
    assert s.values == (2.0, 4.0) and s.censored == (False, True) and s.resolution == 1.0 and s.censor == "above"


def test_a_parameter_reading_is_the_seeds_only_at_its_lr_budget_and_epoch():
    r = parameter_reading(200, 1000, 1e-5, PAPER_LR_TRANSFORMER, (200, 900))
    assert r.provenance == "paper"
    quick = parameter_reading(2, 12, 1e-3, PAPER_LR_TRANSFORMER, (200, 900))
    assert quick.provenance == "ours" and "100× the seed's" in quick.label and "epoch 200 of 1000" in quick.label
    assert parameter_reading(11, 12, 1e-3, PAPER_LR_TRANSFORMER, (200, 900)).label.count("epoch 900 of 1000") == 1
    assert parameter_reading(300, 1000, 1e-5, PAPER_LR_TRANSFORMER, (200, 900)).provenance == "ours"  # not the epoch
    assert parameter_reading(1000, 1000, 2e-5, PAPER_LR_TRANSFORMER).provenance == "ours"  # not the lr
    assert parameter_reading(1000, 1000, 1e-5, PAPER_LR_TRANSFORMER).provenance == "paper"  # the end


# --- the γ-sweep ensemble ---------------------------------------------------------------------------


def test_members_of_a_gamma_sweep_equal_one_member_models_of_their_own_gamma(anchors_tiny, one_thread):
    exp = AnchorsBias()
    cfg = exp.make_config("quick", anchors_tiny, members=2)
    arms = GammaArms.make(7, [0.3, 0.5, 0.8], 2)
    assert len(set(arms.seeds)) == 6 and arms.arms == ["gamma=0.3", "gamma=0.5", "gamma=0.8"]
    mcfg = cfg.model_for_task()
    model = gamma_gpt(mcfg, list(arms.seeds), arms.gamma_of)
    for e, s in enumerate(arms.seeds):
        alone = GPT(mcfg.updated({"init_gamma": arms.gamma_of[s]}), [s])
        for (name, p), (_, q) in zip(model.named_parameters(), alone.named_parameters(), strict=True):
            assert torch.equal(p[e], q[0]), (name, e)
    # the γ sets the scale: embedding std d^-γ (B.4), here d = 8
    wte = model.wte.detach()
    for e, s in enumerate(arms.seeds):
        assert float(wte[e].std()) == pytest.approx(8 ** -arms.gamma_of[s], rel=0.1)
    # a chunk of members (as the trainer may hand it) keeps each member's γ
    part = gamma_gpt(mcfg, list(arms.seeds[3:5]), arms.gamma_of)
    assert torch.equal(part.wte[0], model.wte[3]) and torch.equal(part.wte[1], model.wte[4])


def test_arms_of_one_seed_index_share_their_data_and_splits_are_what_they_say():
    task = Anchors(AnchorsConfig(key_min=21, key_max=30, n_train=500, n_test=40))
    arms = GammaArms.make(3, [0.3, 0.8], 2)
    make = anchor_splits(task, 500, 50, 40)
    data = FixedDataset(make, 50, eval_splits=("mem", "rsn_train", "test"), data_seeds=arms.data_seeds).bind(
        list(arms.seeds), "cpu"
    )
    tok = data.splits["train"]["tokens"]
    # members (i, g) = seed index major: 0 and 1 are seed index 0 at γ 0.3 and 0.8, 2 and 3 seed index 1
    assert arms.members_of(1) == [1, 3] and arms.index_seeds == [arms.seeds[0], arms.seeds[2]]
    assert torch.equal(tok[0], tok[1]) and torch.equal(tok[2], tok[3]) and not torch.equal(tok[0], tok[2])
    g = generators([arms.seeds[2]], DATASET)[0]
    full = task.dataset(g, 500, "train")
    assert torch.equal(data.splits["mem"]["tokens"][3], full["tokens"][full["kind"] == KIND_MEM][:50])
    assert torch.equal(data.splits["rsn_train"]["tokens"][3], full["tokens"][full["kind"] == KIND_RSN_TRAIN][:50])
    test = data.splits["test"]["tokens"][3]
    anchors = test[(test >= 11) & (test <= 20)].reshape(-1, 2)
    assert {tuple(a) for a in anchors.tolist()} <= {(11, 13), (13, 11)} and len(anchors) == 40

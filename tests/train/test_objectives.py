"""Training objectives: next token, last position, masked tokens (seed 004 §3.2, Eqs. (1), (3), (4))."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tdlab.seeding import Purpose, generators
from tdlab.train.objectives import (
    Batch,
    LastPosition,
    MaskedTokens,
    NextToken,
    mask_tokens,
    next_token_loss,
    weighted_mean,
)


def test_next_token_prepares_shifted_pairs_and_scores_the_plain_mean():
    x = torch.randint(0, 5, (2, 3, 9), generator=torch.Generator().manual_seed(0))
    b = NextToken().prepare(x, [])
    assert torch.equal(b.inputs, x[..., :-1]) and torch.equal(b.targets, x[..., 1:]) and b.weights is None
    logits = torch.randn(2, 3, 8, 5, generator=torch.Generator().manual_seed(1))
    loss, correct = NextToken().pointwise(logits, b)
    torch.testing.assert_close(weighted_mean(loss, None), next_token_loss(logits, b.targets))
    assert torch.equal(correct, logits.argmax(-1) == b.targets)


def test_last_position_reads_the_last_position_or_a_pooled_output():
    tokens = torch.randint(0, 7, (2, 4, 5), generator=torch.Generator().manual_seed(0))
    label = torch.randint(0, 7, (2, 4), generator=torch.Generator().manual_seed(1))
    b = LastPosition().prepare({"tokens": tokens, "label": label}, [])
    logits = torch.randn(2, 4, 5, 7, generator=torch.Generator().manual_seed(2))
    loss, correct = LastPosition().pointwise(logits, b)
    manual = torch.stack(
        [torch.stack([F.cross_entropy(logits[e, i, -1], label[e, i]) for i in range(4)]) for e in range(2)]
    )
    torch.testing.assert_close(loss, manual)
    assert torch.equal(correct, logits[:, :, -1].argmax(-1) == label)
    pooled_loss, _ = LastPosition().pointwise(logits[:, :, -1], b)  # (E, B, V) outputs of a pooled model
    torch.testing.assert_close(pooled_loss, manual)
    with pytest.raises(TypeError):
        LastPosition().prepare(tokens, [])


def test_masking_frequencies_follow_section_3_2():
    """|M| share = p_m; within M: kept p_c, replaced by a uniform word p_r, [MASK] the rest."""
    E, B, T = 2, 400, 150
    tokens = torch.randint(1, 101, (E, B, T), generator=torch.Generator().manual_seed(0))
    gens = generators([11, 12], Purpose.TRAIN_DATA)
    p_m, p_c, p_r = 0.15, 0.1, 0.1
    out, sel = mask_tokens(tokens, None, gens, p_m, p_c, p_r, mask_id=0, words=(1, 101))
    n, m = E * B * T, int(sel.sum())
    assert abs(m / n - p_m) < 4 * math.sqrt(p_m * (1 - p_m) / n)
    assert torch.equal(out[~sel], tokens[~sel])  # outside M nothing changes
    masked = (out == 0) & sel
    changed = (out != tokens) & (out != 0) & sel
    same = (out == tokens) & sel
    # A uniform replacement equals the original word with probability 1/100: it looks "kept".
    expect = {"mask": 1 - p_c - p_r, "replace": p_r * 0.99, "same": p_c + p_r * 0.01}
    for name, got in (("mask", masked), ("replace", changed), ("same", same)):
        share, p = float(got.sum()) / m, expect[name]
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / m), (name, share, p)
    assert int(out[changed].min()) >= 1 and int(out[changed].max()) <= 100


def test_member_masks_do_not_depend_on_other_members():
    tokens = torch.randint(1, 21, (3, 8, 30), generator=torch.Generator().manual_seed(0))
    kw = dict(p_m=0.3, p_c=0.1, p_r=0.2, mask_id=0, words=(1, 21))
    both, sel = mask_tokens(tokens, None, generators([1, 2, 3], "m"), **kw)
    alone, sel1 = mask_tokens(tokens[1:2], None, generators([2], "m"), **kw)
    assert torch.equal(both[1:2], alone) and torch.equal(sel[1:2], sel1)


def test_masked_loss_is_eq1_mean_over_documents_of_the_mean_over_M():
    """Eq. (1): each document's masked positions weigh 1/|M| of that document; padding never joins M."""
    E, B, N, V = 1, 3, 12, 6
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(1, V, (E, B, N), generator=g)
    key_mask = torch.ones(E, B, N, dtype=torch.bool)
    key_mask[0, 1, 8:] = False  # a shorter document
    obj = MaskedTokens(vocab=V, p_m=0.5)
    batch = obj.prepare({"tokens": tokens, "key_mask": key_mask}, generators([5], "m"))
    sel = batch.weights > 0
    assert not bool(sel[0, 1, 8:].any())
    outputs = torch.randn(E, B, N, V, generator=g)
    ce = F.cross_entropy(outputs[0].reshape(-1, V), tokens[0].reshape(-1), reduction="none").reshape(B, N)
    per_doc = [ce[i][sel[0, i]].mean() for i in range(B) if bool(sel[0, i].any())]
    expected = torch.stack(per_doc).mean()
    torch.testing.assert_close(weighted_mean(obj.pointwise(outputs, batch)[0], batch.weights)[0], expected)
    sq = MaskedTokens(vocab=V, p_m=0.5, loss="squared")
    sq_point = sq.pointwise(outputs, batch)[0]
    manual = ((outputs - F.one_hot(tokens, V).float()) ** 2).sum(-1)  # Eq. (3), summed over V
    torch.testing.assert_close(sq_point, manual)
    assert torch.equal(batch.model_kwargs["key_mask"], key_mask)


def test_authors_compat_options():
    V = 11
    tokens = torch.randint(1, V, (1, 200, 40), generator=torch.Generator().manual_seed(0))
    obj = MaskedTokens(vocab=V, p_m=0.3, p_c=0.0, p_r=1.0, replace_from_all=True, hide_selected=True)
    b = obj.prepare(tokens, generators([3], "m"))
    sel = b.weights > 0
    assert int(b.inputs[sel].min()) == 0  # replacement drawn from every id, [MASK] = 0 included
    assert torch.equal(b.model_kwargs["key_mask"], ~sel)  # every selected position hidden as a key
    few = MaskedTokens(vocab=V, p_m=0.0, at_least_one=True).prepare(tokens[:, :5], generators([3], "m"))
    assert torch.equal((few.weights > 0).sum(-1), torch.ones(1, 5, dtype=torch.long))
    assert bool((few.inputs[..., 0] == 0).all())


def test_batch_round_trips_through_a_dict():
    b = Batch(
        torch.zeros(1, 2, 3, dtype=torch.long),
        torch.ones(1, 2, 3, dtype=torch.long),
        torch.ones(1, 2, 3),
        {"key_mask": torch.ones(1, 2, 3, dtype=torch.bool)},
    )
    c = Batch.from_dict(b.as_dict())
    assert torch.equal(c.inputs, b.inputs) and torch.equal(c.weights, b.weights)
    assert torch.equal(c.model_kwargs["key_mask"], b.model_kwargs["key_mask"])


@pytest.mark.parametrize("kw", [dict(p_m=1.5), dict(p_c=-0.1), dict(p_c=0.6, p_r=0.6)])
def test_bad_masking_probabilities_are_refused(kw):
    with pytest.raises(ValueError, match="p_"):
        MaskedTokens(vocab=5, **kw)


def test_scoring_only_the_masked_positions_gives_the_same_loss():
    """gather_queries: the topic model computes f at the masked columns only; Eq. (1) is unchanged."""
    from tdlab.models.topic_attention import TopicAttention, TopicModelConfig
    from tdlab.tasks.topics import Topics, TopicsConfig

    task = Topics(TopicsConfig(n_min=20, n_max=30))
    seeds = [3, 4]
    docs = task.sample(generators(seeds, "d"), 5, 30)
    for cfg in (
        TopicModelConfig(onehot=True),
        TopicModelConfig(onehot=True, uniform_attn=True),
        TopicModelConfig(vocab=101, d=16),
    ):
        model = TopicAttention(cfg, seeds)
        for loss in ("ce", "squared"):
            full = MaskedTokens(vocab=101, loss=loss, p_m=0.3)
            gathered = MaskedTokens(vocab=101, loss=loss, p_m=0.3, gather_queries=True)
            a = full.prepare(docs, generators(seeds, "m"))
            b = gathered.prepare(docs, generators(seeds, "m"))
            torch.testing.assert_close(gathered.loss(model, b), full.loss(model, a), rtol=1e-5, atol=1e-6)
            assert b.targets.shape[-1] == int((a.weights > 0).sum(-1).max())


def test_the_masked_token_objective_masks_with_this_process():
    """tdlab.train.objectives.MaskedTokens corrupts documents with mask_tokens: the same masks."""
    from tdlab.tasks.topics import Topics

    task = Topics()
    docs = task.sample(generators([1, 2], "data"), 16)
    mine = mask_tokens(docs["tokens"], docs["key_mask"], generators([1, 2], "mask"), 0.15, 0.1, 0.1, words=task.words)
    batch = MaskedTokens(vocab=task.vocab, words=task.words).prepare(docs, generators([1, 2], "mask"))
    assert torch.equal(mine[0], batch.inputs) and torch.equal(mine[1], batch.weights > 0)


def test_mask_tokens_refuses_bad_arguments():
    tok = torch.ones(1, 2, 3, dtype=torch.long)
    g = generators([0], "mask")
    with pytest.raises(ValueError, match="p_m"):
        mask_tokens(tok, None, g, 1.5, 0.1, 0.1, words=(1, 5))
    with pytest.raises(ValueError, match="p_c \\+ p_r"):
        mask_tokens(tok, None, g, 0.1, 0.6, 0.6, words=(1, 5))
    with pytest.raises(ValueError, match="words"):
        mask_tokens(tok, None, g, 0.1, 0.1, 0.1)
    with pytest.raises(ValueError, match="len\\(gens\\)"):
        mask_tokens(tok, None, generators([0, 1], "mask"), 0.1, 0.1, 0.1, words=(1, 5))

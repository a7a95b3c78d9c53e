"""The hook-point contract, on every model class of tdlab.models (found as subclasses of EnsembleModel):
identity hooks change nothing, ablating an attention output changes the output, patching restores a
clean activation (and the clean output from a point that carries everything), cache names follow the
module tree with the member axis first, and hooks are gone after an exception."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

import tdlab.models
from tdlab.models.emb_mlp import Def2Config, Def2Transformer, EmbMLP, EmbMLPConfig
from tdlab.models.ensemble import EnsembleModel, Members
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.models.hf_encoder import HFEncoder
from tdlab.models.hooks import HookPoint
from tdlab.models.linear_attention import LCA, LSA
from tdlab.models.multimodal_ca import BiCAConfig, BidirectionalCA, MultimodalCA, MultimodalCAConfig
from tdlab.models.normalised_attention import NormalisedAttention, NormAttnConfig
from tdlab.models.topic_attention import TopicAttention, TopicModelConfig

E, B = 2, 3
SEEDS = [5, 9]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tokens(V: int, T: int) -> Callable[[int], tuple[tuple, dict]]:
    return lambda seed: ((torch.randint(0, V, (E, B, T), generator=_gen(seed)),), {})


def _encoder_tokens(seed: int) -> tuple[tuple, dict]:
    tok = torch.randint(0, 10, (E, B, 7), generator=_gen(seed))
    mask = torch.ones(E, B, 7, dtype=torch.bool)
    mask[:, 0, -2:] = False  # padding
    return (tok,), {"key_mask": mask}


def _images(seed: int) -> tuple[tuple, dict]:
    return (torch.rand(E, B, 2, 28, 28, generator=_gen(seed)),), {}


def _prompts(seed: int) -> tuple[tuple, dict]:
    g = _gen(seed)
    return (
        torch.randn(E, B, 6, 3, generator=g),
        torch.randn(E, B, 6, generator=g),
        torch.randn(E, B, 3, generator=g),
    ), {}


@dataclass
class Case:
    """A model to hold to the contract: how to build it and its inputs, an attention output to ablate, a
    point that carries everything its output depends on, and documented shapes of some points."""

    name: str
    build: Callable[[], EnsembleModel]
    inputs: Callable[[int], tuple[tuple, dict]]
    ablate: str
    carrier: str
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    members: int = E


MMCA = dict(d=8, layers=2, heads=2, d_h=12, conv_width=4)
CASES = [
    Case(
        "gpt-sec2",
        lambda: GPT(GPTConfig(d=8, layers=2), SEEDS),
        _tokens(2, 6),
        "blocks.0.hook_attn_out",
        "blocks.1.hook_resid_post",
        {"hook_embed": (E, B, 6, 8), "blocks.1.attn.hook_pattern": (E, B, 1, 6, 6), "hook_logits": (E, B, 6, 2)},
    ),
    Case(
        "gpt2",
        lambda: GPT(GPTConfig(arch="gpt2", vocab=7, d=8, heads=2, layers=2, max_len=8), SEEDS),
        _tokens(7, 6),
        "blocks.1.hook_attn_out",
        "hook_final",
        {
            "hook_pos_embed": (E, B, 6, 8),
            "blocks.0.attn.hook_pattern": (E, B, 2, 6, 6),
            "blocks.0.attn.hook_z": (E, B, 6, 2, 4),
            "blocks.0.mlp.hook_pre": (E, B, 6, 32),
            "blocks.0.hook_resid_post": (E, B, 6, 8),
        },
    ),
    Case(
        "gpt2-relative-kv-post-ln",
        lambda: GPT(
            GPTConfig(
                arch="gpt2", vocab=7, d=8, heads=2, layers=2, positions="relative", rel_encoding="kv", norm="post"
            ),
            SEEDS,
        ),
        _tokens(7, 6),
        "blocks.0.hook_attn_out",
        "blocks.1.hook_resid_post",
        {"blocks.1.attn.hook_pattern": (E, B, 2, 6, 6)},
    ),
    Case(
        "gpt2-encoder",
        lambda: GPT(GPTConfig(arch="gpt2", vocab=10, d=8, heads=2, layers=1, causal=False, norm="post"), SEEDS),
        _encoder_tokens,
        "blocks.0.hook_attn_out",
        "blocks.0.hook_resid_post",
        {"blocks.0.attn.hook_pattern": (E, B, 2, 7, 7)},
    ),
    Case(
        "gpt-attention-only",
        lambda: GPT(
            GPTConfig(arch="gpt2", vocab=3, d=8, layers=2, mlp=False, norm="none", positions="relative"), SEEDS
        ),
        _tokens(3, 6),
        "blocks.0.hook_attn_out",
        "blocks.1.hook_resid_post",
    ),
    Case(
        "topic-attention",
        lambda: TopicAttention(TopicModelConfig(vocab=11, d=6), SEEDS),
        _tokens(11, 14),  # V < N: the merged-keys route
        "attn.hook_out",
        "hook_out",
        {"attn.hook_pattern": (E, B, 14, 14), "attn.hook_out": (E, B, 14, 6), "hook_out": (E, B, 14, 11)},
    ),
    Case(
        "topic-attention-per-position",
        lambda: TopicAttention(TopicModelConfig(vocab=11, onehot=True), SEEDS),
        _tokens(11, 5),  # V >= N: the per-position route
        "attn.hook_out",
        "hook_out",
        {"attn.hook_scores": (E, B, 5, 5), "hook_embed": (E, B, 5, 11)},
    ),
    Case(
        "emb-mlp",  # no attention: its hidden layer stands in
        lambda: EmbMLP(EmbMLPConfig(vocab=12, d_m=8, d_f=16), SEEDS),
        _tokens(12, 5),
        "hidden.hook_post",
        "hidden.hook_post",
        {"hook_embed": (E, B, 5, 8), "hook_pooled": (E, B, 8), "hook_logits": (E, B, 12)},
    ),
    Case(
        "def2",
        lambda: Def2Transformer(Def2Config(vocab=12, d_m=12, d_k=4, d_f=16), SEEDS),
        _tokens(12, 5),
        "hook_attn_out",
        "hook_u",
        {"attn.hook_pattern": (E, B, 5, 5), "hook_u": (E, B, 12)},
    ),
    Case(
        "multimodal-ca",
        lambda: MultimodalCA(MultimodalCAConfig(**MMCA), SEEDS).eval(),
        _images,
        "blocks.0.attn.hook_out",
        "hook_cls",
        {"blocks.1.attn.hook_pattern": (E, B, 2, 33, 33), "blocks.0.hook_resid_post": (E, B, 33, 8)},
    ),
    Case(
        "bidirectional-ca",
        lambda: BidirectionalCA(BiCAConfig(**MMCA), SEEDS).eval(),
        _images,
        "blocks.0.attn_i.hook_out",
        "hook_pooled",
        {"blocks.0.attn_a.hook_pattern": (E, B, 2, 16, 16), "hook_pooled": (E, B, 16)},
    ),
    Case(
        "normalised-attention",
        lambda: NormalisedAttention(NormAttnConfig(d=8, layers=2), SEEDS),
        _tokens(2, 6),
        "blocks.0.hook_attn_out",
        "hook_final",
        {"blocks.0.hook_pattern": (E, B, 1, 6, 6), "blocks.0.hook_null": (E, B, 1, 6)},
    ),
    Case(
        "lsa",
        lambda: LSA(3, SEEDS, sigma_init=0.3),
        _prompts,
        "readout.hook_scores",
        "hook_out",
        {"readout.hook_scores": (E, B, 6), "hook_out": (E, B)},
    ),
    Case(
        "lca",
        lambda: LCA(3, 2, SEEDS, param="full", pre_ln=True),
        _prompts,
        "blocks.1.hook_attn_out",  # A_0 = 0 from F_0 = 0
        "hook_out",  # the readout reads y and x_query beside F_T
        {"blocks.1.hook_resid_post": (E, B, 6, 3), "hook_final": (E, B, 6, 3)},
    ),
]


@functools.cache
def _tiny_bert() -> Path:
    """A tiny saved BERT checkpoint (2 layers, 2 heads, width 16) and its tokenizer, as test_hf_encoder builds."""
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("hf_encoder_tests", Path(__file__).with_name("test_hf_encoder.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    d = Path(tempfile.mkdtemp(prefix="tdlab-hooks-bert-"))
    module.save_tiny("bert", d)
    return d


def _hf_ids(seed: int) -> tuple[tuple, dict]:
    return (torch.randint(0, 12, (1, B, 7), generator=_gen(seed)),), {}  # the tiny WordPiece vocabulary


CASES.append(
    Case(
        "hf-encoder",
        lambda: HFEncoder(_tiny_bert(), ["apple", "boat"]),
        _hf_ids,
        "blocks.0.attn.hook_z",
        "hook_final",
        {
            "hook_embed": (1, B, 7, 16),
            "blocks.1.attn.hook_pattern": (1, B, 2, 7, 7),
            "blocks.0.attn.hook_z": (1, B, 7, 2, 8),
        },
        members=1,
    )
)
IDS = [c.name for c in CASES]


def _model_classes(base: type = EnsembleModel) -> set[type]:
    for info in pkgutil.iter_modules(tdlab.models.__path__):
        importlib.import_module(f"tdlab.models.{info.name}")
    found: set[type] = set()
    todo = [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if (
                sub.__module__.startswith("tdlab.models.")
                and not sub.__name__.startswith("_")
                and sub is not EnsembleModel
            ):
                found.add(sub)
    return found


def test_every_model_class_has_a_case():
    covered = {type(c.build()) for c in CASES}
    missing = sorted(cls.__qualname__ for cls in _model_classes() - covered)
    assert not missing, f"model classes without a hook-contract case in CASES: {missing}"
    unhooked = _model_classes(Members) - _model_classes()
    assert not unhooked, f"models with members but no hook points: {unhooked}"


def _run(model: EnsembleModel, x: tuple[tuple, dict], **kw: Any) -> Any:
    args, kwargs = x
    with torch.no_grad():
        return model.run_with_hooks(*args, **kwargs, **kw)


def _inactive(model: EnsembleModel) -> bool:
    return not any(p.active for p in model.hook_points().values())


@pytest.fixture(params=CASES, ids=IDS)
def case(request, one_thread) -> Case:
    return request.param


def test_identity_hooks_leave_the_output_bit_for_bit(case):
    model, x = case.build(), case.inputs(0)
    with torch.no_grad():
        plain = model(*x[0], **x[1])
    for fn in (lambda a, hook: None, lambda a, hook: a):
        out = _run(model, x, fwd_hooks=[(lambda name: True, fn)])
        assert torch.equal(out, plain)
    assert _inactive(model)


def test_ablating_an_attention_output_changes_the_output(case):
    model, x = case.build(), case.inputs(0)
    with torch.no_grad():
        plain = model(*x[0], **x[1])
    zero = _run(model, x, fwd_hooks=[(case.ablate, lambda a, hook: torch.zeros_like(a))])
    mean = _run(model, x, fwd_hooks=[(case.ablate, lambda a, hook: a.mean(dim=1, keepdim=True).expand_as(a))])
    resample = _run(model, x, fwd_hooks=[(case.ablate, lambda a, hook: a.roll(1, dims=1))])
    for out in (zero, mean, resample):
        assert out.shape == plain.shape and not torch.allclose(out, plain)


def test_patching_restores_the_clean_activation_and_from_a_carrier_the_clean_output(case):
    model, clean, corrupt = case.build(), case.inputs(0), case.inputs(1)
    clean_out, cache = model.run_with_cache(*clean[0], **clean[1])
    corrupt_out, bad = model.run_with_cache(*corrupt[0], **corrupt[1])
    assert not torch.allclose(corrupt_out, clean_out)
    for name in cache:
        with model.hooks([(name, lambda a, hook: cache[hook.name])]):
            _, seen = model.run_with_cache(*corrupt[0], **corrupt[1], names_filter=name)
        assert torch.equal(seen[name], cache[name]), name
    assert not torch.equal(bad[case.carrier], cache[case.carrier])
    patched = _run(model, corrupt, fwd_hooks=[(case.carrier, lambda a, hook: cache[hook.name])])
    torch.testing.assert_close(patched, clean_out)


def test_cache_names_follow_the_module_tree_member_axis_first(case):
    model, x = case.build(), case.inputs(0)
    _, cache = model.run_with_cache(*x[0], **x[1])
    tree = [n for n, m in model.named_modules() if isinstance(m, HookPoint)]
    assert sorted(cache) == sorted(tree) and tree == list(model.hook_points())  # the cache: in execution order
    assert all(n.rsplit(".", 1)[-1].startswith("hook_") for n in tree)
    assert all(t.shape[0] == case.members and not t.requires_grad for t in cache.values())
    for name, shape in case.shapes.items():
        assert tuple(cache[name].shape) == shape, name
    assert case.ablate in cache and case.carrier in cache
    _, some = model.run_with_cache(*x[0], **x[1], names_filter=lambda n: n.endswith("hook_pattern"))
    assert set(some) == {n for n in tree if n.endswith("hook_pattern")}
    for p in model.hook_points().values():  # a short name answers for its point
        if p.alias is not None:
            assert cache[p.alias] is cache[p.name]


def test_hooks_are_removed_after_an_exception(case):
    model, x = case.build(), case.inputs(0)
    with torch.no_grad():
        plain = model(*x[0], **x[1])

    def boom(a, hook):
        raise RuntimeError("inside a hook")

    with pytest.raises(RuntimeError, match="inside a hook"):
        _run(model, x, fwd_hooks=[(case.ablate, lambda a, hook: torch.zeros_like(a)), (case.carrier, boom)])
    assert _inactive(model)
    with torch.no_grad():
        assert torch.equal(model(*x[0], **x[1]), plain)


def test_an_unknown_point_is_named_with_the_ones_there_are():
    model = GPT(GPTConfig(), [0])
    with pytest.raises(KeyError, match=r"blocks\.0\.attn\.hook_pattern"):
        model.run_with_hooks(torch.zeros(1, 1, 3, dtype=torch.long), fwd_hooks=[("blocks.0.attn.pattern", print)])
    assert _inactive(model)


def test_zero_ablating_one_head_changes_only_through_that_head(one_thread):
    """``hook_z`` (E, B, T, H, d_h): zeroing head 1 of layer 0 equals zeroing its slice of W_O's input."""
    model = GPT(GPTConfig(arch="gpt2", vocab=7, d=8, heads=2, layers=1, max_len=8), SEEDS)
    tok = torch.randint(0, 7, (E, B, 6), generator=_gen(0))

    def zero_head(a: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        a = a.clone()
        a[:, :, :, 1] = 0.0
        return a

    ablated = _run(model, ((tok,), {}), fwd_hooks=[("blocks.0.attn.hook_z", zero_head)])
    with torch.no_grad():
        model.blocks[0].attn.W_O.weight[:, :, 4:] = 0.0  # head 1's columns of W_O
        by_weights = model(tok)
    torch.testing.assert_close(ablated, by_weights)

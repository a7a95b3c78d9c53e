"""Export of trained GPT members to TransformerLens.

Without TransformerLens: the name/shape mapping against shapes written out by hand, the zero/identity
fills, the refusals. With it (``importorskip``): an exported member loaded as
``TransformerBridge.boot_native(cfg)`` + ``load_state_dict(strict=True)`` (no weight processing) gives
tdlab's logits on the same tokens, for every variant TL can express, from a tiny real run too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from tdlab.config import ConfigError
from tdlab.experiments.paper000_local_to_global.initialisation import MarkovInit
from tdlab.experiments.paper003_attention_markov.icl_depth import MarkovICLDepth
from tdlab.export.transformer_lens import (
    CONFIG_KEY,
    FORMAT,
    export_member,
    load,
    read_export,
    tl_hook_name,
    tl_shapes,
    to_state_dict,
    to_tl_config,
    unsupported,
)
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.run_context import init_arm
from tdlab.runner import execute
from tdlab.runs import Run, RunWriter
from tdlab.seeding import member_seeds

TOL = 1e-5  # the export's promise: logits equal "to 1e-5" (float32)


def gpt2(**kw) -> GPTConfig:
    base = {"arch": "gpt2", "vocab": 11, "d": 32, "layers": 2, "heads": 4, "max_len": 16}
    return GPTConfig(**{**base, **kw})


def perturbed(cfg: GPTConfig, scale: float = 0.3, dtype: torch.dtype = torch.float32) -> GPT:
    """E = 3 members, then every parameter moved by N(0, scale^2) so LayerNorm gains/shifts, biases and
    the head bias are not at their trivial init values (1, 0)."""
    model = GPT(cfg, [10, 11, 12]).to(dtype)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=dtype))
    return model


def tokens(cfg: GPTConfig, B: int = 5, E: int = 3) -> torch.Tensor:
    return torch.randint(0, cfg.vocab, (E, B, cfg.max_len), generator=torch.Generator().manual_seed(0))


# ------------------------------------------------------------------------------------------------
# Mapping, without TransformerLens
# ------------------------------------------------------------------------------------------------
def test_state_dict_names_and_shapes_by_hand():
    # d = 32, V = 11, N = 16, d_attn = 24 (4 heads of 6), d_ff = 40, untied head with bias, biases on.
    cfg = gpt2(d_attn=24, d_ff=40, tie_weights=False, head_bias=True, bias=True)
    sd = to_state_dict(perturbed(cfg).member_state(1), cfg)
    want = {
        "embed.weight": (11, 32),
        "pos_embed.weight": (16, 32),
        "ln_final.weight": (32,),
        "ln_final.bias": (32,),
        "unembed.weight": (11, 32),
        "unembed.bias": (11,),
    }
    for layer in range(2):
        b = f"blocks.{layer}"
        want |= {
            f"{b}.ln1.weight": (32,),
            f"{b}.ln1.bias": (32,),
            f"{b}.ln2.weight": (32,),
            f"{b}.ln2.bias": (32,),
            f"{b}.attn.q.weight": (24, 32),
            f"{b}.attn.k.weight": (24, 32),
            f"{b}.attn.v.weight": (24, 32),
            f"{b}.attn.q.bias": (24,),
            f"{b}.attn.k.bias": (24,),
            f"{b}.attn.v.bias": (24,),
            f"{b}.attn.o.weight": (32, 24),
            f"{b}.attn.o.bias": (32,),
            f"{b}.mlp.in.weight": (40, 32),
            f"{b}.mlp.in.bias": (40,),
            f"{b}.mlp.out.weight": (32, 40),
            f"{b}.mlp.out.bias": (32,),
        }
    assert {k: tuple(v.shape) for k, v in sd.items()} == want == tl_shapes(cfg)
    m = perturbed(cfg).member_state(1)
    assert torch.equal(sd["blocks.1.attn.o.weight"], m["blocks.1.attn.W_O.weight"])
    assert torch.equal(sd["blocks.0.mlp.in.bias"], m["blocks.0.mlp.W_1.bias"])
    assert torch.equal(sd["unembed.weight"], m["lm_head"]) and torch.equal(sd["unembed.bias"], m["lm_bias"])
    assert torch.equal(sd["ln_final.bias"], m["ln_f.bias"]) and torch.equal(sd["pos_embed.weight"], m["wpe"])


def test_fills_for_what_tdlab_lacks():
    # Tied head, no biases, no absolute positions, no W_O, attention-only without LayerNorm.
    cfg = gpt2(positions="none", out_proj=False, mlp=False, norm="none")
    m = perturbed(cfg).member_state(0)
    sd = to_state_dict(m, cfg)
    assert not any(".ln" in k or "mlp" in k or "ln_final" in k for k in sd)
    assert torch.equal(sd["unembed.weight"], m["wte"]) and torch.equal(sd["embed.weight"], m["wte"])
    assert sd["unembed.weight"].data_ptr() != sd["embed.weight"].data_ptr()  # safetensors refuses shared storage
    assert torch.equal(sd["pos_embed.weight"], torch.zeros(16, 32))
    assert torch.equal(sd["blocks.1.attn.o.weight"], torch.eye(32))
    assert all(torch.equal(sd[f"blocks.0.attn.{n}.bias"], torch.zeros(32)) for n in "qkvo")
    assert torch.equal(sd["unembed.bias"], torch.zeros(11))


def test_tl_config_by_hand():
    assert to_tl_config(gpt2(d_attn=24, d_ff=40, activation="relu")) == {
        "n_layers": 2,
        "d_model": 32,
        "n_ctx": 16,
        "d_head": 6,
        "n_heads": 4,
        "d_mlp": 40,
        "d_vocab": 11,
        "d_vocab_out": 11,
        "act_fn": "relu",
        "normalization_type": "LN",
        "positional_embedding_type": "standard",
        "attn_only": False,
        "eps": 1e-5,
        "default_prepend_bos": False,
        "init_weights": False,
    }
    c = to_tl_config(gpt2(mlp=False, norm="none"))
    assert (c["act_fn"], c["normalization_type"], c["attn_only"], c["d_mlp"], c["d_head"]) == (
        "gelu",
        None,
        True,
        None,
        8,
    )
    json.dumps(c)  # goes into the file's metadata as JSON


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"arch": "sec2", "vocab": 2}, "scalar token"),
        ({"norm": "post"}, "post-LN"),
        ({"positions": "relative"}, "relative-position bias"),
        ({"positions": "both", "rel_encoding": "kv"}, "relative key/value"),
        ({"final_norm": False}, "without a final LayerNorm"),
        ({"norm": "none", "final_norm": True}, "final LayerNorm without block LayerNorms"),
    ],
)
def test_unsupported_architectures_are_named(kw, needle):
    cfg = gpt2(**kw)
    assert any(needle in m for m in unsupported(cfg))
    with pytest.raises(ConfigError, match=needle):
        to_tl_config(cfg)
    with pytest.raises(ConfigError, match="TransformerLens cannot express"):
        to_state_dict(GPT(cfg, [0]).member_state(0), cfg)


def test_parameters_that_do_not_fit_the_config():
    cfg = gpt2()
    m = GPT(cfg, [0]).member_state(0)
    with pytest.raises(ConfigError, match=r"'lm_head' .* is missing"):
        to_state_dict(m, cfg.updated({"tie_weights": False}))
    with pytest.raises(
        ConfigError, match=r"'blocks.0.mlp.W_1.weight' has shape \(128, 32\), the config needs \(64, 32\)"
    ):
        to_state_dict(m, cfg.updated({"d_ff": 64}))
    with pytest.raises(ConfigError, match=r"blocks\.1\.attn\.W_Q\.weight.* are not part of it"):
        to_state_dict(m, cfg.updated({"layers": 1}))


# ------------------------------------------------------------------------------------------------
# Logits through TransformerLens
# ------------------------------------------------------------------------------------------------
VARIANTS = {
    "gpt2 pre-LN": {},
    "relu": {"activation": "relu"},
    "untied head + bias": {"tie_weights": False, "head_bias": True},
    "d_attn != d": {"d_attn": 24},
    "d_ff": {"d_ff": 40},
    "biases": {"bias": True},
    "attention-only": {"mlp": False},
    "attention-only no LN": {"mlp": False, "norm": "none"},
    "no LN": {"norm": "none"},
    "no positions": {"positions": "none"},
    "no W_O": {"out_proj": False},
    "3 layers, 1 head": {"layers": 3, "heads": 1},
}


def _bridge(cfg_kwargs: dict, sd: dict, dtype=torch.float32):
    from transformer_lens import TransformerBridge

    model = TransformerBridge.boot_native(json.loads(json.dumps(cfg_kwargs)), dtype=dtype)
    model.load_state_dict(sd, strict=True)
    return model.eval()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_equal_tdlab(name, one_thread):
    pytest.importorskip("transformer_lens")
    cfg = gpt2(**VARIANTS[name])
    # Without LayerNorm a 0.3 perturbation makes logits in the hundreds (float32 rounding ~1e-3):
    # 0.15 keeps them O(1) there, so 1e-5 measures the mapping, not the scale.
    scale = 0.3 if cfg.norm_placement == "pre" else 0.15
    model = perturbed(cfg, scale)
    x = tokens(cfg)
    with torch.no_grad():
        want = model(x)[1]
        got = _bridge(to_tl_config(cfg), to_state_dict(model.member_state(1), cfg))(x[1], return_type="logits")
    assert got.shape == want.shape == (5, 16, 11)
    assert 0.5 < want.abs().max() < 50  # non-trivial logits
    assert (got - want).abs().max().item() <= TOL
    # float64 end to end: the mapping is exact up to rounding, far below the float32 tolerance.
    m64 = perturbed(cfg, scale, dtype=torch.float64)
    with torch.no_grad():
        want64 = m64(x)[1]
        got64 = _bridge(to_tl_config(cfg), to_state_dict(m64.member_state(1), cfg), torch.float64)(
            x[1], return_type="logits"
        )
    assert (got64 - want64).abs().max().item() <= 1e-12


@pytest.mark.parametrize("name", ["2 layers", "attention-only no LN"])
def test_hook_points_are_transformer_lens_names_of_the_same_activations(name, one_thread):
    """Every tdlab GPT hook point, member 1 of a float64 run_with_cache, is the exported member's TransformerLens
    cache entry of :func:`tl_hook_name` (the same name but for the final two points)."""
    pytest.importorskip("transformer_lens")
    cfg = gpt2(**{"2 layers": {"layers": 2}, "attention-only no LN": {"layers": 2, "mlp": False, "norm": "none"}}[name])
    model = perturbed(cfg, 0.15, dtype=torch.float64)
    x = tokens(cfg)
    bridge = _bridge(to_tl_config(cfg), to_state_dict(model.member_state(1), cfg), torch.float64)
    with torch.no_grad():
        _, ours = model.run_with_cache(x)
        _, theirs = bridge.run_with_cache(x[1])
    some = {"hook_embed", "blocks.0.attn.hook_pattern", "blocks.1.hook_attn_out", "blocks.1.hook_resid_post"}
    assert some <= set(ours)
    for n, t in ours.items():
        torch.testing.assert_close(t[1], theirs[tl_hook_name(n, cfg)], rtol=1e-10, atol=1e-12, msg=n)


def test_local_to_global_init_is_exact_in_float64(one_thread):
    """Seed 000's proposed init (wte[1] = wte[0] + 0.5 in every coordinate, W_1 = 1, W_2 = -1) puts the
    token signal along the all-ones direction, which every LayerNorm removes: LN reads a small
    difference of O(0.5) numbers, so float32 rounding is amplified and tdlab's own float32 logits are
    ~6e-6 from the exact ones (TL's ~1e-5; measured, docs/export.md). In float64 the mapping is exact."""
    pytest.importorskip("transformer_lens")
    cfg = GPTConfig(arch="gpt2", d=8, init="local-to-global", max_len=64)
    model = GPT(cfg, [1, 2, 3]).double()
    x = torch.randint(0, 2, (3, 8, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(x)[1]
        got = _bridge(to_tl_config(cfg), to_state_dict(model.member_state(1), cfg), torch.float64)(
            x[1], return_type="logits"
        )
    assert want.abs().max() > 0.1
    assert (got - want).abs().max().item() <= 1e-12


def test_another_member_differs(one_thread):
    """The check above could not tell member 1 from member 0 if members were equal: they are not."""
    pytest.importorskip("transformer_lens")
    cfg = gpt2()
    model, x = perturbed(cfg), tokens(cfg)
    with torch.no_grad():
        got = _bridge(to_tl_config(cfg), to_state_dict(model.member_state(1), cfg))(x[1], return_type="logits")
        other = model(torch.stack([x[1]] * 3))[0]
    assert (got - other).abs().max() > 0.1


# ------------------------------------------------------------------------------------------------
# From run directories
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def init_run(tmp_path_factory) -> Run:
    """A real markov-init run, both architectures, 2 members, a few steps."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    exp = MarkovInit()
    cfg = exp.make_config(
        "quick",
        [
            "archs=[sec2, gpt2]",
            "inits=[standard]",
            "train.steps=3",
            "train.seq_len=16",
            "train.eval_every=3",
            "train.eval_batches=1",
            "model.d=8",
        ],
        members=2,
    )
    try:
        return execute(exp, cfg, "quick", tmp_path_factory.mktemp("runs"), progress=False)
    finally:
        torch.set_num_threads(old)


def test_export_from_a_real_run(init_run, tmp_path, one_thread):
    path = export_member(init_run.path, "gpt2/standard", 1, tmp_path / "m1.safetensors")
    assert path == tmp_path / "m1.safetensors"
    cfg_kwargs, meta = read_export(path)
    assert meta["format"] == FORMAT and json.loads(meta["source"])["arm"] == "gpt2/standard"
    assert (cfg_kwargs["d_model"], cfg_kwargs["n_ctx"], cfg_kwargs["d_vocab"], cfg_kwargs["n_layers"]) == (8, 16, 2, 1)
    with safe_open(str(path), "pt") as f:  # the weights are plain tensors, the config plain JSON
        assert json.loads(f.metadata()[CONFIG_KEY]) == cfg_kwargs
    assert set(load_file(str(path))) == set(tl_shapes(GPTConfig(**json.loads(meta["tdlab_model"]))))
    # The trained member, rebuilt the way the experiment builds it.
    rc = MarkovInit.Config.model_validate(init_run.config["config"])
    mcfg = rc.arm_model("gpt2", "standard")
    model = GPT(mcfg, member_seeds(rc.seed, rc.members))
    model.load_state_dict(init_run.arrays("gpt2/standard"))
    x = torch.randint(0, 2, (2, 4, 16), generator=torch.Generator().manual_seed(3))
    pytest.importorskip("transformer_lens")
    with torch.no_grad():
        want = model(x)[1]
        got = load(path)(x[1], return_type="logits")
    assert (got - want).abs().max().item() <= TOL
    # Default name, in a folder; the initial parameters are the same model.
    p0 = export_member(init_run.path, init_arm("gpt2/standard"), 0, tmp_path)
    assert p0.parent == tmp_path and p0.name.endswith(".gpt2_standard_init.m0.tl.safetensors")
    with torch.no_grad():
        assert (
            load(p0)(x[0], return_type="logits") - GPT(mcfg, member_seeds(rc.seed, rc.members))(x)[0]
        ).abs().max() <= TOL
        # float64 on request: the exact function of the float32 weights.
        got64 = load(path, dtype=torch.float64)(x[1], return_type="logits")
        assert got64.dtype == torch.float64 and (got64 - model.double()(x)[1]).abs().max().item() <= 1e-12


def test_run_errors_name_what_exists(init_run, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown arm 'gpt2/nope'.*gpt2/standard.*sec2/standard"):
        export_member(init_run.path, "gpt2/nope", 0, tmp_path / "x.safetensors")
    with pytest.raises(ConfigError, match=r"member.*2 is out of range: arm 'gpt2/standard' has 2 members \(0..1\)"):
        export_member(init_run.path, "gpt2/standard", 2, tmp_path / "x.safetensors")
    with pytest.raises(ConfigError, match="out of range"):
        export_member(init_run.path, "gpt2/standard", -1, tmp_path / "x.safetensors")
    with pytest.raises(ConfigError, match=r"arch 'sec2'.*scalar token"):
        export_member(init_run.path, "sec2/standard", 0, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def _planted_icl_depth(out: Path, cells: dict[str, tuple[int, str]]) -> Path:
    """A markov-icl-depth run directory holding freshly initialised members for the given arms
    (``arm -> (depth, positions)``), built with the experiment's own per-arm model config."""
    exp = MarkovICLDepth()
    cfg = exp.make_config(
        "quick", ["train.seq_len=16", "probe.map_len=8", "ks=[1]", "depths=[1, 2]", "model.d=16"], members=2
    )
    with RunWriter(out, exp.name, run_id="planted") as w:
        w.write_config(
            {"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json"), "sweep": None}
        )
        for arm, (depth, pe) in cells.items():
            w.save_arrays(arm, [GPT(cfg.arm_model(depth, pe), [s]).member_state(0) for s in (5, 6)])
            w.add_metrics(arm, [(0, 0, "test_loss", 0.7)])
        return w.finish().path


def test_multi_layer_arm_of_a_planted_run(tmp_path, one_thread):
    run = _planted_icl_depth(
        tmp_path / "runs",
        {
            "k1/L2/absolute": (2, "absolute"),
            "k1/L1/relative": (1, "relative"),
            "k1/L2/relative-kv": (2, "relative-kv"),
            "k1/L1/both": (1, "both"),
        },
    )
    for arm, needle in (
        ("k1/L1/relative", "relative-position bias"),
        ("k1/L2/relative-kv", "relative key/value"),
        ("k1/L1/both", "relative-position bias"),
    ):
        with pytest.raises(ConfigError, match=f"arm '{arm}' cannot be exported.*{needle}"):
            export_member(run, arm, 0, tmp_path / "x.safetensors")
    with RunWriter(tmp_path / "runs", "markov-icl-depth", run_id="other") as w:  # a probe arm: measurements only
        w.write_config(Run(run).config)
        w.save_arrays("k1/L2/absolute/probe", [{"gap": torch.zeros(3)}] * 2)
        w.add_metrics("k1/L2/absolute/probe", [(0, 0, "gap", 0.1)])
        other = w.finish().path
    with pytest.raises(ConfigError, match=r"'k1/L2/absolute/probe' holds no GPT parameters \(it stores: gap\)"):
        export_member(other, "k1/L2/absolute/probe", 0, tmp_path / "x.safetensors")
    path = export_member(run, "k1/L2/absolute", 1, tmp_path / "abs.safetensors")
    assert read_export(path)[0]["n_layers"] == 2
    pytest.importorskip("transformer_lens")
    cfg = GPTConfig(arch="gpt2", d=16, layers=2, max_len=16)  # ICLModelConfig: gpt2, d = 16 here, vocab 2, 1 head
    x = torch.randint(0, 2, (1, 3, 16), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = GPT(cfg, [6])(x)[0]
        got = load(path)(x[0], return_type="logits")
    assert (got - want).abs().max().item() <= TOL


def test_load_without_transformer_lens(init_run, tmp_path, monkeypatch):
    path = export_member(init_run.path, "gpt2/standard", 0, tmp_path / "m0.safetensors")
    monkeypatch.setitem(sys.modules, "transformer_lens", None)  # import fails
    with pytest.raises(ConfigError, match=r"pip install 'tdlab\[transformer-lens\]'"):
        load(path)


def test_load_refuses_other_files(init_run, tmp_path):
    with pytest.raises(ConfigError, match="not a tdlab TransformerLens export"):
        load(init_run.path / "arrays" / "gpt2__standard.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ConfigError, match="not a safetensors file"):
        load(tmp_path / "junk.safetensors")
    with pytest.raises(ConfigError, match="no such file"):
        load(tmp_path / "missing.safetensors")

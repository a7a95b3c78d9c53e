"""One member of a trained tdlab GPT as a TransformerLens model.

TransformerLens 4 removed ``HookedTransformer``/``HookedTransformerConfig``; its own from-scratch
model is the "TL-native" transformer behind ``TransformerBridge.boot_native(config)`` (a pre-LN GPT:
token table, learned absolute positions, blocks ``x + Attn(LN1 x)``, ``y + MLP(LN2 y)``, a final
norm, an unembedding with a bias). That is tdlab's ``arch="gpt2"`` model (seed 000 Table 1) and its
multi-layer / attention-only / ReLU / untied-head variants, so a member maps onto it parameter for
parameter, with no weight processing (no LayerNorm folding, no centring): the loaded model computes
tdlab's logits.

The export is ONE file, ``*.safetensors``: the weights under the names and layouts the bridge's own
``state_dict()`` uses (``embed.weight`` (V, d), ``blocks.{l}.attn.q.weight`` (d_attn, d) — PyTorch
``nn.Linear`` layout, ``out x in`` — ...), and in the safetensors metadata the
``TransformerBridgeConfig`` keyword arguments as JSON (:data:`CONFIG_KEY`), plus where the member
came from. No pickle anywhere: tdlab refuses pickle-executing checkpoints, and so can the reader.
Loading it (what :func:`load` does)::

    with safe_open(path, "pt") as f: cfg = json.loads(f.metadata()["transformer_lens_config"])
    model = TransformerBridge.boot_native(cfg)
    model.load_state_dict(safetensors.torch.load_file(path), strict=True)

Architectures the TL-native model cannot express are refused (:class:`~tdlab.config.ConfigError`,
CLI exit 2) naming what is missing (:func:`unsupported`); tdlab's own hook points
(:meth:`tdlab.models.hooks.HookedModule.run_with_cache`, ``run_with_hooks``) remain the way to probe those.

tdlab's GPT names its hook points as TransformerLens does (``hook_embed``, ``blocks.0.attn.hook_pattern``,
``blocks.0.hook_resid_post``, ...), with the member axis first: member ``e`` of a tdlab cache is the
exported member's TransformerLens cache under :func:`tl_hook_name` of the same name.

``to_tl_config`` and ``to_state_dict`` are plain torch; only :func:`load` imports TransformerLens
(the optional extra ``tdlab[transformer-lens]``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save

from tdlab.config import ConfigError, echo
from tdlab.models.gpt import GPTConfig
from tdlab.runs import Run, atomic_write
from tdlab.safeio import check_output_file

if TYPE_CHECKING:  # the optional dependency is imported only inside load()
    from transformer_lens import TransformerBridge

__all__ = [
    "CONFIG_KEY",
    "FORMAT",
    "arm_model_config",
    "default_name",
    "export_member",
    "load",
    "read_export",
    "tl_hook_name",
    "tl_shapes",
    "to_state_dict",
    "to_tl_config",
    "unsupported",
]

FORMAT = "tdlab-transformer-lens/1"  # metadata "format": what wrote the file, and which layout
CONFIG_KEY = "transformer_lens_config"  # metadata key of the TransformerBridgeConfig kwargs (JSON)
_LN_EPS = 1e-5  # tdlab.models.ensemble.EnsembleLayerNorm's eps, TL's default too; written explicitly
_INSTALL = "pip install 'tdlab[transformer-lens]'"
# GPT's hook points whose TransformerLens name differs (tdlab's final LayerNorm is ``ln_f``, and its final
# point exists without one too); every other point has TransformerLens's name.
_TL_HOOK_NAMES = {"hook_final": "ln_final.hook_out", "hook_logits": "hook_unembed"}


# --------------------------------------------------------------------------------------------------
# Architecture check and mapping (plain torch)
# --------------------------------------------------------------------------------------------------
def unsupported(cfg: GPTConfig) -> list[str]:
    """What the TransformerLens-native model lacks for ``cfg``: one phrase per missing feature (empty:
    the model exports exactly).

    The TL-native block is pre-LN only, with one normalisation type for the blocks and the final norm
    (LayerNorm or none), a token-embedding table and learned absolute positions (or rotary) only.
    Expressed by zero or identity weights, hence *not* refused: biases off (zeros), the tied head
    (the token table copied into the unembedding), no absolute positions (zero position table), no
    attention output projection (``W_O = I``), ``d_attn != d`` (TL's ``n_heads * d_head`` is free).
    """
    out = []
    if cfg.arch == "sec2":
        out.append(
            "arch 'sec2' (seed 000 Sec. 2) embeds a scalar token x_n e and predicts with a scalar "
            "sigmoid head: TransformerLens needs a token-embedding table W_E and a V-way unembedding"
        )
    norm = cfg.norm_placement
    if norm == "post":
        out.append("post-LN blocks (norm='post', seed 001 Eq. 18): TransformerLens blocks are pre-LN only")
    elif cfg.has_final_norm != (norm == "pre"):
        have = (
            "pre-LN blocks without a final LayerNorm" if norm == "pre" else "a final LayerNorm without block LayerNorms"
        )
        out.append(
            f"{have} (final_norm={cfg.final_norm}, norm={cfg.norm!r}): TransformerLens applies one "
            "normalisation type to every block and the final norm alike"
        )
    if cfg.positions in ("relative", "both"):
        if cfg.rel_encoding == "bias":
            out.append(
                f"relative-position bias (positions={cfg.positions!r}, rel_encoding='bias': a learned score "
                "per head and distance): TransformerLens has no learned relative-position attention bias"
            )
        else:
            out.append(
                f"relative key/value embeddings (positions={cfg.positions!r}, rel_encoding='kv', Shaw et al. "
                "2018): TransformerLens has no relative key/value position embeddings"
            )
    return out


def to_tl_config(cfg: GPTConfig) -> dict[str, Any]:
    """``TransformerBridgeConfig`` keyword arguments (JSON-ready) of the TL-native model equal to ``cfg``.

    Args:
        cfg: a tdlab GPT config that :func:`unsupported` accepts.
    Returns:
        ``{n_layers, d_model, n_ctx, d_head, n_heads, d_mlp, d_vocab, d_vocab_out, act_fn,
        normalization_type, positional_embedding_type, attn_only, eps, default_prepend_bos, init_weights}``.
        ``act_fn``: ``"gelu"`` is the exact erf GELU (``F.gelu``, what tdlab's ``gpt2`` uses), not
        GPT-2's tanh ``"gelu_new"``. ``d_mlp`` is ``None`` for attention-only models.
    Raises:
        ConfigError: naming every feature TransformerLens lacks (:func:`unsupported`).
    """
    _check_supported(cfg)
    return {
        "n_layers": cfg.layers,
        "d_model": cfg.d,
        "n_ctx": cfg.max_len,
        "d_head": cfg.attn_width // cfg.heads,  # n_heads * d_head = d_attn, which may differ from d
        "n_heads": cfg.heads,
        "d_mlp": cfg.ff_width if cfg.mlp else None,
        "d_vocab": cfg.vocab,
        "d_vocab_out": cfg.vocab,
        "act_fn": cfg.act,  # "gelu" (exact, F.gelu) or "relu": the same names in TL's activation table
        "normalization_type": "LN" if cfg.norm_placement == "pre" else None,
        "positional_embedding_type": "standard",  # learned table; zeros when tdlab has none
        "attn_only": not cfg.mlp,
        "eps": _LN_EPS,
        # tdlab sequences have no BOS token; TL would prepend one to *string* inputs only.
        "default_prepend_bos": False,
        # The weights come from the file: skip TL's random init when booting.
        "init_weights": False,
    }


def tl_hook_name(name: str, cfg: GPTConfig) -> str:
    """The TransformerLens hook name of tdlab GPT hook point ``name`` for an export of ``cfg``: the same name
    but for the final points (``hook_final`` -> ``ln_final.hook_out``, ``hook_logits`` -> ``hook_unembed``),
    and, in attention-only blocks (no ``hook_resid_mid`` in TransformerLens), ``blocks.{l}.hook_resid_mid`` ->
    ``blocks.{l}.hook_resid_post``, the same activation there."""
    if name in _TL_HOOK_NAMES:
        return _TL_HOOK_NAMES[name]
    if not cfg.mlp and name.endswith(".hook_resid_mid"):
        return name.removesuffix("hook_resid_mid") + "hook_resid_post"
    return name


def tl_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the state dict :func:`to_state_dict` returns for ``cfg`` (the TL-native
    model's own ``state_dict()`` keys): linear weights in ``(out, in)`` layout."""
    _check_supported(cfg)
    d, V, N, da, ff = cfg.d, cfg.vocab, cfg.max_len, cfg.attn_width, cfg.ff_width
    ln = cfg.norm_placement == "pre"
    shapes: dict[str, tuple[int, ...]] = {"embed.weight": (V, d), "pos_embed.weight": (N, d)}
    for layer in range(cfg.layers):
        b = f"blocks.{layer}"
        if ln:
            shapes |= {f"{b}.ln1.weight": (d,), f"{b}.ln1.bias": (d,)}
        for m in "qkv":
            shapes |= {f"{b}.attn.{m}.weight": (da, d), f"{b}.attn.{m}.bias": (da,)}
        shapes |= {f"{b}.attn.o.weight": (d, da), f"{b}.attn.o.bias": (d,)}
        if cfg.mlp:
            if ln:
                shapes |= {f"{b}.ln2.weight": (d,), f"{b}.ln2.bias": (d,)}
            shapes |= {
                f"{b}.mlp.in.weight": (ff, d),
                f"{b}.mlp.in.bias": (ff,),
                f"{b}.mlp.out.weight": (d, ff),
                f"{b}.mlp.out.bias": (d,),
            }
    if ln:
        shapes |= {"ln_final.weight": (d,), "ln_final.bias": (d,)}
    shapes |= {"unembed.weight": (V, d), "unembed.bias": (V,)}
    return shapes


def to_state_dict(params: Mapping[str, torch.Tensor], cfg: GPTConfig) -> dict[str, torch.Tensor]:
    """One member's tdlab parameters under the TL-native model's names and layouts.

    Args:
        params: member ``e``'s parameters without the member axis (``GPT.member_state(e)``, or one entry
            of ``RunWriter.load_arrays``): ``wte`` (V, d), ``wpe`` (N, d), ``blocks.{l}.attn.W_Q.weight``
            (d_attn, d), ... Every parameter must be used: one the mapping does not know is an error,
            never silently dropped.
        cfg: the member's architecture.
    Returns:
        ``{TL name: tensor}`` (:func:`tl_shapes`), every tensor its own contiguous copy (safetensors
        refuses shared storage, and the tied head is the token table twice). tdlab's
        ``EnsembleLinear`` stores ``(out, in)`` like ``nn.Linear``, so weights copy as they are;
        missing pieces become zeros (biases off, no position table) or the identity (no ``W_O``).
    Raises:
        ConfigError: an architecture TL cannot express (:func:`unsupported`), or ``params`` that do not
            fit ``cfg`` (missing or unknown names, wrong shapes), named.
    """
    shapes = tl_shapes(cfg)
    used: set[str] = set()
    ref = next(iter(params.values()), None)
    dtype = ref.dtype if ref is not None else torch.float32

    def take(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in params:
            raise ConfigError(
                f"parameters do not fit the model config: {name!r} {shape} is missing "
                f"(have: {', '.join(sorted(params))})"
            )
        t = params[name]
        if tuple(t.shape) != shape:
            raise ConfigError(
                f"parameters do not fit the model config: {name!r} has shape {tuple(t.shape)}, the config needs {shape}"
            )
        used.add(name)
        return t

    def opt(name: str, shape: tuple[int, ...], present: bool, fill: str = "zeros") -> torch.Tensor:
        if present:
            return take(name, shape)
        if fill == "eye":
            return torch.eye(shape[0], dtype=dtype)
        return torch.zeros(shape, dtype=dtype)

    d, V, N, da, ff = cfg.d, cfg.vocab, cfg.max_len, cfg.attn_width, cfg.ff_width
    ln = cfg.norm_placement == "pre"
    out: dict[str, torch.Tensor] = {
        "embed.weight": take("wte", (V, d)),
        "pos_embed.weight": opt("wpe", (N, d), cfg.positions in ("absolute", "both")),
    }
    for layer in range(cfg.layers):
        b = f"blocks.{layer}"
        if ln:
            out[f"{b}.ln1.weight"] = take(f"{b}.ln_1.weight", (d,))
            out[f"{b}.ln1.bias"] = take(f"{b}.ln_1.bias", (d,))
        for m, w in zip("qkv", ("W_Q", "W_K", "W_V"), strict=True):
            out[f"{b}.attn.{m}.weight"] = take(f"{b}.attn.{w}.weight", (da, d))
            out[f"{b}.attn.{m}.bias"] = opt(f"{b}.attn.{w}.bias", (da,), cfg.bias)
        # out_proj=False requires d_attn == d (GPTConfig's validator): W_O is then the identity.
        out[f"{b}.attn.o.weight"] = opt(f"{b}.attn.W_O.weight", (d, da), cfg.out_proj, fill="eye")
        out[f"{b}.attn.o.bias"] = opt(f"{b}.attn.W_O.bias", (d,), cfg.out_proj and cfg.bias)
        if cfg.mlp:
            if ln:
                out[f"{b}.ln2.weight"] = take(f"{b}.ln_2.weight", (d,))
                out[f"{b}.ln2.bias"] = take(f"{b}.ln_2.bias", (d,))
            out[f"{b}.mlp.in.weight"] = take(f"{b}.mlp.W_1.weight", (ff, d))
            out[f"{b}.mlp.in.bias"] = opt(f"{b}.mlp.W_1.bias", (ff,), cfg.bias)
            out[f"{b}.mlp.out.weight"] = take(f"{b}.mlp.W_2.weight", (d, ff))
            out[f"{b}.mlp.out.bias"] = opt(f"{b}.mlp.W_2.bias", (d,), cfg.bias)
    if ln:
        out["ln_final.weight"] = take("ln_f.weight", (d,))
        out["ln_final.bias"] = take("ln_f.bias", (d,))
    out["unembed.weight"] = take("wte", (V, d)) if cfg.tie_weights else take("lm_head", (V, d))
    out["unembed.bias"] = opt("lm_bias", (V,), cfg.has_head_bias)
    extra = sorted(set(params) - used)
    if extra:
        raise ConfigError(f"parameters do not fit the model config: {', '.join(extra)} are not part of it")
    assert {k: tuple(v.shape) for k, v in out.items()} == shapes  # the two descriptions agree
    return {k: v.detach().to("cpu").clone().contiguous() for k, v in out.items()}


def _check_supported(cfg: GPTConfig) -> None:
    missing = unsupported(cfg)
    if missing:
        raise ConfigError(
            "TransformerLens cannot express this model: "
            + "; ".join(missing)
            + ". Probe it with tdlab's named activations (GPT.run_with_cache) instead"
        )


# --------------------------------------------------------------------------------------------------
# From a run directory
# --------------------------------------------------------------------------------------------------
def _stored_arms(run: Run) -> list[str]:
    """Every arm with stored parameters, by name (``arrays/a__b.safetensors`` is arm ``a/b``)."""
    folder = run.path / "arrays"
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".safetensors")].replace("__", "/") for p in folder.glob("*.safetensors"))


def _named(names: list[str], limit: int = 30) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "") if names else "none"


def _experiment_config(run: Run) -> tuple[str, Any, Any]:
    """``(name, experiment, validated config)`` of a run (:func:`tdlab.experiments.base.stored_experiment`)."""
    # imports the run's experiment (its libraries): only when needed
    from tdlab.experiments.base import stored_experiment

    exp, cfg = stored_experiment(run.path)
    return exp.name, exp, cfg


# Experiments whose arms differ in their model: how each names an arm, and the config method that
# builds that arm's model (the experiments' own methods, so an export can never disagree with training).
def _resolve_known(name: str, cfg: Any, arm: str) -> GPTConfig | None:
    if name == "markov-init" and (m := re.fullmatch(r"([^/]+)/([^/]+)", arm)):
        return cfg.arm_model(m[1], m[2])
    if name == "markov-icl-depth" and (m := re.fullmatch(r"k(\d+)/L(\d+)/([^/]+)", arm)):
        return cfg.arm_model(int(m[2]), m[3])
    if name in ("markov-icl-depth-linear", "markov-icl-heads") and (
        m := re.fullmatch(r"([a-z]+)/k(\d+)/L(\d+)/H(\d+)", arm)
    ):
        return cfg.cell_model(m[1], int(m[3]), int(m[4]))
    return None


def arm_model_config(run_dir: Path, arm: str) -> GPTConfig:
    """The :class:`GPTConfig` arm ``arm`` of a run trained (``ARM@init`` / ``ARM@stepN``: that of ``ARM``).

    In order: the experiment's own ``arm_gpt_config(cfg, arm)`` if it defines one; the per-arm model
    methods of the experiments whose arms differ in their model (``markov-init``, ``markov-icl-depth``,
    ``markov-icl-depth-linear``, ``markov-icl-heads``); the config's one ``arm_model()`` /
    ``model_for_task()``; its ``model`` field. The caller checks the stored parameters against it name
    by name and shape by shape (:func:`to_state_dict`). Shapes cannot show the head count, the
    activation or pre- vs post-LN: those come from the experiment's own per-arm method, so an
    experiment that varies them per arm needs an entry above (or ``arm_gpt_config``) to export right.

    Raises:
        ConfigError: the experiment trains no tdlab GPT.
        RunDirError: the run directory or its config is unreadable.
    """
    run = Run(Path(run_dir))
    name, exp, cfg = _experiment_config(run)
    base = arm.split("@", 1)[0]  # ARM@init, ARM@step100: ARM's model
    found: Any = None
    hook = getattr(exp, "arm_gpt_config", None)
    try:
        if callable(hook):
            found = hook(cfg, base)
        if found is None:
            found = _resolve_known(name, cfg, base)
        for method in ("arm_model", "model_for_task"):
            if found is None and callable(getattr(cfg, method, None)):
                try:
                    found = getattr(cfg, method)()
                except TypeError:  # takes per-arm arguments this arm name does not give
                    found = None
        if found is None:
            found = getattr(cfg, "model", None)
    except ConfigError as exc:
        raise ConfigError(f"--arm {echo(arm)}: cannot rebuild its model config: {exc}") from None
    if not isinstance(found, GPTConfig):
        raise ConfigError(
            f"--arm {echo(arm)}: experiment {name} does not train a tdlab GPT "
            f"(tdlab.models.gpt); only GPT members export to TransformerLens"
        )
    return found


def default_name(run_dir: Path, arm: str, member: int) -> str:
    """``RUNID.ARM.mI.tl.safetensors`` (``/`` and ``@`` in the arm made ``_``)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", arm)
    return f"{Path(run_dir).name}.{slug}.m{member}.tl.safetensors"


def export_member(run_dir: Path, arm: str, member: int, out: str | Path | None = None) -> Path:
    """Write member ``member`` of arm ``arm`` of a run as a TransformerLens checkpoint; return its path.

    One ``.safetensors`` file: the weights (:func:`to_state_dict`) and, in its metadata, the
    ``TransformerBridgeConfig`` kwargs (:data:`CONFIG_KEY`, JSON), ``format`` (:data:`FORMAT`),
    ``dtype``, ``tdlab_model`` (the member's :class:`GPTConfig`) and ``source`` (run, experiment, arm,
    member). Load it with :func:`load`, or with TransformerLens alone (module docstring). Nothing in
    the run directory changes.

    Args:
        run_dir: a finished run directory.
        arm: an arm with stored parameters (``tdlab export`` lists them when it is unknown).
        member: ensemble member index, ``0 <= member < E``.
        out: the file to write (a regular file or a new name in an existing folder, outside every run
            directory); a folder: :func:`default_name` inside it (a name ending in ``/`` must be one);
            ``None``: that name in the current directory. Written atomically (temp file + rename).
    Raises:
        ConfigError: unknown arm or member (naming those that exist), an architecture TransformerLens
            cannot express (naming what it lacks), parameters that do not fit the arm's config, or
            an output path that cannot be written.
        RunDirError: a missing or corrupt run directory or arrays file.
    """
    run = Run(Path(run_dir))
    path = _out_path(run.path, arm, member, out)  # before any work: a bad --out is refused at once
    if isinstance(member, bool) or not isinstance(member, int):
        raise ConfigError(f"--member: {echo(member)} is not an integer member index")
    arms = _stored_arms(run)
    if arm not in arms:
        raise ConfigError(f"--arm: unknown arm {echo(arm)} in {run.path}; arms with stored parameters: {_named(arms)}")
    arrays = run.arrays(arm)
    if "wte" not in arrays and "e" not in arrays:  # GPT's token table (gpt2) or token vector (sec2)
        raise ConfigError(
            f"--arm {arm!r} holds no GPT parameters (it stores: {_named(sorted(arrays), 10)}); "
            f"only trained GPT members export to TransformerLens"
        )
    E = next(iter(arrays.values())).shape[0]
    if not 0 <= member < E:
        raise ConfigError(f"--member: {member} is out of range: arm {arm!r} has {E} members (0..{E - 1})")
    mcfg = arm_model_config(run.path, arm)
    missing = unsupported(mcfg)
    if missing:
        raise ConfigError(
            f"--to transformer-lens: arm {arm!r} cannot be exported, TransformerLens cannot express "
            f"this model: {'; '.join(missing)}. Probe it with tdlab's named activations "
            f"(GPT.run_with_cache) instead"
        )
    params = {k: v[member] for k, v in arrays.items()}
    try:
        state = to_state_dict(params, mcfg)
    except ConfigError as exc:
        raise ConfigError(
            f"--arm {arm!r}: the stored parameters do not match the model config rebuilt from "
            f"{run.path / 'config.yaml'}: {exc}"
        ) from None
    conf = run.config
    meta = {
        "format": FORMAT,
        CONFIG_KEY: json.dumps(to_tl_config(mcfg)),
        "dtype": str(next(iter(state.values())).dtype).removeprefix("torch."),
        "model_name": f"tdlab/{conf['experiment']}/{run.path.name}/{arm}/m{member}",
        "tdlab_model": json.dumps(mcfg.model_dump(mode="json")),
        "source": json.dumps(
            {"run": str(run.path.resolve()), "experiment": conf["experiment"], "arm": arm, "member": member}
        ),
    }
    try:
        atomic_write(path, save(state, metadata=meta))
    except OSError as exc:
        raise ConfigError(
            f"--out {echo(str(path))}: cannot write there ({exc.strerror or type(exc).__name__})"
        ) from None
    return path


def _out_path(run_dir: Path, arm: str, member: int, out: str | Path | None) -> Path:
    """The file to write: ``out``, or :func:`default_name` in the folder ``out`` (the current one when
    ``None``); checked by :func:`tdlab.safeio.check_output_file` (a regular file or a new name in an
    existing folder, never a device, never in a run directory). An existing file is replaced only when it is an
    export of ours; the filesystem's root is refused."""
    if out is None:
        path = check_output_file(Path.cwd() / default_name(run_dir, arm, member))
    else:
        folder = Path(out).expanduser()
        if folder.is_dir() and folder.resolve() == Path(folder.resolve().anchor):
            raise ConfigError(f"--out {echo(str(out))}: the filesystem's root; give a folder or a file name of yours")
        path = check_output_file(folder / default_name(run_dir, arm, member) if folder.is_dir() else out)
    if path.exists():  # replace an export of ours, never another file
        try:
            read_export(path)
        except ConfigError:
            raise ConfigError(
                f"--out {echo(str(path))}: exists and is not a tdlab TransformerLens export; give a new name"
            ) from None
    return path


# --------------------------------------------------------------------------------------------------
# Back in (needs TransformerLens)
# --------------------------------------------------------------------------------------------------
def read_export(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """``(TransformerBridgeConfig kwargs, metadata)`` of an exported file, checked.

    Raises:
        ConfigError: not a file :func:`export_member` wrote (named).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{echo(str(path))}: no such file")
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a safetensors file ({exc})") from None
    if meta.get("format") != FORMAT or CONFIG_KEY not in meta:
        raise ConfigError(
            f"{path}: not a tdlab TransformerLens export (metadata format {echo(meta.get('format'))}, "
            f"expected {FORMAT!r})"
        )
    try:
        cfg = json.loads(meta[CONFIG_KEY])
    except ValueError as exc:
        raise ConfigError(f"{path}: corrupt {CONFIG_KEY} metadata ({exc})") from None
    return cfg, meta


def load(path: Path, dtype: torch.dtype | None = None) -> TransformerBridge:
    """The TransformerLens model of an exported member: ``TransformerBridge.boot_native(cfg)`` +
    ``load_state_dict(weights, strict=True)``, no weight processing (no LayerNorm folding, centring or
    compatibility mode: the weights are tdlab's own), in eval mode.

    ``model(tokens (B, T) int64, return_type="logits") -> (B, T, V)`` equals tdlab's member logits
    (``GPT(cfg, seeds)(tokens[None])[member]``).

    Args:
        path: a file :func:`export_member` wrote.
        dtype: compute in this dtype (weights cast); ``None``: the stored one. ``torch.float64`` gives
            the exact function of float32-trained weights where float32 rounding matters (docs/export.md).
    Raises:
        ConfigError: TransformerLens is not installed (how to install it), or the file is not an export.
    """
    cfg, meta = read_export(path)
    try:
        from transformer_lens import TransformerBridge
    except ImportError:
        raise ConfigError(f"loading an export needs TransformerLens: {_INSTALL}") from None
    if dtype is None:
        dtype = getattr(torch, meta.get("dtype", "float32"), torch.float32)
    model = TransformerBridge.boot_native(cfg, dtype=dtype, model_name=meta.get("model_name", "tdlab"))
    model.load_state_dict({k: v.to(dtype) for k, v in load_file(str(path)).items()}, strict=True)
    return model.eval()

"""Checkpoint files that loading never executes: tensors in safetensors, everything else in JSON.

A checkpoint named ``DIR/NAME.json`` is two files::

    DIR/NAME.json                       seeds, config, step, scalars, metric rows, and the name, SHA-256
                                        and manifest (dtype, shape) of the tensor file
    DIR/NAME-<sha256[:16]>.safetensors  every tensor (model, optimiser, random streams, ...)

Writing is crash-safe without a folder swap: the tensor file gets a new, content-addressed name
(temp file + rename), then the JSON is replaced (temp file + rename) and only then the previous
tensor file is deleted. A process killed at any moment leaves the JSON pointing at a complete
tensor file whose hash it holds: the old checkpoint or the new one, never a mix.

Reading checks everything before anything is used: the JSON's shape, the tensor file's hash, and
every tensor's dtype and shape against the manifest. A pickle (``torch.save`` output, a legacy
``NAME.pt``) is refused unread: unpickling runs arbitrary code (:mod:`tdlab.safeio`). Any problem
raises :class:`CheckpointError`, one line naming the file.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save

from tdlab.safeio import (
    MAX_RUN_FILE_BYTES,
    PICKLE_SUFFIXES,
    CheckpointError,
    RunDirError,
    file_mode,
    legacy_pickles,
    read_inside,
    refuse_pickle,
)

__all__ = [
    "FORMAT",
    "CheckpointError",
    "check_origin",
    "is_int",
    "is_row",
    "legacy_pickles",
    "load_checkpoint",
    "pack_optimizer",
    "refuse_pickle",
    "remove_checkpoint",
    "save_checkpoint",
    "tensor_group",
    "unpack_optimizer",
    "unpack_rows",
]

FORMAT = "tdlab-checkpoint/1"
_MAX_JSON_BYTES = 1 << 30  # a checkpoint's JSON holds metric rows; a bigger file is not one tdlab wrote


def save_checkpoint(path: Path, meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """Write ``meta`` (JSON-able: numbers, strings, None, lists, dicts) and ``tensors`` as the
    checkpoint ``path`` (a ``.json`` file plus its tensor file), crash-safe (see the module)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cpu = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}  # clone: tied weights share memory
    blob = save(cpu) if cpu else b""
    digest = hashlib.sha256(blob).hexdigest()
    tensor_file = path.with_name(f"{path.stem}-{digest[:16]}.safetensors")
    manifest = {k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)} for k, v in cpu.items()}
    doc = {
        "format": FORMAT,
        "meta": meta,
        "tensors": {"file": tensor_file.name, "sha256": digest, "manifest": manifest},
    }
    text = json.dumps(doc, allow_nan=True)  # NaN/inf metric values round-trip; other types raise TypeError
    _write_atomically(tensor_file, blob)
    _write_atomically(path, text.encode())
    for old in _tensor_files(path):  # only now is the previous tensor file unused
        if old.name != tensor_file.name:
            old.unlink(missing_ok=True)


def remove_checkpoint(path: Path) -> None:
    """Delete the checkpoint ``path``: its JSON, then every tensor file of its name (a missing part is no
    error). Killed between the two, it leaves a tensor file no JSON names, which the next call removes."""
    path = Path(path)
    path.unlink(missing_ok=True)
    for f in _tensor_files(path):
        f.unlink(missing_ok=True)


def _tensor_files(path: Path) -> list[Path]:
    """The tensor files of the checkpoint ``path``: ``STEM-<16 hex digits>.safetensors`` exactly, never those of
    another checkpoint whose name extends this one's (``arm`` and ``arm-kv`` share a folder)."""
    pattern = re.compile(re.escape(path.stem) + r"-[0-9a-f]{16}\.safetensors")
    return [f for f in path.parent.glob(f"{glob.escape(path.stem)}-*.safetensors") if pattern.fullmatch(f.name)]


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]] | None:
    """``(meta, tensors)`` of the checkpoint ``path``, tensors on the CPU; ``None`` when there is none.

    Raises:
        CheckpointError: a pickle where the checkpoint should be (never unpickled), or a JSON /
            tensor file that is unreadable, of the wrong shape, or whose hash does not match.
    """
    path = Path(path)
    for legacy in (path.with_suffix(s) for s in PICKLE_SUFFIXES):
        if legacy.exists():
            raise refuse_pickle(legacy)
    if not os.path.lexists(path):
        return None
    raw = _read(path, _MAX_JSON_BYTES)  # a link, a FIFO or a folder in its place is refused, not "no checkpoint"
    if raw[:1] == b"\x80" or raw[:2] == b"PK":  # pickle protocol 2+ / torch.save's zip container
        raise refuse_pickle(path)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"{path} is corrupt: not JSON ({_short(exc)})") from None
    meta, entry = _check_document(path, doc)
    tensor_file = path.with_name(entry["file"])
    blob = _read(tensor_file, None)
    if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        raise CheckpointError(
            f"{tensor_file} is corrupt: its SHA-256 does not match {path.name} (truncated or changed)"
        )
    try:
        tensors = load(blob) if blob else {}
    except Exception as exc:  # safetensors raises its own error types for a damaged file
        raise CheckpointError(f"{tensor_file} is corrupt: {_short(exc)}") from None
    _check_manifest(tensor_file, tensors, entry["manifest"])
    return meta, tensors


def load_checked(
    path: Path | None, config_hash: str | None, expected: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]] | None:
    """:func:`load_checkpoint` of ``path`` refused by :func:`check_origin` when another run or fit wrote it;
    ``None`` when there is no path or no checkpoint there (what both trainers do before resuming)."""
    if path is None:
        return None
    loaded = load_checkpoint(path)
    if loaded is not None:
        check_origin(path, loaded[0], config_hash, expected)
    return loaded


def check_origin(path: Path, meta: dict[str, Any], config_hash: str | None, expected: dict[str, Any]) -> None:
    """Refuse to resume from the checkpoint ``path`` (``meta`` as loaded) when it was written for another run
    config (its ``config_hash`` differs from ``config_hash``; ``None``: not checked) or by another fit (any
    key of ``expected``, e.g. seeds and training config, differs).

    Raises:
        CheckpointError: naming the file and why it is refused.
    """
    if config_hash is not None and meta.get("config_hash") != config_hash:
        raise CheckpointError(
            f"checkpoint {path} was written for a different run config (config.yaml changed "
            f"after it was written); refusing to resume"
        )
    if any(meta.get(k) != v for k, v in expected.items()):
        raise CheckpointError(f"checkpoint {path} was written by a different config or seeds; refusing to resume")


def pack_optimizer(state: dict[str, Any], prefix: str = "opt/") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """An optimiser's ``state_dict`` as ``(JSON-able part, tensors)``: every tensor of parameter ``pid``'s
    state is named ``{prefix}{pid}/{key}``; its other values and the param groups stay in the JSON part."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, st in state["state"].items():
        scalars[str(pid)] = {}
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{prefix}{pid}/{k}"] = v
            else:
                scalars[str(pid)][k] = v
    return {"state": scalars, "param_groups": state["param_groups"]}, tensors


def unpack_optimizer(opt: dict[str, Any], tensors: dict[str, torch.Tensor], prefix: str = "opt/") -> dict[str, Any]:
    """An optimiser ``state_dict`` from :func:`pack_optimizer`'s JSON part and its tensors. Raises
    ``ValueError`` when the JSON part is malformed."""
    if not isinstance(opt.get("state"), dict) or not isinstance(opt.get("param_groups"), list):
        raise ValueError("optimiser state must be an object, its param groups a list")
    state: dict[int, dict[str, Any]] = {}
    for pid, scalars in opt["state"].items():
        if not pid.isdigit() or not isinstance(scalars, dict):
            raise ValueError(f"optimiser state {pid!r} is malformed")
        state[int(pid)] = {**scalars, **tensor_group(tensors, f"{prefix}{pid}/")}
    return {"state": state, "param_groups": opt["param_groups"]}


def tensor_group(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors whose name starts with ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def is_int(x: Any) -> bool:
    """An int that is not a bool (JSON's integers)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_row(r: Any) -> bool:
    """A metric row ``[step, member, name, value]`` as JSON holds it."""
    return (
        isinstance(r, list)
        and len(r) == 4
        and is_int(r[0])
        and is_int(r[1])
        and isinstance(r[2], str)
        and isinstance(r[3], (int, float))
        and not isinstance(r[3], bool)
    )


def unpack_rows(rows: Any) -> list[tuple[int, int, str, float]]:
    """Metric rows ``(step, member, name, value)`` from their JSON lists; ``ValueError`` when malformed."""
    if not isinstance(rows, list) or not all(is_row(r) for r in rows):
        raise ValueError("'rows' must be [step, member, name, value] lists")
    return [tuple(r) for r in rows]


def _check_document(path: Path, doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``meta`` and ``tensors`` entries of a checkpoint JSON, after checking their types."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a tdlab checkpoint (expected format {FORMAT!r})")
    meta, entry = doc.get("meta"), doc.get("tensors")
    if not isinstance(meta, dict) or not isinstance(entry, dict):
        raise CheckpointError(f"{path} is corrupt: 'meta' and 'tensors' must be objects")
    name, digest, manifest = entry.get("file"), entry.get("sha256"), entry.get("manifest")
    if not (
        isinstance(name, str) and name == Path(name).name and name.endswith(".safetensors") and not name.startswith(".")
    ):
        raise CheckpointError(f"{path} is corrupt: 'tensors.file' must be a .safetensors file name in the same folder")
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        raise CheckpointError(f"{path} is corrupt: 'tensors.sha256' must be a SHA-256 hex digest")
    if not isinstance(manifest, dict) or not all(
        isinstance(v, dict)
        and isinstance(v.get("dtype"), str)
        and isinstance(v.get("shape"), list)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v["shape"])
        for v in manifest.values()
    ):
        raise CheckpointError(f"{path} is corrupt: 'tensors.manifest' must map names to dtype and shape")
    return meta, entry


def _check_manifest(tensor_file: Path, tensors: dict[str, torch.Tensor], manifest: dict[str, Any]) -> None:
    """Every tensor the manifest lists, no other, each of its dtype and shape."""
    if set(tensors) != set(manifest):
        raise CheckpointError(f"{tensor_file} is corrupt: its tensors are not the ones its checkpoint lists")
    for k, t in tensors.items():
        if str(t.dtype).removeprefix("torch.") != manifest[k]["dtype"] or list(t.shape) != manifest[k]["shape"]:
            raise CheckpointError(
                f"{tensor_file} is corrupt: tensor {k!r} is not of the dtype/shape its checkpoint lists"
            )


def _read(path: Path, limit: int | None) -> bytes:
    """The bytes of the regular file ``path``, read without following a symlink and never past its size when
    opened (:func:`tdlab.safeio.read_inside`: a FIFO, a link to ``/dev/zero`` or a folder is refused, never
    waited on or read forever); a missing, unreadable, oversized or non-regular file is a
    :class:`CheckpointError`."""
    try:
        return read_inside(path.parent, path.name, limit if limit is not None else MAX_RUN_FILE_BYTES)
    except RunDirError as exc:
        raise CheckpointError(f"cannot read checkpoint file: {exc}") from None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync and rename (durable across a crash)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), file_mode())  # the run directory's one file mode, not mkstemp's 0600
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _short(exc: BaseException) -> str:
    """An exception's message on one short line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."

"""How tdlab touches files: reading never executes code or leaves a folder through a symlink,
writing is atomic with one file mode, and nothing is written into a finished run directory.

* **Never code.** Pickles (``torch.save`` output, ``*.pt``/``*.bin`` and friends) are refused unread:
  :func:`legacy_pickles` finds them, :func:`refuse_pickle` is the error.
* **Never out of a folder.** :func:`open_inside` opens ``ROOT/a/b/file`` one component at a time with
  ``O_NOFOLLOW`` (a symlink anywhere below ``ROOT`` is refused, loops included) and accepts only a
  regular file (no device, FIFO or socket); :func:`read_inside` and :func:`copy_inside` read at most
  the size the file had when it was opened, and at most :data:`MAX_RUN_FILE_BYTES`, so ``/dev/zero``
  or a file that keeps growing cannot fill a disk.
* **Atomic writes.** :func:`atomic_write`: temp file in the same folder + rename, mode
  :func:`file_mode` (``0o666 & ~umask``, what ``open()`` gives a new file); a whole folder (a site) is
  built aside and swapped in when complete (:func:`built_aside`).
* **Where output may go.** A finished run directory (or a staging folder) is read-only to every
  command but ``tdlab run --resume`` and ``tdlab report``: :func:`enclosing_run` finds the run a path
  lies in; :func:`check_output_file` and :func:`check_output_folder` refuse such targets, device
  nodes and paths that cannot be written, with one line naming the option.

* **YAML that cannot explode.** :func:`load_yaml` reads YAML with the safe loader and refuses a document that
  expands, through its aliases, past :data:`MAX_YAML_NODES` nodes or refers to itself (a "billion laughs"
  alias bomb is a few hundred bytes that any walk of it, a validation or a hash, would take forever over).

Every refusal is a :class:`RunDirError` (a file tdlab read) or a :class:`~tdlab.config.ConfigError`
(a path the user gave): one line, the CLI exits with code 2.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from tdlab.config import ConfigError, echo

__all__ = [
    "MAX_RUN_FILE_BYTES",
    "MAX_YAML_NODES",
    "PICKLE_SUFFIXES",
    "CheckpointError",
    "RunDirError",
    "YamlBombError",
    "atomic_write",
    "built_aside",
    "check_not_in_run",
    "check_output_file",
    "check_output_folder",
    "copy_inside",
    "enclosing_run",
    "file_mode",
    "folder_mode",
    "is_run_dir",
    "legacy_pickles",
    "load_yaml",
    "open_inside",
    "path_kind",
    "read_inside",
    "refuse_pickle",
]

PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin")
# The largest file a run can hold: a paper-profile arrays file (GPT-2 small x members x snapshots) is a
# few GB; no file tdlab writes comes near this, so a bigger one is not a run's and is not read.
MAX_RUN_FILE_BYTES = 64 << 30
_CHUNK = 1 << 20


class RunDirError(ValueError):
    """A run directory that is missing, incomplete or corrupt (the CLI exits with code 2)."""


class CheckpointError(RunDirError):
    """A checkpoint that is missing a part, corrupt, foreign or of another config (CLI: exit code 2)."""


# ---------------------------------------------------------------------------------------------- no code


MAX_YAML_NODES = 200_000  # far more than any config, staging file or sweep spec tdlab reads holds


class YamlBombError(ValueError):
    """A YAML document that expands past :data:`MAX_YAML_NODES` nodes through its aliases, or refers to itself."""


def load_yaml(text: str | bytes, loader: type[Any] | None = None) -> Any:
    """``text`` loaded with ``loader`` (default: PyYAML's ``SafeLoader``; never one that builds objects), its
    expanded size checked.

    Raises:
        yaml.YAMLError: not YAML.
        YamlBombError: it expands past :data:`MAX_YAML_NODES` nodes (an alias bomb) or contains itself.
    """
    import yaml

    loader = loader or yaml.SafeLoader
    if not (isinstance(loader, type) and issubclass(loader, yaml.SafeLoader)):
        raise TypeError("load_yaml takes PyYAML's SafeLoader or a subclass of it: no loader that builds objects")
    doc = yaml.load(text, Loader=loader)  # SafeLoader or a subclass of it, checked above
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(x: Any) -> int:
        if not isinstance(x, (dict, list)):
            return 1
        key = id(x)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise YamlBombError("it refers to itself through an alias")
        open_.add(key)
        total = 1
        for child in (*x.keys(), *x.values()) if isinstance(x, dict) else x:
            total += size(child)
            if total > MAX_YAML_NODES:
                raise YamlBombError(f"it expands past {MAX_YAML_NODES:,} nodes through its aliases (an alias bomb)")
        open_.discard(key)
        sizes[key] = total
        return total

    try:
        size(doc)
    except RecursionError:
        raise YamlBombError("it is nested too deeply") from None
    return doc


def legacy_pickles(folder: Path) -> list[Path]:
    """Files in ``folder`` that look like pickled checkpoints (``*.pt`` and friends); tdlab never
    loads them. Returns them sorted (empty when the folder does not exist)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)


def refuse_pickle(path: Path) -> CheckpointError:
    """The error for a pickle found where a checkpoint is expected (it is never opened)."""
    return CheckpointError(
        f"{path} is a pickled checkpoint (legacy or foreign); tdlab never unpickles "
        f"checkpoints (loading a pickle can run code): remove it to start the run over"
    )


# ------------------------------------------------------------------------------------------ atomic write


@cache
def _umask() -> int:
    """The process umask, read once: from /proc where it can be read without changing it, else by
    setting and restoring it (done once, so threads writing files later never see it changed)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode of every file tdlab writes: what ``open()`` gives a new file (0o666 & ~umask)."""
    return 0o666 & ~_umask()


def folder_mode() -> int:
    """The mode ``mkdir`` gives a new folder (0o777 & ~umask); ``mkdtemp``'s 0700 is made this."""
    return 0o777 & ~_umask()


def atomic_write(path: Path, data: bytes | str, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename. The file
    gets ``mode``, else :func:`file_mode` (mkstemp's 0600 would make some files of a run private and others
    not); a caller rewriting a file of the user's passes that file's own mode."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            os.fchmod(f.fileno(), file_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _swap(staging: Path, target: Path) -> None:
    """Put the finished ``staging`` folder in place of ``target`` (an earlier ``target`` is removed after)."""
    if not (target.exists() or target.is_symlink()):
        os.rename(staging, target)
        return
    old = staging.with_name(staging.name.replace(".building-", ".old-"))
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def built_aside(target: Path) -> Iterator[Path]:
    """A new hidden folder beside ``target`` (mode :func:`folder_mode`) to build a whole folder in: swapped
    in place of ``target`` when the block ends, removed when it raises (Ctrl-C included). A build that fails
    or is interrupted leaves ``target`` as it was, or absent, never half built."""
    target = Path(target)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.building-"))
    try:
        os.chmod(staging, folder_mode())  # mkdtemp's 0700 would make the folder private
        yield staging
        _swap(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# -------------------------------------------------------------------------------- reading inside a folder


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW on a symlink: ELOOP (EMLINK on some BSDs)
        return "a symlink (tdlab never follows symlinks out of a run directory)"
    if exc.errno == errno.ENOTDIR:
        return "a path through something that is not a folder (or a symlink)"
    return exc.strerror or type(exc).__name__


def open_inside(root: Path, rel: str | Path) -> tuple[int, int]:
    """``(fd, size)`` of the regular file ``root/rel``, opened read-only without following any symlink
    below ``root`` (``root`` itself may be one). The caller closes ``fd``.

    Raises:
        RunDirError: one line naming the file: missing, a symlink (or a loop), not a regular file
            (device, FIFO, socket, folder), over :data:`MAX_RUN_FILE_BYTES`, or unreadable.
    """
    root = Path(root)
    parts = Path(rel).parts
    shown = root.joinpath(*parts)
    if not parts or any(p in ("..", "/") for p in parts):
        raise RunDirError(f"{shown}: not a file inside {root}")
    nofollow = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise RunDirError(f"{root}: cannot open the folder ({_why(exc)})") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused as not regular below.
            flags = (os.O_RDONLY | os.O_NONBLOCK) if last else (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            try:
                nxt = os.open(part, flags | nofollow, dir_fd=fd)
            except OSError as exc:
                raise RunDirError(f"{shown}: cannot read it ({_why(exc)})") from None
            os.close(fd)
            fd = nxt
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunDirError(
                f"{shown}: not a regular file (a folder, device, FIFO or socket); tdlab reads only "
                f"the regular files a run writes"
            )
        if st.st_size > MAX_RUN_FILE_BYTES:
            raise RunDirError(f"{shown}: {st.st_size} bytes, more than any run file can be ({MAX_RUN_FILE_BYTES})")
        os.set_blocking(fd, True)
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


def _chunks(fd: int, size: int, shown: Path, limit: int) -> Iterator[bytes]:
    """Yield the file's bytes: exactly ``size`` of them (its size when opened), never more than ``limit``."""
    if size > limit:
        raise RunDirError(f"{shown}: {size} bytes, more than {limit} allowed for this file")
    left = size
    while left > 0:
        block = os.read(fd, min(_CHUNK, left))
        if not block:
            raise RunDirError(f"{shown}: shrank while it was read (being written by another process?)")
        left -= len(block)
        yield block
    if os.read(fd, 1):
        raise RunDirError(f"{shown}: grew while it was read (being written by another process?)")


def read_inside(root: Path, rel: str | Path, limit: int = MAX_RUN_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``root/rel`` (:func:`open_inside`), at most ``limit`` of them."""
    fd, size = open_inside(root, rel)
    try:
        return b"".join(_chunks(fd, size, Path(root, rel), limit))
    except OSError as exc:
        raise RunDirError(f"{Path(root, rel)}: cannot read it ({_why(exc)})") from None
    finally:
        os.close(fd)


def copy_inside(root: Path, rel: str | Path, dst: Path, limit: int = MAX_RUN_FILE_BYTES) -> None:
    """Copy the regular file ``root/rel`` (:func:`open_inside`, so never through a symlink and never
    more than its size when opened) to ``dst`` atomically (temp file + rename, :func:`file_mode`)."""
    fd, size = open_inside(root, rel)
    dst = Path(dst)
    tmp = None
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        out, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".tmp")
        with os.fdopen(out, "wb") as f:
            for block in _chunks(fd, size, Path(root, rel), limit):
                f.write(block)
            os.fchmod(f.fileno(), file_mode())
        os.replace(tmp, dst)
        tmp = None
    finally:
        os.close(fd)
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def path_kind(path: str | Path) -> str:
    """What ``path`` is, in the words of an error line: ``"a regular file"``, ``"a folder"``, ``"no such
    file"``, ``"a symlink that leads nowhere (broken, or a loop)"``, ``"a device, FIFO or socket"``."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        if os.path.islink(p):
            return "a symlink that leads nowhere (broken, or a loop)"
        return "no such file" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else (exc.strerror or "unreadable")
    if stat.S_ISREG(st.st_mode):
        return "a regular file"
    return "a folder" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"


# ------------------------------------------------------------------------------------- where output goes


def is_run_dir(folder: Path) -> bool:
    """A finished run directory (``config.yaml`` and ``metrics.parquet``) or a staging folder
    (``.staging-ID`` with its ``config.yaml``)."""
    folder = Path(folder)
    try:
        if not (folder / "config.yaml").is_file():
            return False
        return folder.name.startswith(".staging-") or (folder / "metrics.parquet").is_file()
    except OSError:
        return False


def enclosing_run(path: Path) -> Path | None:
    """The run directory (or staging folder) that ``path`` is or lies in, symlinks resolved; ``None``
    when there is none."""
    try:
        p = Path(path).expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop: not a place to write either, refused by the caller
        return None
    for folder in (p, *p.parents):
        if is_run_dir(folder):
            return folder
    return None


def check_not_in_run(path: Path, option: str) -> None:
    """Refuse (:class:`ConfigError` naming ``option``) a ``path`` that is or lies in a run directory."""
    run = enclosing_run(path)
    if run is not None:
        raise ConfigError(
            f"{option} {echo(str(path))}: inside the run directory {run}; a run directory is "
            f"read-only to every command but `tdlab run --resume` and `tdlab report`: "
            f"write somewhere else"
        )


def check_output_file(path: str | Path, option: str = "--out") -> Path:
    """``path`` as a file tdlab may (re)write: an existing regular file, or a new name in an existing
    folder; never a device, FIFO, socket, symlink or folder, never inside a run directory.

    A name ending in ``/`` means a folder and must be one. Returns the path.

    Raises:
        ConfigError: one line naming ``option`` and what is allowed.
    """
    text = str(path)
    p = Path(text).expanduser()
    if text.endswith(("/", os.sep)) and not p.is_dir():
        raise ConfigError(
            f"{option} {echo(text)}: no such folder (a name ending in '/' is a folder); "
            f"give an existing folder or a file name"
        )
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ConfigError(f"{option} {echo(text)}: cannot use this path ({_why(exc)})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = (
            "a symlink"
            if stat.S_ISLNK(st.st_mode)
            else "a folder"
            if stat.S_ISDIR(st.st_mode)
            else "a device, FIFO or socket"
        )
        raise ConfigError(
            f"{option} {echo(text)}: {kind}, not a regular file; give a regular file or a new "
            f"file name in an existing folder"
        )
    if not p.parent.is_dir():
        raise ConfigError(
            f"{option} {echo(text)}: the folder {echo(str(p.parent))} does not exist; give a "
            f"file name in an existing folder"
        )
    check_not_in_run(p, option)
    try:  # before any work is done: a folder that cannot be written in (/proc, read-only) is refused now
        fd, probe = tempfile.mkstemp(dir=p.parent, prefix=".tdlab-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{option} {echo(text)}: cannot write there ({_why(exc)})") from None
    return p


def check_output_folder(path: str | Path, option: str = "--out", make: bool = True) -> Path:
    """``path`` as a folder tdlab may write in: made when missing (``make``), writable (a probe file
    is created and removed: root passes ``os.access`` everywhere), not inside a run directory.

    Raises:
        ConfigError: one line naming ``option``: a file or device, a path under a file, a place that
            cannot be written (``/proc``, read-only), or a run directory.
    """
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{option} {echo(str(p))}: not a folder (a file or device); give a folder")
    check_not_in_run(p, option)
    try:
        if make:
            p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=p, prefix=".tdlab-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{option} {echo(str(p))}: cannot write there ({_why(exc)})") from None
    return p

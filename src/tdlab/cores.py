"""Runs that share a machine: passive OpenMP waiting, and a thread count from the cores that are free.

PyTorch's CPU kernels run on an OpenMP team whose idle threads spin while they wait for work. One run on
an idle machine does not notice; two or three runs at once (two terminals, a test suite beside a run, a
sweep) spin against each other, and every one slows many times over: measured on the 2-core machine, one
``markov-init`` run of 400 steps took 16 s alone, three at once 380 s, and 58 s with passive waiting.

- :func:`passive_openmp` sets ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep) unless the environment
  already chose; it must run before torch is imported, so ``tdlab.cli`` calls it first thing, and the test
  suite's ``conftest`` does too.
- :func:`claim_threads` gives a process its share of the cores it may use: those that other live tdlab
  processes do not already hold (each holds its count in a small file under :func:`registry`, named by its
  pid and removed when it exits; a file of a dead process is ignored), at least one; ``--threads N`` (or
  ``TDLAB_THREADS``, which sweeps and batches set for their runs) asks for ``N`` instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["claim_threads", "held_by_others", "passive_openmp", "registry", "release_threads"]


def passive_openmp() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless set (call before torch is imported: OpenMP reads it once)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def registry() -> Path:
    """The folder where live tdlab processes hold their thread counts (``TDLAB_CORES_DIR``, else one per user
    in the temporary folder)."""
    own = os.environ.get("TDLAB_CORES_DIR")
    return Path(own) if own else Path(tempfile.gettempdir()) / f"tdlab-cores-{os.getuid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def held_by_others(folder: Path | None = None) -> int:
    """Threads held by other live tdlab processes."""
    folder = folder or registry()
    total = 0
    for f in folder.glob("*.threads") if folder.is_dir() else []:
        try:
            pid, n = int(f.stem), int(f.read_text().strip() or 0)
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and _alive(pid):
            total += max(0, n)
    return total


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def claim_threads(requested: int | None = None, folder: Path | None = None) -> int:
    """This process's thread count, held in the registry until it exits: ``requested``, else the usable cores
    that other tdlab processes do not hold (at least one)."""
    folder = folder or registry()
    n = requested if requested is not None else max(1, usable_cores() - held_by_others(folder))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{os.getpid()}.threads").write_text(f"{n}\n")
        atexit.register(release_threads, folder)
    except OSError:  # a read-only or full temporary folder: the count still applies to this process
        pass
    return n


def release_threads(folder: Path | None = None) -> None:
    """Give this process's threads back (at exit)."""
    with contextlib.suppress(OSError):
        ((folder or registry()) / f"{os.getpid()}.threads").unlink(missing_ok=True)

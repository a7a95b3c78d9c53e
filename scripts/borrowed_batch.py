"""A paper batch on a borrowed machine: a GPU lent for minutes, a spot instance, any machine that holds a copy
of this repository and keeps nothing after it is given back. What the next machine needs comes back as a
few archives, each small enough to copy off such a machine.

    python scripts/borrowed_batch.py BACK [--state DIR] [--wheels DIR] [--results DIR] [--work DIR]
                                          [--part-mib 15] [--state-mib 40] [--carry-mib M] [-- BATCH ARGS...]

Every path is the caller's (made absolute before the batch runs in the repository). What comes back is checked
before it is unpacked: numbered parts without a gap, as many as their manifest (``state.tgz.json``) lists, one
whole gzip stream no larger than a state can be, and an archive of regular files and folders only.

1. **Wheels.** ``--wheels DIR`` with ``*.whl`` files (the packages the machine lacks) installs them with
   ``pip --no-index --no-deps`` into ``WORK/site``; tdlab itself runs from ``src/`` (no install).
2. **State.** ``--state DIR`` holding ``state.tgz.00``, ``.01``, … (the last machine's ``BACK``) unpacks the
   batch folder those parts hold (replacing what WORK/batch held): its stopped runs resume from their checkpoints.
3. **The batch.** ``tdlab batch --only-missing --results RESULTS --out WORK/batch BATCH ARGS`` (default
   profile: paper; ``--until``, ``--device cuda``, names, ``--set`` go after ``--``), so every experiment with a
   current record under ``RESULTS`` is left out.
4. **Back.** ``BACK/batch.log`` (the batch's output), ``BACK/records.tgz`` (the records this machine
   published, as ``PROFILE/NAME.json``: ``tar xzf BACK/records.tgz -C results``) and ``BACK/state.tgz.NN``
   (the batch folder's ``batch.json`` and its stopped runs' staging folders, in parts of at most
   ``--part-mib``). Finished runs travel as records; a staging folder that would take the state past
   ``--state-mib`` stays behind (that run starts anew next time), and the log says which. With
   ``--carry-mib M`` (what one call may send to a machine) the state is cut further, to what fits beside
   the repository and wheels that travel with it, so the next call can send it. The log ends with the last
   lines of each run's log: where each stopped run stands.

Exit code: the batch's (0 all finished, 3 runs left, 1 a run failed, 2 bad input); 2 also, with one line
and nothing written, when the ``--state`` parts do not make one whole archive (a part lost, cut short or damaged:
the gzip stream's CRC and length are checked before anything is unpacked).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def install_wheels(wheels: Path, site: Path) -> list[str]:
    """Install every ``*.whl`` in ``wheels`` into ``site`` (no index, no dependencies); their names."""
    files = sorted(str(p) for p in wheels.glob("*.whl"))
    if files:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        subprocess.run([*cmd, "--upgrade", "--target", str(site), *files], check=True)
    return [Path(f).name for f in files]


class StateError(Exception):
    """The state parts are not one whole archive of a batch folder (a part missing, cut short or not ours)."""


PART = "state.tgz."  # state.tgz.00, .01, ...: parts of one gzip stream, joined in numeric order
MANIFEST = "state.tgz.json"  # the part count and each part's SHA-256, written beside the parts
# A state unpacks to at most this many bytes (and at most STATE_RATIO times its packed size): checkpoints barely
# compress, so a state that inflates further is not one this script packed (a gzip bomb), refused unread.
MAX_STATE_BYTES = 4 << 30
STATE_RATIO = 32


def state_parts(state: Path) -> list[Path]:
    """The parts of the state in ``state``, in numeric order, checked: regular files named ``state.tgz.NN``
    (``NN`` digits, numbered 0, 1, ... without a gap), as many as the manifest says where there is one (a part
    left over from a longer earlier state is named, never joined).

    Raises:
        StateError: no part at all, a name or file of the wrong kind, a gap, or parts the manifest does not list.
    """
    if not state.is_dir():
        raise StateError(f"--state {state}: not a folder of state parts (state.tgz.00, ...); nothing was unpacked")
    found = [p for p in state.iterdir() if p.name.startswith(PART) and p.name != MANIFEST]
    if not found:
        raise StateError(f"--state {state}: holds no state part (state.tgz.00, ...); nothing was unpacked")
    numbered = {}
    for p in found:
        suffix = p.name[len(PART) :]
        if not (suffix.isascii() and suffix.isdigit()) or p.is_symlink() or not p.is_file():
            raise StateError(
                f"--state {state}: {p.name} is not a state part (a regular file state.tgz.NN); nothing was unpacked"
            )
        numbered[int(suffix)] = p
    if sorted(numbered) != list(range(len(numbered))):
        raise StateError(
            f"--state {state}: its parts are not numbered 0 to {len(numbered) - 1} without a gap (a part is lost); "
            "nothing was unpacked"
        )
    parts = [numbered[i] for i in range(len(numbered))]
    manifest = state / MANIFEST
    if manifest.is_file() and not manifest.is_symlink():
        try:
            doc = json.loads(manifest.read_text())
            listed = list(doc["sha256"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(
                f"--state {state}: {MANIFEST} is not what this script writes ({exc}); nothing was unpacked"
            ) from None
        if len(listed) != len(parts):
            raise StateError(
                f"--state {state}: {MANIFEST} lists {len(listed)} part(s) and the folder holds {len(parts)}: "
                "parts of another state are mixed in; nothing was unpacked"
            )
        for p, digest in zip(parts, listed, strict=True):
            if hashlib.sha256(p.read_bytes()).hexdigest() != digest:
                raise StateError(f"--state {state}: {p.name} is not the part {MANIFEST} lists; nothing was unpacked")
    return parts


def _inflate(data: bytes, where: Path) -> bytes:
    """The gzip stream ``data`` inflated, its CRC and length checked, refused past the size a state can have."""
    cap = min(MAX_STATE_BYTES, max(256 << 20, STATE_RATIO * len(data)))
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
        out = stream.read(cap + 1)  # a complete read checks the CRC and length at the stream's end
    if len(out) > cap:
        raise StateError(
            f"--state {where}: it inflates past {cap >> 20} MiB, more than a state holds; nothing was unpacked"
        )
    return out


def _checked_members(tar: tarfile.TarFile, where: Path) -> list[tarfile.TarInfo]:
    """The archive's members if it is what :func:`pack_state` writes: ``batch.json`` and ``.staging-*`` folders
    of regular files and folders, relative names without ``..``. A link, a device, a FIFO or a name that climbs
    out is refused before anything is written (Python's ``data`` filter alone lets symlink chains through)."""
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        top = parts[0] if parts else ""
        if (
            not (m.isfile() or m.isdir())
            or Path(m.name).is_absolute()
            or ".." in parts
            or not (m.name == "batch.json" or top.startswith(".staging-"))
        ):
            raise StateError(
                f"--state {where}: the archive holds {m.name!r} ({'a link' if m.issym() or m.islnk() else 'not a file'} "
                "or outside a batch folder), which this script never packs; nothing was unpacked"
            )
    return members


def unpack_state(state: Path, batch: Path) -> int:
    """Join ``state/state.tgz.*`` in order (:func:`state_parts`) and unpack it as the batch folder ``batch``; the
    number of parts. The state is the whole folder: what a folder of the same name held before (a machine that
    kept its work folder from an earlier call) is replaced, never merged with it (a stale checkpoint left beside
    the state's would be resumed, and carried back).

    Raises:
        StateError: the parts do not unpack (none there, a part missing, stale or cut short, not a tar.gz, a
            member this script never packs, more than a state can inflate to); ``batch`` is then left as it was
            and no unpacking folder stays behind.
    """
    parts = state_parts(state)
    data = b"".join(p.read_bytes() for p in parts)
    fresh = batch.with_name(f".{batch.name}.unpacking")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    try:
        # the whole stream first: its CRC and length catch a lost or damaged part, which a tar read that
        # stops at its last member would not (it would unpack damaged checkpoints without a word)
        tar_bytes = _inflate(data, state)
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            tar.extractall(fresh, members=_checked_members(tar, state), filter="data")
    except StateError:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, MemoryError) as exc:
        shutil.rmtree(fresh, ignore_errors=True)
        names = ", ".join(p.name for p in parts)
        raise StateError(
            f"--state {state}: its parts ({names}) do not unpack ({type(exc).__name__}: {str(exc)[:120]}): a part is "
            "missing, cut short or not what this script packs; nothing was unpacked"
        ) from None
    shutil.rmtree(batch, ignore_errors=True)
    os.replace(fresh, batch)
    return len(parts)


def digests(folder: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every record under ``folder`` (``PROFILE/NAME.json``)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*/*.json"))
    }


def pack_records(results: Path, before: dict[str, str], back: Path) -> list[str]:
    """``back/records.tgz`` of the records under ``results`` that are new or changed since ``before``."""
    changed = [r for r, h in digests(results).items() if before.get(r) != h]
    if changed:
        with tarfile.open(back / "records.tgz", "w:gz") as tar:
            for rel in changed:
                tar.add(results / rel, arcname=rel)
    return changed


def pack_state(batch: Path, back: Path, part_bytes: int, cap_bytes: int) -> tuple[list[str], list[str]]:
    """``back/state.tgz.NN``: ``batch.json`` and the staging folders of the stopped runs, smallest first while
    the total stays within ``cap_bytes``, split into parts of at most ``part_bytes``. Returns the staging
    folders packed and those left behind."""
    if not (batch / "batch.json").is_file():
        return [], []

    sizes = {
        d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        for d in batch.glob(".staging-*")
        if d.is_dir()
    }
    kept, left, total = [], [], (batch / "batch.json").stat().st_size
    for name in sorted(sizes, key=sizes.__getitem__):
        if total + sizes[name] <= cap_bytes:
            kept.append(name)
            total += sizes[name]
        else:
            left.append(name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(batch / "batch.json", arcname="batch.json")
        for name in kept:
            tar.add(batch / name, arcname=name)
    data = buf.getvalue()
    parts = [data[i : i + part_bytes] for i in range(0, max(len(data), 1), part_bytes)]
    # BACK may be the folder the state came from (the last call's BACK, replaced in place): the
    # new parts are written beside the old ones first, then replace them, and old parts past the new count go,
    # so a join never mixes two states
    for i, part in enumerate(parts):
        (back / f".new.state.tgz.{i:02d}").write_bytes(part)
    manifest = {"parts": len(parts), "sha256": [hashlib.sha256(part).hexdigest() for part in parts]}
    (back / f".new.{MANIFEST}").write_text(json.dumps(manifest) + "\n")
    for old in back.glob("state.tgz.*"):
        if old.is_symlink() or old.is_file():
            old.unlink()
    for i in range(len(parts)):
        os.replace(back / f".new.state.tgz.{i:02d}", back / f"state.tgz.{i:02d}")
    os.replace(back / f".new.{MANIFEST}", back / MANIFEST)
    return kept, left


def carried_bytes(repo: Path, skip: Path | None = None) -> int:
    """Bytes of every file under ``repo`` but those under ``skip``: on a machine that was sent a copy of the
    repository (no ``.git``), what the next call carries again besides the state."""
    skipped = skip.resolve() if skip is not None else None
    return sum(
        f.stat().st_size
        for f in repo.rglob("*")
        if f.is_file() and not f.is_symlink() and (skipped is None or not f.resolve().is_relative_to(skipped))
    )


def state_cap_mib(state_mib: float, carry_mib: float | None, repo: Path, state: Path | None) -> float:
    """The state to carry back, in MiB: ``state_mib``, or less where ``carry_mib`` (what one call may send to
    a machine) leaves less beside the repository and wheels that travel with it (the last state, ``state``,
    is replaced by the new one). A margin of 1 MiB is kept."""
    if carry_mib is None:
        return state_mib
    return max(0.0, min(state_mib, carry_mib - carried_bytes(repo, state) / 2**20 - 1.0))


def _log_tails(batch: Path, lines: int = 2) -> list[str]:
    """The last lines of each run's log (``logs/NAME.log``): where each stopped run stands."""
    out = []
    for log in sorted((batch / "logs").glob("*.log")):
        tail = [t for t in log.read_text(errors="replace").splitlines() if t.strip()][-lines:]
        out += [f"{log.stem}: {t.strip()[:300]}" for t in tail]
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("back", type=Path, help="the folder that comes back from the machine (created)")
    ap.add_argument("--state", type=Path, help="the last machine's BACK: its state.tgz.* parts are resumed")
    ap.add_argument("--wheels", type=Path, help="a folder of *.whl files to install first")
    ap.add_argument("--results", type=Path, default=REPO / "results", help="the published records (default: results/)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/borrowed"), help="where the batch folder is made")
    ap.add_argument("--part-mib", type=float, default=15.0, help="largest archive part, MiB")
    ap.add_argument("--state-mib", type=float, default=40.0, help="largest state carried back, MiB")
    ap.add_argument(
        "--carry-mib",
        type=float,
        help="what one call may send to a machine, MiB (64 for this workplace's GPUs): the state carried back "
        "is cut to what fits beside this repository and its wheels, so it can go in again",
    )
    args = ap.parse_args(own)
    # the batch runs in the repository: a relative path means the caller's folder, not the repository's
    for name in ("back", "state", "wheels", "results", "work"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).expanduser().resolve())
    if args.part_mib <= 0 or args.state_mib < 0 or (args.carry_mib is not None and args.carry_mib <= 0):
        ap.error("--part-mib and --carry-mib must be > 0 and --state-mib >= 0")
    cap_mib = state_cap_mib(args.state_mib, args.carry_mib, REPO, args.state)
    if args.carry_mib is not None:
        print(f"state carried back: at most {cap_mib:.1f} MiB (of --carry-mib {args.carry_mib:g})", flush=True)
    batch = args.work / "batch"
    if args.state is not None:  # before anything is written: a state that does not unpack stops here
        try:
            n = unpack_state(args.state, batch)
        except StateError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
        print(f"resumed the batch folder from {n} state part(s)", flush=True)
    args.back.mkdir(parents=True, exist_ok=True)
    paths = [str(REPO / "src")]
    if args.wheels is not None:
        names = install_wheels(args.wheels, args.work / "site")
        print(f"installed {len(names)} wheel(s): {', '.join(names)}", flush=True)
        paths.insert(0, str(args.work / "site"))
    before = digests(args.results)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    # the batch writes into a pipe and batch.log: rich would wrap its table at 80 columns, a row a line reads better
    env.setdefault("COLUMNS", "200")
    cmd = [sys.executable, "-m", "tdlab.cli", "batch", "--only-missing", "--results", str(args.results)]
    cmd += ["--out", str(batch), *extra]
    with open(args.back / "batch.log", "w") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        rc = proc.wait()
        records = pack_records(args.results, before, args.back)
        kept, left = pack_state(batch, args.back, int(args.part_mib * 2**20), int(cap_mib * 2**20))
        notes = [
            *_log_tails(batch),
            f"records back: {', '.join(records) or 'none'}",
            f"stopped runs carried back: {', '.join(kept) or 'none'}",
        ]
        if left:
            notes.append(f"left behind (past {cap_mib:.1f} MiB of state; they start anew): {', '.join(left)}")
        for note in notes:
            print(note, flush=True)
            log.write(note + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())

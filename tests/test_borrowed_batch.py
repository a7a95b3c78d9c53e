"""``scripts/borrowed_batch.py``: a batch stopped on one machine comes back as archive parts, resumes on a
second machine that has only those parts (another work folder), and its records come back as one archive;
the state carried back stays within its cap."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "borrowed_batch.py"
SETS = [
    "train.steps=6000",  # long enough that --until 15s stops it on a fast idle machine
    "train.seq_len=16",
    "train.eval_every=250",
    "train.eval_batches=1",
    "archs=[sec2]",
    "members=2",
]


def _load():
    spec = importlib.util.spec_from_file_location("borrowed_batch", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _borrowed(back: Path, work: Path, results: Path, *args: str, state: Path | None = None, until: str | None = None):
    cmd = [sys.executable, str(SCRIPT), str(back), "--work", str(work), "--results", str(results)]
    cmd += ["--state", str(state)] if state else []
    cmd += ["--", "markov-init", "--profile", "quick", "--jobs", "1", "--threads", "1", "--checkpoint-every", "1m"]
    cmd += ["--until", until] if until else []
    for s in SETS:
        cmd += ["--set", s]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_a_batch_stopped_on_one_machine_finishes_on_another_from_the_parts_it_sent_back(tmp_path):
    results = tmp_path / "results"
    first = _borrowed(tmp_path / "back1", tmp_path / "machine1", results, until="15s")
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]
    parts = sorted((tmp_path / "back1").glob("state.tgz.*"))
    assert parts and "stopped runs carried back: .staging-markov-init" in first.stdout
    assert not (tmp_path / "back1" / "records.tgz").exists() and "records back: none" in first.stdout
    assert (tmp_path / "back1" / "batch.log").read_text().startswith(first.stdout[:40])
    assert "\nmarkov-init: " in first.stdout  # where the stopped run stands, from the tail of its log

    second = _borrowed(tmp_path / "back2", tmp_path / "machine2", results, state=tmp_path / "back1")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resumed the batch folder from 1 state part(s)" in second.stdout
    assert "resume" in second.stdout and "1 finished, 0 left" in second.stdout
    with tarfile.open(tmp_path / "back2" / "records.tgz") as tar:
        assert tar.getnames() == ["quick/markov-init.json"]
        rec = json.load(tar.extractfile("quick/markov-init.json"))  # type: ignore[arg-type]
    assert rec["experiment"] == "markov-init" and rec["members"] == 2

    third = _borrowed(tmp_path / "back3", tmp_path / "machine3", results)
    assert third.returncode == 0 and "nothing to run" in third.stdout, third.stdout[-3000:]


def test_the_state_carried_back_keeps_within_its_cap_and_splits_into_parts(tmp_path):
    mod = _load()
    batch = tmp_path / "batch"
    for name, size in (("a", 3000), ("b", 50_000)):
        (batch / f".staging-{name}").mkdir(parents=True)
        (batch / f".staging-{name}" / "blob").write_bytes(random.Random(size).randbytes(size))  # incompressible
    (batch / "batch.json").write_text("{}")
    (batch / "finished").mkdir()
    back = tmp_path / "back"
    back.mkdir()
    kept, left = mod.pack_state(batch, back, part_bytes=1000, cap_bytes=10_000)
    assert kept == [".staging-a"] and left == [".staging-b"]
    assert len(list(back.glob("state.tgz.*"))) >= 2
    assert mod.unpack_state(back, tmp_path / "again") >= 2
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == [".staging-a", "batch.json"]
    assert (tmp_path / "again" / ".staging-a" / "blob").read_bytes() == (batch / ".staging-a" / "blob").read_bytes()


def test_with_carry_mib_the_state_fits_beside_the_repository_that_travels_again(tmp_path):
    mod = _load()
    repo, state = tmp_path / "repo", tmp_path / "repo" / "back1"
    (repo / ".whl").mkdir(parents=True)
    (repo / ".whl" / "w.whl").write_bytes(b"0" * (3 << 20))  # wheels and sources: 3 MiB travel every time
    state.mkdir()
    (state / "state.tgz.00").write_bytes(b"0" * (10 << 20))  # the last state: replaced by the new one
    assert mod.carried_bytes(repo, state) == 3 << 20
    assert mod.state_cap_mib(40.0, 8.0, repo, state) == 8.0 - 3.0 - 1.0
    assert mod.state_cap_mib(2.0, 8.0, repo, state) == 2.0  # --state-mib still bounds it
    assert mod.state_cap_mib(40.0, None, repo, state) == 40.0
    assert mod.state_cap_mib(40.0, 3.5, repo, None) == 0.0  # nothing fits: every run starts anew


def test_a_state_packed_into_the_folder_it_came_from_replaces_every_old_part(tmp_path):
    mod = _load()
    kept_state = tmp_path / "state"  # the state kept in the repository: BACK and --state are one folder
    kept_state.mkdir()
    for i in range(3):  # the last machine's state: three parts
        (kept_state / f"state.tgz.{i:02d}").write_bytes(b"old")
    batch = tmp_path / "batch"
    (batch / ".staging-a").mkdir(parents=True)
    (batch / ".staging-a" / "blob").write_bytes(b"new state")
    (batch / "batch.json").write_text("{}")
    mod.pack_state(batch, kept_state, part_bytes=10_000, cap_bytes=10_000)
    assert sorted(p.name for p in kept_state.iterdir()) == ["state.tgz.00", "state.tgz.json"]
    assert mod.unpack_state(kept_state, tmp_path / "again") == 1
    assert (tmp_path / "again" / ".staging-a" / "blob").read_bytes() == b"new state"


def _binary_state(paths: list[str]) -> list[str]:
    """The paths of ``paths`` that are run state in binary form: archives (``.tgz``, ``.tar.gz``) and the
    numbered parts of one (``state.tgz.00``)."""
    return [p for p in paths if p.endswith((".tgz", ".tar.gz")) or ".tgz." in Path(p).name]


def test_the_repository_tracks_no_binary_run_state():
    """A paper run too long for the CPU waits for a GPU: its state is not kept in the tree between sessions."""
    root = SCRIPT.parents[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    assert _binary_state(tracked.splitlines()) == []


def test_the_binary_state_finder_sees_archives_and_their_parts():
    paths = ["batch-state/cuda/state.tgz.00", "a/records.tgz", "b.tar.gz", "results/paper/x.json", "docs/tgz.md"]
    assert _binary_state(paths) == ["batch-state/cuda/state.tgz.00", "a/records.tgz", "b.tar.gz"]


def test_the_state_replaces_what_the_work_folder_held_before(tmp_path):
    mod = _load()
    batch = tmp_path / "batch"
    (batch / ".staging-a" / "checkpoints").mkdir(parents=True)
    (batch / ".staging-a" / "checkpoints" / "fit.json").write_text("state")
    (batch / "batch.json").write_text("{}")
    back = tmp_path / "back"
    back.mkdir()
    mod.pack_state(batch, back, part_bytes=10_000, cap_bytes=10_000)
    # the same work folder, kept by the machine, with a checkpoint the state does not hold (written after it)
    (batch / ".staging-a" / "checkpoints" / "stale.json").write_text("stale")
    (batch / ".staging-b").mkdir()
    assert mod.unpack_state(back, batch) == 1
    assert sorted(p.name for p in batch.rglob("*")) == [".staging-a", "batch.json", "checkpoints", "fit.json"]


def test_a_state_that_does_not_unpack_exits_2_in_one_line_and_leaves_the_work_folder_as_it_was(tmp_path):
    mod = _load()
    batch = tmp_path / "src" / "batch"
    (batch / ".staging-a").mkdir(parents=True)
    (batch / ".staging-a" / "weights.bin").write_bytes(random.Random(0).randbytes(20_000))  # 5 parts of 4 KB
    (batch / "batch.json").write_text("{}")
    whole = tmp_path / "whole"
    whole.mkdir()
    mod.pack_state(batch, whole, part_bytes=4_000, cap_bytes=1_000_000)
    parts = sorted(whole.glob("state.tgz.[0-9]*"))  # the parts, without their manifest
    assert len(parts) >= 3
    cut, gap = tmp_path / "cut", tmp_path / "gap"
    for folder, keep in ((cut, parts[:-1]), (gap, [parts[0], *parts[2:]])):  # the last part lost; a middle one
        folder.mkdir()
        for p in keep:
            (folder / p.name).write_bytes(p.read_bytes())
    work = tmp_path / "machine"
    (work / "batch").mkdir(parents=True)
    (work / "batch" / "mine").write_text("kept")
    for state in (cut, gap):
        back = tmp_path / f"back-{state.name}"
        res = subprocess.run(
            [sys.executable, str(SCRIPT), str(back), "--work", str(work), "--state", str(state), "--", "--plan"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.startswith("error: --state") and len(res.stderr.splitlines()) == 1, res.stderr
        assert "nothing was unpacked" in res.stderr and "Traceback" not in res.stderr
        assert not back.exists()
        assert sorted(p.name for p in work.rglob("*")) == ["batch", "mine"]  # no half-unpacked folder beside it
    assert mod.unpack_state(whole, work / "batch") == len(parts)  # the whole state still unpacks


# ------------------------------------------------------------------------------------------------
# Hostile state: what comes back from a machine is checked before anything is unpacked.


def _state_of(folder: Path, members) -> Path:
    """``folder/state.tgz.00``: one gzip'd tar of ``members`` (``(TarInfo, bytes | None)``)."""
    import gzip
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.tgz.00").write_bytes(gzip.compress(buf.getvalue()))
    return folder


def _run_state(tmp_path: Path, state: Path, back: str = "back"):
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / back), "--work", str(tmp_path / "machine"), "--state", str(state),
         "--", "--plan"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _refused(res, tmp_path: Path) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("error: --state") and len(res.stderr.splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "back").exists()
    assert not list((tmp_path / "machine").glob(".*unpacking")) if (tmp_path / "machine").exists() else True


def test_a_state_with_links_that_climb_out_is_refused_before_anything_is_written(tmp_path):
    """The tar-filter bypass of CVE-2025-4517: symlink chains, then a file written through them (Python 3.11's
    ``filter="data"`` lets it through). The state holds only files and folders; a link is refused unread."""
    target = tmp_path / "repo" / "src"
    target.mkdir(parents=True)
    chain = []
    for name, link in (
        (".staging-a/l0", "."),
        (".staging-a/l1", "l0/" + "../" * 6),
        (".staging-a/escape", f"l1{target}"),
    ):
        info = tarfile.TarInfo(name)
        info.type, info.linkname = tarfile.SYMTYPE, link
        chain.append((info, None))
    payload = b"import os; os.system('echo pwned')\n"
    evil = tarfile.TarInfo(".staging-a/escape/sitecustomize.py")
    evil.size = len(payload)
    res = _run_state(tmp_path, _state_of(tmp_path / "state", [*chain, (evil, payload)]))
    _refused(res, tmp_path)
    assert "a link" in res.stderr and not (target / "sitecustomize.py").exists()
    hard = tarfile.TarInfo(".staging-a/h")
    hard.type, hard.linkname = tarfile.LNKTYPE, "/etc/passwd"
    _refused(_run_state(tmp_path, _state_of(tmp_path / "state2", [(hard, None)])), tmp_path)
    outside = tarfile.TarInfo("src/sitecustomize.py")  # a regular file, but not in a batch folder
    outside.size = len(payload)
    _refused(_run_state(tmp_path, _state_of(tmp_path / "state3", [(outside, payload)])), tmp_path)


def test_a_gzip_bomb_is_refused_unread_and_leaves_no_unpacking_folder(tmp_path):
    import gzip

    state = tmp_path / "state"
    state.mkdir()
    mod = _load()
    (state / "state.tgz.00").write_bytes(gzip.compress(bytes(mod.MAX_STATE_BYTES // 16 + (300 << 20)), 9))
    assert (state / "state.tgz.00").stat().st_size < 3 << 20
    res = _run_state(tmp_path, state)
    _refused(res, tmp_path)
    assert "inflates past" in res.stderr


def test_parts_are_named_numbered_and_counted_before_they_are_joined(tmp_path):
    mod = _load()
    batch = tmp_path / "src" / "batch"
    (batch / ".staging-a").mkdir(parents=True)
    (batch / ".staging-a" / "weights.bin").write_bytes(random.Random(1).randbytes(300_000))
    (batch / "batch.json").write_text("{}")
    many = tmp_path / "many"
    many.mkdir()
    mod.pack_state(batch, many, part_bytes=2_500, cap_bytes=10_000_000)
    assert len(list(many.glob("state.tgz.[0-9]*"))) > 101  # .10 sorts before .2 by name: joined by number
    assert mod.unpack_state(many, tmp_path / "w1" / "batch") == len(list(many.glob("state.tgz.[0-9]*")))
    assert (tmp_path / "w1" / "batch" / ".staging-a" / "weights.bin").read_bytes() == (
        batch / ".staging-a" / "weights.bin"
    ).read_bytes()
    # a part left over from a longer earlier state: the manifest counts the parts, nothing is joined
    n = len(list(many.glob("state.tgz.[0-9]*")))
    (many / f"state.tgz.{n:02d}").write_bytes(b"stale")
    _refused(_run_state(tmp_path, many), tmp_path)
    (many / f"state.tgz.{n:02d}").unlink()
    # a folder where a part should be, a name that is not a number, no part at all (a typo in --state)
    odd = tmp_path / "odd"
    (odd / "state.tgz.01").mkdir(parents=True)
    (odd / "state.tgz.00").write_bytes(b"x")
    _refused(_run_state(tmp_path, odd), tmp_path)
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "state.tgz.x1").write_bytes(b"x")
    _refused(_run_state(tmp_path, tmp_path / "named"), tmp_path)
    res = _run_state(tmp_path, tmp_path / "no-such-folder")
    _refused(res, tmp_path)
    (tmp_path / "empty").mkdir()
    assert "holds no state part" in _run_state(tmp_path, tmp_path / "empty").stderr


def test_a_typo_in_state_never_replaces_the_parts_of_back(tmp_path):
    """``--state BACK-typo BACK``: refused before the batch runs, so BACK's parts (the progress) stay."""
    back = tmp_path / "back"
    back.mkdir()
    (back / "state.tgz.00").write_bytes(b"the progress")
    res = subprocess.run(
        [sys.executable, str(SCRIPT), str(back), "--work", str(tmp_path / "m"), "--state", str(tmp_path / "bakc"),
         "--", "--plan"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2 and (back / "state.tgz.00").read_bytes() == b"the progress"


def test_relative_paths_are_the_callers_not_the_repositorys(tmp_path):
    mod = _load()
    caller = tmp_path / "elsewhere"
    caller.mkdir()
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "back", "--work", "work", "--results", "res", "--", "--plan"],
        capture_output=True, text=True, timeout=300, cwd=caller,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert (caller / "back" / "batch.log").is_file()
    assert not (mod.REPO / "back").exists() and not (mod.REPO / "work").exists()

"""The 92 bad inputs of the hardening review of the newer surfaces (model checkpoints, ``from_run``,
``export``, ``atlas``, ``findings``, user data files), each checked against the README's promise.

The promise: bad input gives ONE line on stderr (``error: ...``) naming the field or file, exit code 2,
no traceback, nothing half-written; no code from a file is ever executed; nothing outside the target
folder is touched; no run directory changes except by ``tdlab run --resume`` / ``tdlab report``. A valid
input on the same surface (an ``ok`` case) exits 0 and changes no run it reads.

23 inputs are the ones the review found mishandled (``item`` names the review's item; an input with
several forms, e.g. ``--readme`` missing / a folder / not UTF-8, passes only if every form does); the
other 69 are the cases of the same surfaces that the review found handled. Run as a script to count::

    python tests/robustness/hardening_inputs.py            # prints every case and "N of 92 handled as promised"
    python tests/robustness/hardening_inputs.py ID ...     # only these cases

Each case runs in a child process forked from a fork server (the CLI in-process, stdin given, files
limited to 64 MB so a copy from /dev/zero cannot fill the disk) under a time limit (a hang is a failure). The script uses only
what every tdlab version has (the CLI, ``RunIndex``), so the same inputs can be counted on old code
(``PYTHONPATH=OLD/src python tests/robustness/hardening_inputs.py``).
``test_hardening_inputs.py`` runs every case as a test.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import resource
import shutil
import signal
import sqlite3
import stat
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TINY = [
    "--set",
    "train.steps=4",
    "--set",
    "train.seq_len=8",
    "--set",
    "train.eval_every=2",
    "--set",
    "train.eval_batches=1",
    "--seeds",
    "1",
    "--set",
    "archs=[gpt2]",
    "--set",
    "inits=[standard]",
    "--quiet",
]
ARM = "gpt2/standard"
ARM_FILE = "gpt2__standard.safetensors"
FILE_LIMIT = 64 << 20  # RLIMIT_FSIZE of a case: a copy without end stops here
PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "apple", "banana", "##s", "boat", "ship", "sail", "the"]


# ------------------------------------------------------------------------------------------ the harness


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


@dataclass
class Spec:
    """One invocation and what it must do. ``expect``: "refuse" (the promise) or "ok" (exit 0).
    ``names``: the error line names one of them. ``watch``: folders that must not change.
    ``check(result) -> problem or None``: anything else the case needs."""

    argv: list[str]
    names: list[str] = field(default_factory=list)
    expect: str = "refuse"
    watch: list[Path] = field(default_factory=list)
    cwd: Path | None = None
    input: str | None = None
    check: Callable[[Result], str | None] | None = None


@dataclass
class Case:
    id: str
    surface: str
    item: str | None  # the review's item, for the 23 mishandled inputs
    make: Callable[[Any, Path], list[Spec] | Callable[[], str | None]]
    timeout: float = 120.0


CASES: list[Case] = []


def case(id: str, surface: str, item: str | None = None, timeout: float = 120.0):
    def deco(fn):
        CASES.append(Case(id, surface, item, fn, timeout))
        return fn

    return deco


def invoke(argv: list[str], input: str | None = None) -> Result:
    """``tdlab ARGV`` in-process (the real command group); an exception that escapes it is a traceback."""
    from typer.testing import CliRunner

    import tdlab.cli as cli

    r = CliRunner().invoke(cli.app, [str(a) for a in argv], input=input)
    err = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        err += "".join(traceback.format_exception(r.exception))
    return Result(r.exit_code, r.stdout, err)


def digest(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` without following symlinks: files by content, links by target."""
    out: dict[str, str] = {}
    if not os.path.lexists(folder):
        return out
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            if name.endswith(("-wal", "-shm")):  # SQLite's own bookkeeping beside index.sqlite
                continue
            p = Path(root, name)
            st = os.lstat(p)
            rel = str(p.relative_to(folder))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "-> " + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = hashlib.sha1(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir" if stat.S_ISDIR(st.st_mode) else f"mode {st.st_mode:o}"
    return out


def judge(spec: Spec) -> str | None:
    """Run one invocation; ``None`` when it kept the promise, else what went wrong."""
    before = {w: digest(w) for w in spec.watch}
    old = os.getcwd()
    if spec.cwd is not None:
        os.chdir(spec.cwd)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, hard))
        r = invoke(spec.argv, spec.input)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        os.chdir(old)
    text = r.stdout + r.stderr
    if "Traceback" in text:
        return f"traceback ({text.count(chr(10))} lines): {text.strip().splitlines()[-1][:200]}"
    if spec.expect == "ok":
        if r.exit_code != 0:
            return f"exit {r.exit_code}, expected 0: {r.stderr.strip()[:300]}"
    else:
        lines = r.stderr.splitlines()
        if r.exit_code != 2:
            return f"exit {r.exit_code}, expected 2: {text.strip()[-300:]}"
        if len(lines) != 1 or not lines[0].startswith("error: "):
            return f"{len(lines)} lines on stderr, expected one 'error:' line: {r.stderr[:300]!r}"
        if spec.names and not any(n in lines[0] for n in spec.names):
            return f"the line names none of {spec.names}: {lines[0][:300]}"
    for w, d in before.items():
        after = digest(w)
        if after != d:
            changed = sorted(set(after.items()) ^ set(d.items()))[:3]
            return f"{w} changed: {changed}"
    if spec.check is not None:
        return spec.check(r)
    return None


def _server() -> Any:
    """The multiprocessing context cases run in: children forked from a fork server, a fresh process
    that imported tdlab and never ran torch (a fork of a process whose thread pools ran can deadlock,
    and pytest's process has trained by then)."""
    import multiprocessing as mp

    from tdlab.experiments.catalog import CATALOG

    ctx = mp.get_context("forkserver")
    # every experiment module too (importing the package no longer does): children fork with them imported
    experiments = sorted({e.module for e in CATALOG.values()})
    ctx.set_forkserver_preload(["tdlab.cli", "tdlab.experiments.base", *experiments, "hardening_inputs"])
    return ctx


def _child(case_id: str, ctx: Any, conn: Any) -> None:
    """A case in its own process group (so a hang is killed with everything it started)."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past FILE_LIMIT fails (EFBIG) instead of killing
    try:
        from tdlab.experiments.base import registry

        registry()
        c = next(c for c in CASES if c.id == case_id)
        w = Path(tempfile.mkdtemp(dir=ctx.root, prefix=f"{c.id}-"))
        made = c.make(ctx, w)
        problems = [made()] if callable(made) else [judge(s) for s in made]
        why = "; ".join(p for p in problems if p)
    except BaseException as exc:
        why = f"harness: {type(exc).__name__}: {exc}"[:500]
    conn.send(why)
    conn.close()


def run_case(c: Case, ctx: Any) -> tuple[bool, str, float]:
    """``(kept the promise, why not, seconds)`` of one case, run in a child process under a time limit."""
    t0 = time.monotonic()
    mp = _server()
    recv, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=_child, args=(c.id, ctx, send))
    proc.start()
    send.close()
    why = "hang" if not recv.poll(c.timeout) else None
    if why is None:
        try:
            why = recv.recv()
        except EOFError:
            why = "the case's process died"
    else:
        why = f"hang: no answer in {c.timeout:.0f} s"
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything the case left running
    proc.join()
    return not why, why, time.monotonic() - t0


# ------------------------------------------------------------------------------------------ fixtures


@dataclass
class Ctx:
    root: Path
    runs: Path  # a runs folder (with index.sqlite) holding the tiny finished run "tiny"
    bert: Path | None  # a tiny BERT checkpoint (safetensors), None without transformers
    corpus: Path  # text whose words are the checkpoint's pieces


def build_fixtures(root: Path) -> Ctx:
    """The shared inputs, built in a child of the fork server (the process that forks the cases never
    runs torch)."""
    ctx = Ctx(root, root / "fixture-runs", root / "bert", root / "corpus.txt")
    mp = _server()
    proc = mp.Process(target=_build, args=(ctx,))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError("building the fixtures failed")
    words = ["apple", "banana", "boat", "ship", "sail", "bananas"]
    rows = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(30)) for i in range(20)]
    ctx.corpus.write_text("\n".join(rows) + "\n")
    if not (ctx.bert / "config.json").is_file():
        ctx.bert = None
    return ctx


def _build(ctx: Ctx) -> None:
    r = invoke(["run", "markov-init", *TINY, "--run-id", "tiny", "--out", ctx.runs])
    if r.exit_code != 0:
        print(r.stdout + r.stderr, file=sys.stderr)
        sys.exit(1)
    _bert(ctx.bert)


def _bert(folder: Path) -> None:
    try:
        import torch
        import transformers
    except ImportError:
        return
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(PIECES) + "\n")
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(str(folder))
    cfg = transformers.BertConfig(
        vocab_size=len(PIECES),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertModel(cfg).save_pretrained(str(folder))


def runs_copy(ctx: Ctx, w: Path) -> Path:
    """A copy of the fixture runs folder, its index pointing at the copied runs."""
    shutil.copytree(ctx.runs, w / "runs", symlinks=True)
    con = sqlite3.connect(w / "runs" / "index.sqlite")
    with con:
        con.execute(
            "UPDATE runs SET path = replace(path, ?, ?)", (str(ctx.runs.resolve()), str((w / "runs").resolve()))
        )
    con.close()
    return w / "runs"


def topics(ctx: Ctx, w: Path, *sets: str) -> list[str]:
    """``tdlab run topics-real`` on the tiny corpus, nothing trained (a checkpoint measured) or refused."""
    base = [
        "corpus.source=text",
        f"corpus.path={ctx.corpus}",
        "corpus.min_count=1",
        "lda.topics=2",
        "lda.passes=1",
        "thetas=[0.5]",
        "train.seq_len=10",
        "train.batch=2",
        "attn_windows=8",
    ]
    merged = {s.split("=", 1)[0]: s for s in [*base, *sets]}
    argv = ["run", "topics-real", "--quiet", "--seeds", "1", "--out", w / "out"]
    for s in merged.values():
        argv += ["--set", s]
    return argv


def no_run_written(out: Path) -> Callable[[Result], str | None]:
    """The refused run left no run directory or staging folder in ``out`` (an empty ``out`` may stay)."""

    def check(_: Result) -> str | None:
        left = [p.name for p in out.iterdir()] if out.exists() else []
        return f"left in {out}: {left}" if left else None

    return check


def all_of(*checks: Callable[[Result], str | None]) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        return next((p for c in checks if (p := c(r))), None)

    return check


def absent(*paths: Path) -> Callable[[Result], str | None]:
    def check(_: Result) -> str | None:
        there = [str(p) for p in paths if os.path.lexists(p)]
        return f"exists: {there}" if there else None

    return check


def line_lacks(*words: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        bad = [x for x in words if x in r.stderr]
        return f"the line says {bad}: {r.stderr.strip()[:200]}" if bad else None

    return check


# ---- from_run: an anchors-bias source run written by hand (its config is the probe's own) -------------


def probe_source(w: Path, files: Callable[[Path, list[str]], None]) -> tuple[Path, list[str]]:
    """``(source run, argv of tdlab run anchors-embedding --set from_run=SOURCE)``; ``files(arrays, arms)``
    fills the source's ``arrays/`` folder."""
    import pandas as pd
    import yaml

    from tdlab.experiments.base import get

    exp = get("anchors-embedding")
    cfg = exp.make_config("quick")
    src = w / "source"
    (src / "arrays").mkdir(parents=True)
    (src / "config.yaml").write_text(
        yaml.safe_dump({"experiment": "anchors-bias", "profile": "quick", "config": cfg.model_dump(mode="json")})
    )
    pd.DataFrame(
        {
            "arm": pd.Series([], dtype=str),
            "step": pd.Series([], dtype="int64"),
            "member": pd.Series([], dtype="int64"),
            "name": pd.Series([], dtype=str),
            "value": pd.Series([], dtype=float),
        }
    ).to_parquet(src / "metrics.parquet")
    arms = [f"gamma={g:g}" for g in cfg.gammas]
    files(src / "arrays", arms)
    argv = ["run", "anchors-embedding", "--quiet", "--set", f"from_run={src}", "--out", w / "out"]
    return src, argv


def real_arrays(folder: Path, arms: list[str]) -> None:
    import torch
    from safetensors.torch import save_file

    for a in arms:
        save_file({"wte": torch.zeros(3, 2, 4)}, str(folder / f"{a}.safetensors"))


# ---- avMNIST arrays ----------------------------------------------------------------------------------


def npz(path: Path, **change: Any) -> Path:
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {
        "image_train": rng.random((20, 28, 28)),
        "audio_train": rng.random((20, 28, 28)),
        "label_train": np.arange(20) % 10,
        "image_test": rng.random((10, 28, 28)),
        "audio_test": rng.random((10, 28, 28)),
        "label_test": np.arange(10) % 10,
    }
    arrays.update(change)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def avdigits(w: Path, path: Path | str) -> list[str]:
    return ["run", "icl-avdigits", "--quiet", "--seeds", "1", "--set", f"data.path={path}", "--out", w / "out"]


def stories_argv(w: Path, path: Path | str) -> list[str]:
    return ["run", "anchors-text", "--quiet", "--set", f"data.stories={path}", "--out", w / "out"]


# ====================================================================================== the 23 (review items)


@case("checkpoint-auto-map", "model.checkpoint", "1")
def _(ctx, w):
    marker = w / "code-ran"
    ck = w / "ck"
    shutil.copytree(ctx.bert, ck)
    conf = json.loads((ck / "config.json").read_text())
    conf["auto_map"] = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoModel": "modeling_evil.EvilModel",
        "AutoTokenizer": ["tokenization_evil.EvilTokenizer", None],
    }
    (ck / "config.json").write_text(json.dumps(conf))
    for mod in ("configuration_evil", "modeling_evil", "tokenization_evil"):
        (ck / f"{mod}.py").write_text(
            f"open({str(marker)!r}, 'a').write({mod!r})\n"
            "from transformers import BertConfig as EvilConfig, BertModel as EvilModel\n"
            "from transformers import BertTokenizer as EvilTokenizer\n"
        )
    return [
        Spec(
            topics(ctx, w, f"model.checkpoint={ck}"),
            ["model.checkpoint"],
            input="y\ny\ny\n",
            watch=[ck],
            check=all_of(absent(marker), no_run_written(w / "out")),
        )
    ]


@case("export-out-device-node", "export --out", "2")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    node = w / "fn"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of our own

    def still_a_device(_: Result) -> str | None:
        return None if stat.S_ISCHR(os.lstat(node).st_mode) else f"{node} is no longer a device node"

    return [
        Spec(
            ["export", runs / "tiny", "--arm", ARM, "--member", "0", "--out", node],
            ["--out"],
            watch=[runs],
            check=still_a_device,
        )
    ]


@case("export-out-new-folder-slash", "export --out", "2")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [
        Spec(
            ["export", runs / "tiny", "--arm", ARM, "--member", "0", "--out", f"{w / 'newdir'}/"],
            ["--out"],
            watch=[runs],
            check=absent(w / "newdir"),
        )
    ]


@case("from-run-arrays-symlink-dev-zero", "from_run", "3", timeout=180)
def _(ctx, w):
    src, argv = probe_source(
        w, lambda folder, arms: [os.symlink("/dev/zero", folder / f"{a}.safetensors") for a in arms]
    )
    return [Spec(argv, ["from_run", str(src)], watch=[src], check=no_run_written(w / "out"))]


@case("atlas-index-run-id-escapes", "atlas build", "4")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    with sqlite3.connect(runs / "index.sqlite") as con:
        row = con.execute("SELECT * FROM runs WHERE run_id = 'tiny'").fetchone()
        con.execute(f"INSERT INTO runs VALUES ({', '.join('?' * len(row))})", ("../../escape", *row[1:]))
    con.close()
    return [
        Spec(
            ["atlas", "build", "--runs", runs, "--out", w / "site"],
            ["index.sqlite", "run id"],
            watch=[runs],
            check=absent(w / "escape"),
        )
    ]


@case("atlas-figure-symlink-leak", "atlas build", "5")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    os.symlink("/etc/passwd", runs / "tiny" / "figures" / "leak.png")

    def no_leak(_: Result) -> str | None:
        leaked = [str(p) for p in (w / "site").rglob("*") if p.is_file() and b"root:" in p.read_bytes()[:4096]]
        return f"/etc/passwd copied into the site: {leaked}" if leaked else None

    return [Spec(["atlas", "build", "--runs", runs, "--out", w / "site"], expect="ok", watch=[runs], check=no_leak)]


@case("atlas-figure-symlink-loop", "atlas build", "5")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    os.symlink("loop.png", runs / "tiny" / "figures" / "loop.png")
    figs = sorted(p.name for p in (ctx.runs / "tiny" / "figures").iterdir())

    def figures_copied(_: Result) -> str | None:  # the files, and the run's report showing them
        site = w / "site" / "runs" / "tiny"
        got = sorted(p.name for p in (site / "figures").glob("*")) if (site / "figures").is_dir() else []
        report = (site / "report.html").read_text() if (site / "report.html").is_file() else ""
        shown = [f for f in figs if f"figures/{f}" in report]
        return (
            None
            if got == figs and shown == figs
            else f"the site has {got}, its report shows {shown}; the run has {figs}"
        )

    return [
        Spec(["atlas", "build", "--runs", runs, "--out", w / "site"], expect="ok", watch=[runs], check=figures_copied)
    ]


@case("export-out-into-run-arrays", "export --out", "6")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [
        Spec(
            ["export", runs / "tiny", "--arm", ARM, "--member", "0", "--out", runs / "tiny" / "arrays" / ARM_FILE],
            ["--out"],
            watch=[runs],
        )
    ]


@case("atlas-out-holds-runs", "atlas build", "7")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [Spec(["atlas", "build", "--runs", "runs", "--out", "."], ["--out"], cwd=w, watch=[runs])]


@case("run-id-twice-at-once", "run --run-id", "8", timeout=400)
def _(ctx, w):
    def go() -> str | None:
        from tdlab import runner

        out, release = w / "out", w / "go"
        argv = ["run", "markov-init", *TINY, "--run-id", "X", "--out", out]
        pid = os.fork()
        if pid == 0:  # the first run: its report waits until the others have tried
            real = runner._report

            def waiting(*a, **k):
                deadline = time.time() + 240
                while not release.exists() and time.time() < deadline:
                    time.sleep(0.05)
                return real(*a, **k)

            runner._report = waiting
            r = invoke(argv)
            os._exit(0 if r.exit_code == 0 and "Traceback" not in r.stderr else 3)
        deadline = time.time() + 240
        while not (out / ".staging-X" / "config.yaml").is_file() and time.time() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return "the first run ended before it could be raced"
            time.sleep(0.05)
        second = judge(Spec(argv, ["running"]))
        third = judge(Spec(["run", "--resume", out / "X", "--quiet"], ["running"]))
        release.touch()
        _, status = os.waitpid(pid, 0)
        first = None if status == 0 and (out / "X" / "summary.json").is_file() else "the first run did not finish"
        return (
            "; ".join(f"{k}: {v}" for k, v in (("second run", second), ("--resume", third), ("first", first)) if v)
            or None
        )

    return go


@case("findings-readme-bad-files", "findings --readme", "9")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    (w / "dir").mkdir()
    (w / "latin1.md").write_bytes("caf\xe9 <!-- findings -->".encode("latin-1"))
    return [
        Spec(["findings", runs / "tiny", "--readme", f], ["--readme", str(f)], watch=[runs])
        for f in (w / "missing.md", w / "dir", w / "latin1.md")
    ]


@case("findings-summary-malformed-groups", "findings", "9")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    specs = []
    for i, change in enumerate(
        (lambda s: [g.pop("verdict", None) for g in s["claims"]], lambda s: s.__setitem__("claims", "holds"))
    ):
        run = w / f"r{i}"
        shutil.copytree(runs / "tiny", run)
        s = json.loads((run / "summary.json").read_text())
        change(s)
        (run / "summary.json").write_text(json.dumps(s))
        specs.append(Spec(["findings", run], ["summary.json"], watch=[run]))
    return specs


@case("avdigits-path-single-npy", "data.path", "9")
def _(ctx, w):
    import numpy as np

    np.save(w / "x.npy", np.zeros((3, 28, 28)))
    return [Spec(avdigits(w, w / "x.npy"), ["data.path"], check=no_run_written(w / "out"))]


@case("avdigits-path-corrupt-npz", "data.path", "9")
def _(ctx, w):
    good = npz(w / "good.npz").read_bytes()
    (w / "bad.npz").write_bytes(good[: len(good) // 2])
    return [Spec(avdigits(w, w / "bad.npz"), ["data.path"], check=no_run_written(w / "out"))]


@case("from-run-arrays-symlink-loop", "from_run", "9")
def _(ctx, w):
    def loops(folder: Path, arms: list[str]) -> None:
        for a in arms:
            os.symlink(f"{a}.safetensors", folder / f"{a}.safetensors")

    src, argv = probe_source(w, loops)
    return [Spec(argv, ["from_run", str(src)], watch=[src], check=no_run_written(w / "out"))]


class _Planted:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@case("checkpoint-pickled-weights", "model.checkpoint", "9")
def _(ctx, w):
    marker = w / "unpickled"
    ck = w / "ck"
    shutil.copytree(ctx.bert, ck)
    for f in ck.glob("*.safetensors"):
        f.unlink()
    (ck / "pytorch_model.bin").write_bytes(pickle.dumps({"x": _Planted(str(marker))}))
    return [
        Spec(
            topics(ctx, w, f"model.checkpoint={ck}"),
            ["model.checkpoint"],
            watch=[ck],
            check=all_of(absent(marker), no_run_written(w / "out")),
        )
    ]


@case("atlas-out-proc", "atlas build", "9")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [Spec(["atlas", "build", "--runs", runs, "--out", "/proc/x"], ["--out"], watch=[runs])]


@case("stories-1gb-without-markers", "data.stories", "10", timeout=60)
def _(ctx, w):
    f = w / "big.txt"
    block = ("once upon a time there was a little dog named Tom who liked to play in the park. " * 12800).encode()
    with open(f, "wb") as fh:
        for _ in range((1 << 30) // len(block)):
            fh.write(block)
    return [Spec(stories_argv(w, f), ["data.stories"], check=no_run_written(w / "out"))]


@case("atlas-build-interrupted", "atlas build", "11")
def _(ctx, w):
    def go() -> str | None:
        import jinja2

        runs = runs_copy(ctx, w)
        before = digest(runs)

        def interrupt(*a, **k):
            raise KeyboardInterrupt

        jinja2.Template.render = interrupt
        r = invoke(["atlas", "build", "--runs", runs, "--out", w / "site"])
        if "Traceback" in r.stderr:
            return "traceback"
        left = sorted(str(p.relative_to(w)) for p in w.rglob("*") if not p.is_relative_to(runs) and p != runs)
        if left:
            return f"an interrupted build left {left[:4]}"
        return None if digest(runs) == before else "the runs changed"

    return go


@case("atlas-run-runs-is-a-file", "atlas run", "11")
def _(ctx, w):
    (w / "file").write_text("x")
    return [Spec(["atlas", "run", "markov-init", "--runs", w / "file"], ["--runs"], watch=[w])]


@case("corpus-path-folder-or-device", "corpus.path", "11")
def _(ctx, w):
    (w / "texts").mkdir()
    return [
        Spec(
            topics(ctx, w, f"corpus.path={p}"),
            ["corpus.path"],
            check=all_of(line_lacks("no such file"), no_run_written(w / "out")),
        )
        for p in (w / "texts", "/dev/zero")
    ]


@case("from-run-planted-pickle", "from_run", "11")
def _(ctx, w):
    def planted(folder: Path, arms: list[str]) -> None:
        for a in arms:
            (folder / f"{a}.safetensors").write_bytes(pickle.dumps({"x": _Planted(str(w / "unpickled"))}))

    src, argv = probe_source(w, planted)
    return [
        Spec(
            argv,
            [str(src / "arrays")],
            watch=[src],
            check=all_of(line_lacks(".staging-"), absent(w / "unpickled"), no_run_written(w / "out")),
        )
    ]


# ====================================================================================== the 69 others


def _out_dir(w: Path) -> Path:
    return w / "out"


for _id, _sets in (
    ("missing-folder", lambda w: [f"model.checkpoint={w / 'nope'}"]),
    ("a-file", lambda w: [f"model.checkpoint={w / 'file'}"]),
    ("empty-folder", lambda w: [f"model.checkpoint={w / 'empty'}"]),
    ("garbage-config", lambda w: [f"model.checkpoint={w / 'garbage'}"]),
):

    @case(f"checkpoint-{_id}", "model.checkpoint")
    def _(ctx, w, _sets=_sets):
        (w / "file").write_text("x")
        (w / "empty").mkdir()
        shutil.copytree(ctx.bert, w / "garbage")
        (w / "garbage" / "config.json").write_text("{not json")
        return [Spec(topics(ctx, w, *_sets(w)), ["model.checkpoint"], check=no_run_written(w / "out"))]


def _export(
    ctx,
    w,
    *extra: Any,
    names: list[str] | None = None,
    expect: str = "refuse",
    run: str = "tiny",
    check: Callable | None = None,
    cwd: Path | None = None,
) -> list[Spec]:
    runs = runs_copy(ctx, w)
    base = {"--arm": ARM, "--member": "0"}
    args = list(extra)
    for k, v in base.items():
        if k not in args:
            args += [k, v]
    return [Spec(["export", runs / run, *args], names or [], expect=expect, watch=[runs], check=check, cwd=cwd)]


@case("export-unknown-arm", "export")
def _(ctx, w):
    return _export(ctx, w, "--arm", "nope/arm", "--out", w / "x.safetensors", names=["--arm"])


@case("export-member-out-of-range", "export")
def _(ctx, w):
    return _export(ctx, w, "--member", "5", "--out", w / "x.safetensors", names=["--member"])


@case("export-member-negative", "export")
def _(ctx, w):
    return _export(ctx, w, "--member", "-1", "--out", w / "x.safetensors", names=["--member"])


@case("export-unknown-target", "export")
def _(ctx, w):
    return _export(ctx, w, "--to", "onnx", "--out", w / "x.safetensors", names=["--to"])


@case("export-missing-run", "export")
def _(ctx, w):
    return _export(ctx, w, "--out", w / "x.safetensors", run="nope", names=["nope"])


@case("export-not-a-run", "export")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    (runs / "plain").mkdir()
    return [
        Spec(["export", runs / "plain", "--arm", ARM, "--member", "0", "--out", w / "x.st"], ["plain"], watch=[runs])
    ]


@case("export-corrupt-arrays", "export")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    (runs / "tiny" / "arrays" / ARM_FILE).write_bytes(b"\x00garbage" * 10)
    return [
        Spec(["export", runs / "tiny", "--arm", ARM, "--member", "0", "--out", w / "x.st"], [ARM_FILE], watch=[runs])
    ]


@case("export-valid-folder-with-slash", "export")
def _(ctx, w):
    (w / "exports").mkdir()
    return _export(
        ctx,
        w,
        "--out",
        f"{w / 'exports'}/",
        expect="ok",
        check=lambda r: None if len(list((w / "exports").glob("*.safetensors"))) == 1 else "no file written",
    )


@case("export-out-under-a-file", "export")
def _(ctx, w):
    (w / "file").write_text("x")
    return _export(ctx, w, "--out", w / "file" / "x.safetensors", names=["--out"])


@case("export-non-gpt-arm", "export")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    shutil.copy(runs / "tiny" / "arrays" / ARM_FILE, runs / "tiny" / "arrays" / "sec2__standard.safetensors")
    return [
        Spec(
            ["export", runs / "tiny", "--arm", "sec2/standard", "--member", "0", "--out", w / "x.st"],
            ["--arm", "sec2"],
            watch=[runs],
        )
    ]


@case("export-valid-new-file", "export")
def _(ctx, w):
    return _export(
        ctx,
        w,
        "--out",
        w / "x.safetensors",
        expect="ok",
        check=lambda r: None if (w / "x.safetensors").is_file() else "no file written",
    )


@case("export-valid-into-folder", "export")
def _(ctx, w):
    (w / "exports").mkdir()
    return _export(
        ctx,
        w,
        "--out",
        w / "exports",
        expect="ok",
        check=lambda r: None if len(list((w / "exports").glob("*.safetensors"))) == 1 else "no file written",
    )


@case("export-valid-overwrite", "export")
def _(ctx, w):
    # an export of ours is replaced (a file that is not one is refused: tests/export/test_export_out.py)
    first = _export(ctx, w, "--out", w / "x.safetensors", expect="ok")[0]
    again = Spec(
        list(first.argv),
        expect="ok",
        watch=first.watch,
        check=lambda r: None if (w / "x.safetensors").stat().st_size > 1000 else "not rewritten",
    )
    return [first, again]


for _id, _what in (
    ("missing", lambda w: w / "nope"),
    ("a-file", lambda w: w / "file"),
    ("not-a-run", lambda w: w / "plain"),
):

    @case(f"from-run-{_id}", "from_run")
    def _(ctx, w, _what=_what):
        (w / "file").write_text("x")
        (w / "plain").mkdir()
        return [
            Spec(
                ["run", "anchors-embedding", "--quiet", "--set", f"from_run={_what(w)}", "--out", w / "out"],
                ["from_run"],
                check=absent(w / "out"),
            )
        ]


@case("from-run-other-experiment", "from_run")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [
        Spec(
            ["run", "anchors-embedding", "--quiet", "--set", f"from_run={runs / 'tiny'}", "--out", w / "out"],
            ["from_run"],
            watch=[runs],
            check=absent(w / "out"),
        )
    ]


@case("from-run-other-config", "from_run")
def _(ctx, w):
    import yaml

    src, _ = probe_source(w, real_arrays)
    conf = yaml.safe_load((src / "config.yaml").read_text())
    conf["config"]["seed"] = 99
    (src / "config.yaml").write_text(yaml.safe_dump(conf))
    return [
        Spec(
            ["run", "anchors-embedding", "--quiet", "--set", f"from_run={src}", "--out", w / "out"],
            ["from_run"],
            watch=[src],
            check=absent(w / "out"),
        )
    ]


@case("from-run-arm-missing", "from_run")
def _(ctx, w):
    src, argv = probe_source(w, lambda folder, arms: real_arrays(folder, arms[:1]))
    return [Spec(argv, ["arrays"], watch=[src], check=no_run_written(w / "out"))]


@case("atlas-build-no-index", "atlas build")
def _(ctx, w):
    (w / "runs").mkdir()
    return [
        Spec(
            ["atlas", "build", "--runs", w / "runs", "--out", w / "site"],
            ["--runs"],
            watch=[w / "runs"],
            check=absent(w / "site"),
        )
    ]


@case("atlas-build-runs-missing", "atlas build")
def _(ctx, w):
    return [
        Spec(
            ["atlas", "build", "--runs", w / "nope", "--out", w / "site"],
            ["--runs"],
            check=absent(w / "nope", w / "site"),
        )
    ]


@case("atlas-build-runs-is-a-file", "atlas build")
def _(ctx, w):
    (w / "file").write_text("x")
    return [Spec(["atlas", "build", "--runs", w / "file", "--out", w / "site"], ["--runs"], check=absent(w / "site"))]


@case("atlas-build-out-is-a-file", "atlas build")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    (w / "site").write_text("x")
    return [Spec(["atlas", "build", "--runs", runs, "--out", w / "site"], ["--out"], watch=[runs])]


@case("atlas-build-corrupt-index", "atlas build")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    (runs / "index.sqlite").write_bytes(b"not a database" * 100)
    for extra in ("index.sqlite-wal", "index.sqlite-shm"):
        (runs / extra).unlink(missing_ok=True)
    return [Spec(["atlas", "build", "--runs", runs, "--out", w / "site"], ["index.sqlite"], watch=[runs])]


@case("atlas-build-run-folder-gone", "atlas build")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    shutil.rmtree(runs / "tiny")
    return [
        Spec(
            ["atlas", "build", "--runs", runs, "--out", w / "site"],
            expect="ok",
            watch=[runs],
            check=lambda r: None if (w / "site" / "runs" / "tiny" / "report.html").is_file() else "no report",
        )
    ]


@case("atlas-build-valid", "atlas build")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [
        Spec(
            ["atlas", "build", "--runs", runs, "--out", w / "site"],
            expect="ok",
            watch=[runs],
            check=lambda r: None if (w / "site" / "index.html").is_file() else "no index.html",
        )
    ]


@case("atlas-build-over-earlier-site", "atlas build")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    first = Spec(["atlas", "build", "--runs", runs, "--out", w / "site"], expect="ok", watch=[runs])
    return [
        first,
        Spec(
            first.argv,
            expect="ok",
            watch=[runs],
            check=lambda r: None if (w / "site" / "index.html").is_file() else "no index.html",
        ),
    ]


for _id, _args, _names in (
    ("unknown-experiment", ["no-such"], ["experiment"]),
    # every experiment declares atlas axes now ("no axes" is tested in tests/test_atlas.py)
    ("bad-decide", ["markov-init", "--decide", "soon"], ["--decide"]),
    ("bad-profile", ["markov-init", "--profile", "slow"], ["profile"]),
    ("bad-backend", ["markov-init", "--backend", "mpi"], ["backend"]),
    ("zero-workers", ["markov-init", "--workers", "0"], ["--workers"]),
):

    @case(f"atlas-run-{_id}", "atlas run")
    def _(ctx, w, _args=_args, _names=_names):
        return [Spec(["atlas", "run", *_args, "--runs", w / "runs"], _names, check=absent(w / "runs"))]


@case("atlas-serve-no-site", "atlas serve")
def _(ctx, w):
    return [Spec(["atlas", "serve", "--out", w], ["--out"], watch=[w])]


@case("findings-missing-run", "findings")
def _(ctx, w):
    return [Spec(["findings", w / "nope"], ["nope"], watch=[w])]


@case("findings-not-a-run", "findings")
def _(ctx, w):
    (w / "plain").mkdir()
    return [Spec(["findings", w / "plain"], ["plain"], watch=[w])]


@case("findings-valid", "findings")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [Spec(["findings", runs / "tiny"], expect="ok", watch=[runs])]


@case("avdigits-path-missing", "data.path")
def _(ctx, w):
    return [Spec(avdigits(w, w / "nope.npz"), ["path"], check=no_run_written(w / "out"))]


@case("avdigits-path-npz-lacks-keys", "data.path", "11")
def _(ctx, w):
    return [Spec(avdigits(w, npz(w / "a.npz", label_test=None)), ["data.path"], check=no_run_written(w / "out"))]


@case("avdigits-path-wrong-shape", "data.path")
def _(ctx, w):
    import numpy as np

    return [
        Spec(avdigits(w, npz(w / "a.npz", image_train=np.zeros((20, 5, 5)))), ["path"], check=no_run_written(w / "out"))
    ]


@case("avdigits-path-labels-out-of-range", "data.path")
def _(ctx, w):
    import numpy as np

    return [Spec(avdigits(w, npz(w / "a.npz", label_train=np.full(20, 12))), ["path"], check=no_run_written(w / "out"))]


@case("avdigits-path-folder-lacks-files", "data.path")
def _(ctx, w):
    (w / "avmnist" / "image").mkdir(parents=True)
    return [Spec(avdigits(w, w / "avmnist"), ["path"], check=no_run_written(w / "out"))]


def _stories(make: Callable[[Path], Path]):
    def fn(ctx, w):
        return [Spec(stories_argv(w, make(w)), ["data.stories"], check=absent(w / "out"))]

    return fn


for _id, _make in (
    ("missing", lambda w: w / "nope.txt"),
    ("folder", lambda w: (w / "d").mkdir() or w / "d"),
    ("not-utf8", lambda w: (w / "s.txt").write_bytes(b"caf\xe9 <|endoftext|>" * 3) and w / "s.txt"),
    ("no-marker", lambda w: (w / "s.txt").write_text("a story without a marker") and w / "s.txt"),
    ("nul-bytes", lambda w: (w / "s.txt").write_bytes(b"a\x00b<|endoftext|>" * 3) and w / "s.txt"),
    ("too-few", lambda w: (w / "s.txt").write_text("one.<|endoftext|>two.<|endoftext|>") and w / "s.txt"),
):
    case(f"stories-{_id}", "data.stories")(_stories(_make))


def _prontoqa(make: Callable[[Path], Path]):
    def fn(ctx, w):
        return [
            Spec(
                ["run", "anchors-text", "--quiet", "--set", f"data.prontoqa={make(w)}", "--out", w / "out"],
                ["data.prontoqa"],
                check=absent(w / "out"),
            )
        ]

    return fn


_REC = {"question": "q", "query": "x", "chain_of_thought": ["a"], "answer": "True"}
for _id, _make in (
    ("missing", lambda w: w / "nope.json"),
    ("not-json", lambda w: (w / "p.json").write_text("{not json") and w / "p.json"),
    ("wrong-layout", lambda w: (w / "p.json").write_text(json.dumps([1, 2])) and w / "p.json"),
    ("too-few", lambda w: (w / "p.json").write_text(json.dumps([_REC])) and w / "p.json"),
):
    case(f"prontoqa-{_id}", "data.prontoqa")(_prontoqa(_make))


@case("corpus-path-missing", "corpus.path")
def _(ctx, w):
    return [Spec(topics(ctx, w, f"corpus.path={w / 'nope.txt'}"), ["corpus.path"], check=no_run_written(w / "out"))]


@case("corpus-path-no-document", "corpus.path")
def _(ctx, w):
    (w / "empty.txt").write_text("\n\n 1 2 3 \n")
    return [Spec(topics(ctx, w, f"corpus.path={w / 'empty.txt'}"), ["corpus.path"], check=no_run_written(w / "out"))]


for _id, _rid in (("dot-dot", "../x"), ("hidden", ".hidden"), ("empty", ""), ("slash", "a/b")):

    @case(f"run-id-{_id}", "run --run-id")
    def _(ctx, w, _rid=_rid):
        return [
            Spec(
                ["run", "markov-init", *TINY, "--run-id", _rid, "--out", w / "out"],
                ["--run-id"],
                check=absent(w / "out", w / "x"),
            )
        ]


@case("run-id-taken", "run --run-id")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [Spec(["run", "markov-init", *TINY, "--run-id", "tiny", "--out", runs], ["tiny"], watch=[runs])]


@case("resume-finished-run", "run --resume")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [Spec(["run", "--resume", runs / "tiny", "--quiet"], ["tiny"], watch=[runs])]


@case("resume-nothing", "run --resume")
def _(ctx, w):
    return [Spec(["run", "--resume", w / "nope", "--quiet"], ["nope"], watch=[w])]


@case("resume-pickled-checkpoint", "run --resume")
def _(ctx, w):
    staging = w / "out" / ".staging-r"
    (staging / "checkpoints").mkdir(parents=True)
    shutil.copy(ctx.runs / "tiny" / "config.yaml", staging / "config.yaml")
    (staging / "checkpoints" / "gpt2__standard.pt").write_bytes(pickle.dumps(_Planted(str(w / "unpickled"))))
    return [
        Spec(
            ["run", "--resume", w / "out" / "r", "--quiet"],
            ["pickle"],
            watch=[w / "out"],
            check=absent(w / "unpickled"),
        )
    ]


@case("resume-with-a-name", "run --resume")
def _(ctx, w):
    return [Spec(["run", "markov-init", "--resume", w / "r"], ["--resume"], watch=[w])]


@case("runs-where-writes", "runs")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    return [Spec(["runs", "--out", runs, "--where", "1; DROP TABLE runs"], ["--where"], watch=[runs])]


@case("runs-corrupt-index", "runs")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    (runs / "index.sqlite").write_bytes(b"not a database" * 100)
    for extra in ("index.sqlite-wal", "index.sqlite-shm"):
        (runs / extra).unlink(missing_ok=True)
    return [Spec(["runs", "--out", runs], ["index.sqlite"], watch=[runs])]


@case("report-missing-run", "report")
def _(ctx, w):
    return [Spec(["report", w / "nope"], ["nope"], watch=[w])]


@case("report-garbage-config", "report")
def _(ctx, w):
    runs = runs_copy(ctx, w)
    (runs / "tiny" / "config.yaml").write_bytes(b"\x00\xff: [")
    return [Spec(["report", runs / "tiny"], ["config.yaml"], watch=[runs])]


# ------------------------------------------------------------------------------------------ the count


def main(ids: list[str]) -> int:
    import tdlab
    import tdlab.cli
    from tdlab.experiments.base import registry

    registry()
    chosen = [c for c in CASES if not ids or c.id in ids]
    root = Path(tempfile.mkdtemp(prefix="tdlab-hardening-"))
    print(
        f"tdlab from {Path(tdlab.__file__).parent}; {len(CASES)} inputs ({sum(c.item is not None for c in CASES)} "
        f"the review found mishandled); work folder {root}",
        flush=True,
    )
    try:
        ctx = build_fixtures(root)
        handled = 0
        for c in chosen:
            ok, why, secs = run_case(c, ctx)
            handled += ok
            tag = f"item {c.item}" if c.item else "other"
            print(f"{'ok  ' if ok else 'FAIL'} {c.id:40} {tag:8} {secs:6.1f} s  {why[:300]}", flush=True)
            for p in root.glob(f"{c.id}-*"):
                shutil.rmtree(p, ignore_errors=True)
        print(f"{handled} of {len(chosen)} handled as promised", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if handled == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

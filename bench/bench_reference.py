"""Whole-process wall time: tdlab vs the seed authors' Markov trainer, on the same training work.

The work: the GPT-2 variant single-layer transformer (seed 000 Table 1) on the binary first-order
Markov chain p = 0.5, q = 0.8 (Fig. 4), sequence length T = 256, d = 8, one head, batch 16, AdamW
(0.9, 0.95), lr 1e-3, weight decay 1e-3, cosine schedule, 1000 training steps, evaluation only at the
end, one member, fp32 on the CPU. Each side is a fresh ``python`` subprocess (same interpreter and
torch), timed from start to exit, so imports, set-up and everything each program writes are in.
Runs alternate in pairs (tdlab, reference, tdlab, reference, ...) so both see the same machine load;
the script prints each pair's times and ratio, the medians and the median ratio reference / tdlab.
Timings are printed, never asserted.

The reference is NOT part of tdlab and is never copied into this repository: ``--reference DIR`` is a
local checkout of the ``Markov-LLM-k/src`` folder of github.com/Bond1995/Local-to-Global (the folder
holding ``main.py``; the ``Markov-LLM-k`` folder above it is accepted too). Its ``main.py`` runs as::

    python main.py --config_format markov --device cpu --no_compile --batch_size 16 --acc_steps 1
        --iterations 1000 --eval_freq 1000 --sequence_length 256 --n_embd 8 --n_layer 1 --n_head 1
        --dropout 0 --vocab_size 2 --chain switch --p 0.5 --q 0.8 --order 1 --opt adamw --lr 0.001
        --beta1 0.9 --beta2 0.95 --weight_decay 0.001 --scheduler cos --results_base_folder TMP/exps

and tdlab as::

    python -m tdlab.cli run markov-init --quiet --out TMP --profile quick --seeds 1
        --set archs=[gpt2] --set inits=[standard] --set model.d=8 --set model.layers=1 --set model.heads=1
        --set task.p=0.5 --set task.q=0.8 --set train.steps=1000 --set train.seq_len=256
        --set train.batch=16 --set train.lr=0.001 --set train.eval_every=1000 --set train.eval_batches=1
        --set model.tie_weights=false --set model.head_bias=true

Flag mapping (reference flag -> tdlab key, setting):

* ``--model`` base (default) -> ``archs=[gpt2]``: pre-LN GPT-2 block, GELU MLP of width 4d, attention
  output projection, learned absolute positions of length T, final LayerNorm; ``inits=[standard]``.
* ``--n_embd 8 --n_layer 1 --n_head 1`` -> ``model.d=8, model.layers=1, model.heads=1``.
* ``--sequence_length 256`` -> ``train.seq_len=256`` (both draw 257 tokens and train on 256 inputs).
* ``--batch_size 16 --acc_steps 1`` -> ``train.batch=16``; ``--iterations 1000`` -> ``train.steps=1000``.
* ``--chain switch --p 0.5 --q 0.8 --order 1`` (``--initial steady``, default) -> ``task.p=0.5, task.q=0.8``
  (both start each sequence from the stationary distribution).
* ``--opt adamw --lr 0.001 --beta1 0.9 --beta2 0.95 --weight_decay 0.001 --scheduler cos`` -> tdlab's defaults
  ``train.optimizer=adamw``, ``train.beta1/beta2``, ``train.weight_decay``, ``train.schedule=cosine`` and
  ``train.lr=0.001`` (the reference's default lr is 2e-3: set to tdlab's so the optimiser work matches).
* ``--vocab_size 2`` (default): the reference ties no weights for a binary vocabulary and its ``lm_head`` has a
  bias -> ``model.tie_weights=false, model.head_bias=true`` (same parameters in the output layer).
* ``--dropout 0`` (default) -> tdlab has no dropout.
* ``--eval_freq 1000`` (= iterations) -> one evaluation, at the end (its ``itr % eval_freq == 0 or itr ==
  iterations``): one batch of 16 plus ``eval_probs`` on one sequence. tdlab: ``train.eval_every=1000,
  train.eval_batches=1``.
* ``--device cpu``; ``--no_compile``: the reference calls ``torch.compile`` by default; it is switched off so
  both run eager PyTorch (on the CPU a compile would add minutes of Inductor build time, and the model's
  per-forward Python counters ``self.iter`` defeat graph caching).
* dtype: the reference's ``--dtype`` flag cannot be given on the command line (``type=torch.dtype`` rejects
  every string: "cannot create 'torch.dtype' instances") and is not used on the CPU: ``train_base`` uses a
  ``nullcontext`` instead of autocast when the device is not CUDA, so its training is float32, as tdlab's.
* wandb: no ``--wandb`` flag, so it never calls ``wandb.init``/``wandb.log`` (``WANDB_MODE=disabled`` is set
  as well); the module is still imported at start-up, which stays in its time.
* ``--threads N`` sets ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` (read by torch at start-up: the reference
  calls no ``set_num_threads``) and ``TDLAB_THREADS`` (tdlab's CLI calls ``torch.set_num_threads``) for both;
  without it both use torch's default (one thread per core).

Shim: ``models/base.py`` imports ``tiktoken`` and calls ``tiktoken.get_encoding("gpt2")`` in
``GPTBase.__init__`` (that would download the GPT-2 BPE file); the tokenizer is only used by
``generate_from_string``, which the Markov run never calls. So the script writes, at run time into a
temporary folder put first on the reference's ``PYTHONPATH``, a stub ``tiktoken.py`` whose
``get_encoding`` returns ``None``. Nothing is installed; ``zstandard`` and ``tiktoken``'s real uses are in
the text data loaders (``data/``), which ``main.py`` does not import. The reference runs with its working
directory in a fresh temporary folder: it writes ``model.pt`` to the working directory, and it skips a run
whose ``exps/.../summary.json`` already exists.

Differences between the two runs that remain (none changes the training arithmetic per step beyond a
handful of parameters; they are part of what "whole process" measures):

* data: the reference draws each batch with a Python loop over positions, one ``torch.multinomial`` per
  position (255 calls a step); tdlab draws it vectorised. (The reference's loop also leaves the last target
  of every sequence at 0: ``range(order, seq_length)`` never fills position ``seq_length``.) This is the
  main difference the comparison measures.
* evaluation: tdlab also evaluates once at step 0 (its Trainer always logs the initial state), so it runs 2
  evaluation batches of 16 (each with its Bayes/unigram reference losses); the reference runs one batch of 16
  at the end, its Bayes loss (``optimal_est``, a Python loop over positions) and ``eval_probs`` on one
  sequence. tdlab records the mean training loss every ``train.log_every`` = 10 steps (default kept).
* outputs: tdlab writes its run directory (config, metrics.parquet, init and final weights, index.sqlite),
  computes the claims' verdicts, draws the figure and writes report.html -- part of its whole process and kept
  in. The reference writes ckpt.pt, model.pt and summary.json.
* model details without a compute cost to speak of: the reference's LayerNorms have no bias (its ``--bias``
  default, False, covers them too; tdlab's LayerNorms always have one: 3 x 8 parameters, no tdlab key removes
  them); its init scales ``c_proj`` by 1/sqrt(2 n_layer) (tdlab: sigma = 0.02 everywhere); its
  schedule is OneCycleLR (2% warm-up from lr/100, cosine) vs tdlab's pure cosine to 0; tdlab flushes
  denormals on the CPU while training.
* seeding: the reference seeds nothing (``generator.seed()``, random chain samples each run); tdlab uses root
  seed 0. The amount of work is the same either way.

The floor. Both programs compute the causal attention with the same kernel, PyTorch's
``scaled_dot_product_attention(q, k, v, is_causal=True)`` on ``(16, 1, 256, 8)`` (the reference's
``models/base.py`` calls it when ``memory < 0``, its default). After the pairs the script times, in this
process at the runs' thread count, that kernel's forward and backward at the work's shapes and, as fresh
processes, ``python -c "import torch"``. Any program doing the work with this kernel takes at least
``import torch + steps x kernel``, so ``reference / floor`` bounds the whole-process ratio any such
program can reach; the script prints it beside the measured ratio.

Usage::

    python bench/bench_reference.py --reference /path/to/Local-to-Global/Markov-LLM-k/src [--pairs 3] [--threads N]

``--steps`` (default 1000) shortens both runs for a smoke test; the measurement is the default.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE_SRC = Path(__file__).resolve().parents[1] / "src"
TIKTOKEN_STUB = '''"""Stub written by tdlab's bench/bench_reference.py: the Markov run never tokenizes text."""


def get_encoding(name):
    return None
'''


def reference_cmd(main: Path, steps: int, out: Path) -> list[str]:
    """The reference's command line for the work in the module docstring."""
    return [
        sys.executable,
        str(main),
        "--config_format",
        "markov",
        "--device",
        "cpu",
        "--no_compile",
        "--batch_size",
        "16",
        "--acc_steps",
        "1",
        "--iterations",
        str(steps),
        "--eval_freq",
        str(steps),
        "--sequence_length",
        "256",
        "--n_embd",
        "8",
        "--n_layer",
        "1",
        "--n_head",
        "1",
        "--dropout",
        "0",
        "--vocab_size",
        "2",
        "--chain",
        "switch",
        "--p",
        "0.5",
        "--q",
        "0.8",
        "--order",
        "1",
        "--opt",
        "adamw",
        "--lr",
        "0.001",
        "--beta1",
        "0.9",
        "--beta2",
        "0.95",
        "--weight_decay",
        "0.001",
        "--scheduler",
        "cos",
        "--results_base_folder",
        str(out / "exps"),
    ]


def tdlab_cmd(steps: int, out: Path) -> list[str]:
    """tdlab's command line for the same work."""
    sets = [
        "archs=[gpt2]",
        "inits=[standard]",
        "model.d=8",
        "model.layers=1",
        "model.heads=1",
        "task.p=0.5",
        "task.q=0.8",
        f"train.steps={steps}",
        "train.seq_len=256",
        "train.batch=16",
        "train.lr=0.001",
        f"train.eval_every={steps}",
        "train.eval_batches=1",
        "model.tie_weights=false",
        "model.head_bias=true",
    ]
    cmd = [
        sys.executable,
        "-m",
        "tdlab.cli",
        "run",
        "markov-init",
        "--quiet",
        "--out",
        str(out),
        "--profile",
        "quick",
        "--seeds",
        "1",
    ]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def find_main(folder: Path) -> Path:
    """``main.py`` of the reference checkout (``DIR`` or ``DIR/src``), or exit with a clear message."""
    for cand in (folder, folder / "src"):
        if (cand / "main.py").is_file() and (cand / "config" / "markov.py").is_file():
            return cand / "main.py"
    sys.exit(
        f"--reference {folder}: no main.py with config/markov.py there (expected the Markov-LLM-k/src "
        f"folder of github.com/Bond1995/Local-to-Global)"
    )


def timed(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> float:
    """Wall seconds of one subprocess (stdout and stderr to ``log``); exits with its log tail on failure."""
    with open(log, "w") as fh:
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, check=False, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT).returncode
        wall = time.perf_counter() - t0
    if rc != 0:
        tail = log.read_text()[-3000:]
        sys.exit(f"command failed (exit {rc}): {' '.join(cmd)}\n--- last output ---\n{tail}")
    return wall


def check_reference_log(log: Path, steps: int) -> str:
    """The reference's single evaluation line (it must evaluate once, at the last step)."""
    evals = [ln for ln in log.read_text().splitlines() if "[val] loss=" in ln]
    if len(evals) != 1 or not evals[0].startswith(f"{steps} "):
        sys.exit(f"reference: expected one evaluation, at step {steps}; its log has {len(evals)}: {evals[:3]}")
    return evals[0]


def attention_kernel_ms(repeats: int = 50) -> float:
    """Milliseconds of one forward + backward of the causal attention kernel at the work's shapes
    (batch 16, one head, T = 256, head width 8), median of ``repeats`` after a warm-up."""
    q, k, v = (torch.randn(16, 1, 256, 8, requires_grad=True) for _ in range(3))
    grad = torch.randn(16, 1, 256, 8)
    times = []
    for i in range(repeats + 5):
        t0 = time.perf_counter()
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def with_path(env: dict[str, str], first: str) -> dict[str, str]:
    env = dict(env)
    env["PYTHONPATH"] = first + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--reference",
        type=Path,
        required=True,
        help="local checkout of Local-to-Global's Markov-LLM-k/src (the folder with main.py)",
    )
    ap.add_argument("--pairs", type=int, default=3, help="alternating (tdlab, reference) pairs")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="OMP_NUM_THREADS / MKL_NUM_THREADS / TDLAB_THREADS for both (default: torch's default)",
    )
    ap.add_argument("--steps", type=int, default=1000, help="training steps of both (the measurement: 1000)")
    args = ap.parse_args()
    if args.pairs < 1 or args.steps < 1 or (args.threads is not None and args.threads < 1):
        ap.error("--pairs, --steps and --threads must be positive")
    main_py = find_main(args.reference.resolve())

    base = dict(os.environ)
    base["WANDB_MODE"] = "disabled"
    if args.threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TDLAB_THREADS"):
            base[var] = str(args.threads)

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} cores, "
        f"threads: {args.threads if args.threads is not None else 'torch default'}"
    )
    print(f"work: gpt2, 1 layer, d=8, T=256, batch 16, {args.steps} steps, eval at the end, 1 member, fp32 CPU")
    print(f"reference: {main_py}")
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)

    rows: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="tdlab_bench_ref_") as tmp:
        root = Path(tmp)
        shim = root / "shim"
        shim.mkdir()
        (shim / "tiktoken.py").write_text(TIKTOKEN_STUB)
        ref_env = with_path(base, str(shim))
        td_env = with_path(base, str(HERE_SRC))
        print(f"{'pair':>4} {'tdlab s':>9} {'reference s':>12} {'ref/tdlab':>10}")
        for i in range(args.pairs):
            td_out, ref_out = root / f"tdlab{i}", root / f"ref{i}"
            td_out.mkdir()
            ref_out.mkdir()
            t_td = timed(tdlab_cmd(args.steps, td_out), td_env, td_out, root / f"tdlab{i}.log")
            t_ref = timed(reference_cmd(main_py, args.steps, ref_out), ref_env, ref_out, root / f"ref{i}.log")
            last_eval = check_reference_log(root / f"ref{i}.log", args.steps)
            rows.append((t_td, t_ref))
            print(f"{i + 1:>4} {t_td:>9.1f} {t_ref:>12.1f} {t_ref / t_td:>10.2f}", flush=True)
        # the floor's start-up: a fresh process that only imports torch, median of 3
        imp = statistics.median(
            timed([sys.executable, "-c", "import torch"], base, root, root / "import.log") for _ in range(3)
        )
    med_td, med_ref = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    print(
        f"{'med':>4} {med_td:>9.1f} {med_ref:>12.1f} {statistics.median(r[1] / r[0] for r in rows):>10.2f}"
        f"   (ratio column: median of the pairs' ratios)"
    )
    load1 = os.getloadavg()
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    print(f"reference's last evaluation: {last_eval}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    kernel_ms = attention_kernel_ms()
    floor = imp + args.steps * kernel_ms / 1000
    print(
        f"floor: import torch {imp:.1f} s + {args.steps} x attention kernel {kernel_ms:.2f} ms "
        f"(forward + backward, {torch.get_num_threads()} threads) = {floor:.1f} s; "
        f"reference / floor = {med_ref / floor:.2f}x, the most any program with this kernel can reach "
        f"(measured: {med_ref / med_td:.2f}x)"
    )


if __name__ == "__main__":
    main()

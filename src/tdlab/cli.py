"""The ``tdlab`` command.

    tdlab list                                   every experiment, with its seed paper and figure
    tdlab run NAME [--profile quick|standard|paper] [--set a.b=c ...] [--seeds N] [--seed S] [--device cpu|cuda] [--out DIR]
    tdlab report RUN_DIR                         rebuild claims, figures, summary.json and report.html
    tdlab runs [--out DIR]                       table of past runs with their claim verdicts
    tdlab explain NAME [GROUP] [--results DIR] [--json]
                                                 each paper claim as the paper states it: quote, place, kind,
                                                 hypotheses met, settings off the seed's, threshold's source,
                                                 the verdict and what decided it
    tdlab atlas run|build|serve                  the claims atlas: sweep each experiment's atlas axes, build
                                                 a static site of where each claim holds, serve it
    tdlab docs build [--runs DIR] [--site DIR]   the documentation site: seed pages from the runs, mkdocs --strict
    tdlab export RUN_DIR --arm A --member I --to transformer-lens [--out FILE]
    tdlab export RUN_DIR --to tensorboard [--out DIR] [--arm A] [--member I]

Bad input (unknown experiment, bad ``--set``, corrupt run directory, a path that is not allowed) prints
one message naming the field and what is allowed, exits with code 2 and leaves no run directory behind.
A finished run directory is read-only to every command but ``run --resume`` and ``report``
(:mod:`tdlab.safeio`). ``tdlab run NAME --help`` lists the experiment's config keys.
"""

from __future__ import annotations

from tdlab.cores import passive_openmp

passive_openmp()  # before anything imports torch: idle OpenMP threads sleep instead of spinning against other runs

import contextlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from tdlab.cluster import check_address
from tdlab.config import ECHO_CHARS, ConfigError, echo, one_line, parse_duration
from tdlab.runs import RunDirError, RunNotMovedError, check_run_id, list_runs
from tdlab.safeio import check_not_in_run, check_output_folder
from tdlab.train.lanes import limited_to
from tdlab.train.live import streaming_to

if TYPE_CHECKING:
    from tdlab.pages.compare import Comparison

try:  # typer >= 0.2x carries its own copy of click, whose exceptions are not click's
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer on click
    from click import exceptions as click_errors  # type: ignore[no-redef]  # the same module, an older home

out_console = Console()
err_console = Console(stderr=True)

DEFAULT_OUT = Path("runs")
BUDGET, LOOKS = "30m", 4  # --decide's wall time and looks when --budget / --looks are not given
MAX_THREADS = 4096  # the most CPU threads a run may ask for (--threads, TDLAB_THREADS)
MAX_ERROR_CHARS = 20 * ECHO_CHARS  # an error line is cut here (the known-fields list is the longest)


def _notice(message: str) -> None:
    """Print one line on stderr, not an error (a stop asked for, what an interruption kept)."""
    err_console.print(message, highlight=False, soft_wrap=True, markup=False)


def _error_line(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr as exactly one line (markup in the message is printed as is)."""
    text = one_line(message)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    _error_line(message)
    raise typer.Exit(code=2)


def _backend(name: str) -> Literal["local", "ray"] | None:
    """``name`` as a sweep or batch backend, or None when it is neither."""
    return "local" if name == "local" else "ray" if name == "ray" else None


def _warning(message: str) -> None:
    """Print ``warning: MESSAGE`` on stderr (something skipped; the command goes on)."""
    err_console.print(f"warning: {message}", highlight=False, soft_wrap=True, markup=False)


class _OneLineErrors(TyperGroup):
    """The ``tdlab`` command group. A usage error (unknown option, missing argument, a value click
    cannot convert or that is out of an option's range) is one line on stderr and exit code 2, not
    the multi-line box typer draws; the rest of typer's behaviour is kept."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        more = dict(extra, windows_expand_args=windows_expand_args)
        if not standalone_mode:  # a caller that handles click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **more)
        try:
            code = super().main(args, prog_name or "tdlab", complete_var, standalone_mode=False, **more)
        except click_errors.NoArgsIsHelpError as exc:  # bare `tdlab`: the help, as before
            out_console.print(exc.ctx.get_help(), highlight=False, markup=False)
            sys.exit(2)
        except click_errors.ClickException as exc:
            _error_line(exc.format_message())
            sys.exit(2)
        except typer.Abort:
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    help="tdlab: how transformers learn, reproduced with computed verdicts.",
)


IncludeOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--include",
        help="a folder of experiment modules (or one .py file) of your own to register first; "
        "installed packages register theirs under the 'tdlab.experiments' entry point group",
    ),
]


def _include(paths: Sequence[Path] | None) -> None:
    """Register the experiments at ``paths`` (``--include``), and pass them on to the runs this process starts
    (``TDLAB_INCLUDE``: a batch's or a sweep's child processes include them too)."""
    if not paths:
        return
    from tdlab.experiments.base import include

    try:
        for p in paths:
            include(p)
    except ConfigError as exc:
        _fail(str(exc))
    known = [x for x in os.environ.get("TDLAB_INCLUDE", "").split(os.pathsep) if x]
    os.environ["TDLAB_INCLUDE"] = os.pathsep.join(dict.fromkeys([*known, *(str(Path(p).resolve()) for p in paths)]))


@app.command("list")
def list_experiments(include: IncludeOption = None) -> None:
    """List every experiment with the seed paper and figure it reproduces (and those of your own packages)."""
    import importlib.metadata

    from tdlab.experiments.catalog import CATALOG  # the table, no experiment imported

    _include(include)
    own: dict[str, Any] = {}
    # experiments of other packages (and of --include) are imported to be listed; tdlab's own never are
    if include or importlib.metadata.entry_points(group="tdlab.experiments"):
        from tdlab.experiments.base import load_plugins, registered

        load_plugins()
        own = {n: e for n, e in registered().items() if n not in CATALOG}

    table = Table(show_lines=False)
    # names are what one types: never cut, whatever the terminal's width (the other columns wrap)
    table.add_column("experiment", no_wrap=True, min_width=max(map(len, CATALOG), default=10))
    for col in ("paper", "reproduces", "profiles"):
        table.add_column(col, overflow="fold")
    for name, entry in sorted(CATALOG.items()):
        table.add_row(name, entry.paper, entry.figure, ", ".join(entry.profiles))
    for name, exp in sorted(own.items()):
        table.add_row(name, str(exp.paper), str(exp.figure), ", ".join(exp.profiles))
    out_console.print(table)


class _RunCommand(TyperCommand):
    """``tdlab run``: ``tdlab run NAME --help`` adds the experiment's config keys to the help."""

    def parse_args(self, ctx, args):
        ctx.meta["tdlab.args"] = list(args)  # the eager --help runs before NAME is parsed
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter):
        super().format_help(ctx, formatter)
        from tdlab.experiments.catalog import CATALOG

        args = ctx.meta.get("tdlab.args", [])
        for i, a in enumerate(args[:-1]):
            if a == "--include":
                _include([Path(args[i + 1])])
        from tdlab.experiments.base import get, registered  # NAME's module only

        name = next((a for a in args if a in CATALOG or a in registered()), None)
        if name is not None:
            _print_config_keys(get(name))


def _print_config_keys(exp) -> None:
    """Every ``--set`` key of ``exp``: type, default under each profile, what its source says."""
    from tdlab.config import build_config
    from tdlab.config_fields import config_fields
    from tdlab.experiments.manifest import ours_fields, plain_value

    built = {}
    for profile, layer in exp.profiles.items():
        try:
            built[profile] = build_config(exp.Config, layer)
        except ConfigError:
            continue
    defaults = {profile: cfg.model_dump(mode="json") for profile, cfg in built.items()}

    def value(tree: dict, key: str) -> str:
        node: Any = tree
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return "null" if node is None else json.dumps(node, default=str)

    out_console.print(
        f"\n[bold]{escape(exp.name)}[/]: seed {escape(str(exp.paper))}, {escape(str(exp.figure))}.", highlight=False
    )
    out_console.print(Padding(Text(str(exp.description)), (0, 0, 0, 2)), highlight=False)
    out_console.print(
        "Config keys (--set KEY=VALUE), each with its type, its default under each profile (--profile) and what "
        "it is (a key of a shared config class describes that class; this experiment's own use is above):",
        highlight=False,
        soft_wrap=True,
    )
    # the keys the paper is silent on (every profile's config has the same keys); none named without a manifest
    ours = set(ours_fields(exp.manifest, next(iter(built.values())))) if exp.manifest and built else set()
    for f in config_fields(exp.Config):
        values = {p: value(d, f.key) for p, d in defaults.items()}
        shown = (
            f"= {next(iter(values.values()))}"
            if len(set(values.values())) == 1
            else ", ".join(f"{p} {v}" for p, v in values.items())
        )
        out_console.print(
            f"  [bold]{escape(f.key)}[/]  {escape(f.type_text)}  {escape(shown)}", highlight=False, soft_wrap=True
        )
        doc = f.doc + (f" [set per arm: use {exp.arm_fields[f.key]}]" if f.key in exp.arm_fields else "")
        if doc:
            out_console.print(Padding(Text(doc), (0, 0, 0, 6)), highlight=False)
        setting = exp.manifest.get(f.key)
        if setting is not None:
            said = f"the paper: {json.dumps(plain_value(setting.value), default=str)} ({setting.where})"
            said += f"; {setting.note}" if setting.note else ""
        elif f.key in ours:
            said = "the paper: silent (ours)"
        else:
            continue
        out_console.print(Padding(Text(said, style="dim"), (0, 0, 0, 6)), highlight=False)


@app.command(cls=_RunCommand)
def run(
    name: Annotated[str | None, typer.Argument(help="experiment name (see `tdlab list`)")] = None,
    profile: Annotated[
        str,
        typer.Option(
            help="quick (minutes on 2 CPU cores), standard (~30 min on 2 CPU cores: quick trained longer, see tdlab.costs.standard) or paper (the seed's settings)"
        ),
    ] = "quick",
    set_: Annotated[list[str] | None, typer.Option("--set", help="override a config field: --set task.p=0.7")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="ensemble members (independent seeds) per arm")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="root seed of the run")] = None,
    device: Annotated[str, typer.Option(help="cpu, or cuda / cuda:N where a GPU exists")] = "cpu",
    out: Annotated[Path, typer.Option(help="folder that holds run directories")] = DEFAULT_OUT,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress bar")] = False,
    resume: Annotated[
        Path | None, typer.Option(help="finish an interrupted run (OUT/RUN_ID) from its checkpoints")
    ] = None,
    run_id: Annotated[
        str | None, typer.Option(help="name of the run directory (default: time stamp + experiment)")
    ] = None,
    sweep: Annotated[str | None, typer.Option(hidden=True, help="tag the run with the sweep it belongs to")] = None,
    decide: Annotated[
        bool,
        typer.Option(
            "--decide",
            help="add members (and, for claims at convergence, training) in "
            "rounds until the paper claims are settled (a fixed schedule of looks, the "
            "error rate split across them)",
        ),
    ] = False,
    budget: Annotated[
        str | None, typer.Option(help=f"--decide: wall time for all rounds (90s, 30m, 1.5h) [default: {BUDGET}]")
    ] = None,
    looks: Annotated[
        int | None,
        typer.Option(
            help=f"--decide: looks in all, the first pass included; members double at each [default: {LOOKS}]"
        ),
    ] = None,
    tensorboard: Annotated[
        str | None,
        typer.Option(
            help="also write the metrics live as TensorBoard scalars to this "
            "folder (one run per member, tags ARM/NAME): tensorboard --logdir DIR"
        ),
    ] = None,
    lanes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="independent fits trained at once on one-thread CPU lanes, "
            "where the experiment trains on one thread (same numbers; default: "
            "the usable cores; 1: one after another)",
        ),
    ] = None,
    checkpoint_every: Annotated[
        str,
        typer.Option(
            help="save a resumable checkpoint of every training fit after this "
            "much wall time (90s, 5m; 'off': only at the end of each chunk)"
        ),
    ] = "5m",
    until: Annotated[
        str | None,
        typer.Option(
            help="stop cleanly after this wall time (90s, 9m, 1h): checkpoint, "
            "keep the staging folder, exit 3; --resume continues it"
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_THREADS,
            help="CPU threads for this run (default: the usable cores "
            "that other tdlab processes do not hold, at least 1; for --resume, the threads the run began with)",
        ),
    ] = None,
    include: IncludeOption = None,
) -> None:
    """Run an experiment: progress bar, then a computed verdict per claim; writes a run directory.
    `tdlab run NAME --help` lists NAME's config keys with their types and defaults. SIGTERM, or --until,
    stops it after the step each fit is in, with a checkpoint: `tdlab run --resume OUT/RUN_ID` continues it
    to the numbers of a run never stopped."""
    from tdlab.cores import claim_threads, release_threads
    from tdlab.train.stopping import INTERRUPTED_EXIT_CODE, STOPPED_EXIT_CODE, RunStopped, stopping

    _include(include)
    try:
        every_s = (
            None
            if checkpoint_every.strip().lower() == "off"
            else parse_duration(checkpoint_every, "--checkpoint-every")
        )
        until_s = None if until is None else parse_duration(until, "--until")
    except ConfigError as exc:
        _fail(str(exc))

    def said(signal_name: str) -> None:
        _notice(
            f"{'Ctrl-C' if signal_name == 'SIGINT' else signal_name}: stopping after the current step with a "
            f"checkpoint ({'Ctrl-C' if signal_name == 'SIGINT' else signal_name} again: at once)"
        )

    import torch

    from tdlab.runner import recorded_threads

    # a resume trains on the threads the run began with (another count changes the numbers' last bits);
    # --threads chooses otherwise
    kept = recorded_threads(resume) if resume is not None and threads is None else None
    share = claim_threads(threads or kept or _cores_share())  # this run's share of the cores, held until it exits
    lane_cap = lanes or share
    before = torch.get_num_threads()
    torch.set_num_threads(share)
    try:
        with stopping(every_s, until_s, on_signal=said) as policy:
            finished = _run_or_resume(
                name,
                profile,
                set_,
                seeds,
                seed,
                device,
                out,
                quiet,
                resume,
                run_id,
                sweep,
                decide,
                budget,
                looks,
                tensorboard,
                lane_cap,
            )
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    except RunNotMovedError as exc:  # a finished run left in its staging folder: kept, named, exit 1
        _error_line(str(exc))
        raise typer.Exit(code=1) from None
    except RunStopped as stop:
        where = getattr(stop, "run_dir", None)
        _notice(
            f"{stop}; the staging folder keeps it: `tdlab run --resume {where}` continues it"
            if where is not None
            else str(stop)
        )
        raise typer.Exit(code=INTERRUPTED_EXIT_CODE if policy.signal_name == "SIGINT" else STOPPED_EXIT_CODE) from None
    except KeyboardInterrupt as stop:  # a second Ctrl-C, or one where no checkpointed fit was training
        _notice(_kept(getattr(stop, "run_dir", None)))
        raise typer.Exit(code=INTERRUPTED_EXIT_CODE) from None
    finally:
        torch.set_num_threads(before)  # an in-process caller (tests, notebooks) keeps its own count
        release_threads()
    summary = finished.summary
    _print_summary(summary, finished.path)
    if summary["status"] != "done":
        raise typer.Exit(code=1)


def _kept(final: Path | None) -> str:
    """What an interrupted run kept: its staging folder's finished arms and checkpoints, and the command that
    resumes it."""
    from tdlab.runs import staged_progress, staging_path

    if final is None:
        return "interrupted before the run started: nothing written"
    staging = staging_path(final)
    kept = [*(staging / "arrays").glob("*.safetensors"), *(staging / "checkpoints").glob("*.json")]
    if not staging.is_dir() or not kept:
        return "interrupted: no fit had finished or saved a checkpoint, so nothing was kept"
    return (
        f"interrupted: {staged_progress(staging)}, kept in {staging}; `tdlab run --resume {final}` continues from them"
    )


def _run_or_resume(
    name,
    profile,
    set_,
    seeds,
    seed,
    device,
    out,
    quiet,
    resume,
    run_id,
    sweep,
    decide,
    budget,
    looks,
    tensorboard,
    lane_cap,
):
    """The body of :func:`run`: resume ``resume``, or run ``name`` (config, decide plan, TensorBoard sink)."""
    from tdlab import runner
    from tdlab.experiments.base import get

    if resume is not None:
        if name is not None or set_:
            raise ConfigError("--resume: takes no experiment name or --set (the run's own config is used)")
        if tensorboard is not None:
            raise ConfigError(
                "--tensorboard: not with --resume (the rows before the interruption are not streamed); "
                "export the finished run: tdlab export RUN_DIR --to tensorboard --out DIR"
            )
        with limited_to(lane_cap):
            return runner.resume(resume, runner.check_device(device), progress=not quiet)
    if name is None:
        raise ConfigError("experiment: missing experiment name; see `tdlab list`")
    exp = get(name)
    if run_id is not None:  # before --out is made: a bad id leaves nothing behind
        check_run_id(run_id)
    check_not_in_run(out, "--out")
    if not decide:  # without --decide they would be ignored, a typo and all
        for option, value in (("--budget", budget), ("--looks", looks)):
            if value is not None:
                raise ConfigError(
                    f"{option}: only with --decide (it sets the --decide rounds); add --decide or drop it"
                )
    cfg = exp.make_config(profile, set_ or [], members=seeds, seed=seed)
    plan = _decide_plan(budget or BUDGET, LOOKS if looks is None else looks) if decide else None
    sink = _tensorboard_sink(tensorboard, out, run_id) if tensorboard is not None else None
    with sink if sink is not None else contextlib.nullcontext(), streaming_to(sink), limited_to(lane_cap):
        return runner.execute(exp, cfg, profile, out, runner.check_device(device), not quiet, run_id, sweep, plan)


def _tensorboard_sink(folder: str, out: Path, run_id: str | None):
    """The live TensorBoard sink of ``run --tensorboard DIR``: ``DIR`` checked like an output folder
    (:func:`tdlab.export.tensorboard.check_folder`; nothing written until the first scalar), and not the
    run directory this run will write. An empty ``DIR`` is refused (as a path it is the current folder)."""
    from tdlab.export.tensorboard import TensorBoardScalars, check_folder
    from tdlab.runs import staging_path

    if not folder.strip():
        raise ConfigError("--tensorboard: an empty folder name; give a folder (e.g. --tensorboard tb)")
    path = check_folder(Path(folder), "--tensorboard")
    if run_id is not None:
        here, final = path.resolve(), (out / run_id).expanduser().resolve()
        for run_dir in (final, staging_path(final)):
            if here == run_dir or run_dir in here.parents:
                raise ConfigError(
                    f"--tensorboard {echo(str(folder))}: inside the run directory {final} this run writes; "
                    f"write somewhere else"
                )
    return TensorBoardScalars(path)


def _decide_plan(budget: str, looks: int):
    """The ``--decide`` plan from ``--budget`` and ``--looks``, refused in one line naming the option."""
    from pydantic import ValidationError

    from tdlab.decide import DecidePlan

    seconds = parse_duration(budget, "--budget")
    try:
        return DecidePlan(budget_s=seconds, looks=looks)
    except ValidationError:
        raise ConfigError(f"--looks: {looks} is out of range; allowed: 1 to 8") from None


_COLORS = {"holds": "green", "fails": "red", "not resolved": "yellow", "not evaluable": "bright_black"}


def _print_summary(summary: dict, path: Path) -> None:
    """One line per claim group (paper claims, then sanity checks apart), arms that did not train."""
    out_console.print(
        f"\n[bold]{summary['experiment']}[/] ({escape(summary['figure'])}) — status {summary['status']}"
        + (f": {escape(summary['error'])}" if summary.get("error") else "")
    )
    for arm, h in (summary.get("arms") or {}).items():
        if not h.get("trained", True):
            out_console.print(
                f"[yellow]{h['status'].upper()}[/] arm {escape(str(arm))}: {escape('; '.join(h.get('reasons', [])))}",
                highlight=False,
                soft_wrap=True,
            )
    for title, key in (("paper claims", "claims"), ("sanity checks", "sanity")):
        groups = summary.get(key) or []
        if not groups:
            continue
        tally = ", ".join(
            f"{n} {v}"
            for v in ("holds", "fails", "not resolved", "not evaluable")
            if (n := sum(g["verdict"] == v for g in groups))
        )
        out_console.print(f"[bold]{title}[/] ({tally}):", highlight=False)
        for g in groups:
            out_console.print(
                f"  [{_COLORS[g['verdict']]}]{g['verdict'].upper():13}[/] {escape(_group_line(g))}",
                highlight=False,
                soft_wrap=True,
            )
    _print_measurements(summary.get("measurements") or {})
    for n in summary.get("notes", []):
        out_console.print(f"  · {n}", highlight=False, markup=False, soft_wrap=True)  # "E[y²]" is text, not markup
    if summary.get("decide"):
        from tdlab.report.findings import decided_by

        out_console.print(f"decided by {decided_by(summary)}", highlight=False, soft_wrap=True)
    out_console.print(f"run directory: {path}\nreport: {path / 'report.html'}", highlight=False, soft_wrap=True)


def _print_measurements(values: dict) -> None:
    """The per-arm measurements as tables, arms × quantities (:mod:`tdlab.report.measurement_tables`; a nested
    one titled ``measurements: cells``, say), what the report's "measurements" tables show; the rest of the
    measurements stays in summary.json and the report."""
    from rich.table import Table

    from tdlab.report.measurement_tables import measurement_tables

    for t in measurement_tables(values)[0]:
        title = f"measurements: {t.title}" if t.title else "measurements"
        table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, min_width=len(title))
        table.add_column("")
        for c in t.columns:
            table.add_column(c, justify="right", overflow="fold")
        for name, cells in t.rows:
            table.add_row(name, *cells)
        # A log or a pipe has no width to keep to: each row on one line there, its cells whole, instead of
        # folded into the 80 columns rich assumes; a terminal keeps its own width.
        if out_console.is_terminal:
            out_console.print(table, highlight=False)
            continue
        kept = out_console.width
        natural = out_console.measure(table, options=out_console.options.update_width(100_000)).maximum
        out_console.width = max(kept, natural)
        try:
            out_console.print(table, highlight=False)
        finally:
            out_console.width = kept


def _group_line(g: dict) -> str:
    """``id: the numbers`` (one row: what decided it; several: the verdict tally)."""
    from tdlab.report.findings import row_summary

    rows = g["rows"]
    if len(rows) == 1:
        r = rows[0]
        reason = f" ({r['reason']})" if r.get("reason") and r["verdict"] != "not evaluable" else ""
        return f"{g['id']}: {row_summary(r)}{reason}"
    tally = ", ".join(f"{n} {v}" for v, n in g["counts"].items() if n)
    cause = f" ({g['cause']})" if g.get("cause") and g["verdict"] != "holds" and not g.get("reason") else ""
    why = f" — {g['reason']}" if g.get("reason") else ""
    return f"{g['id']}: {len(rows)} rows{f' — {tally}' if tally else ''}{cause}{why}"


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="a run directory")], include: IncludeOption = None) -> None:
    """Rebuild the claims, figures, summary.json and report.html of a run from its stored data."""
    from tdlab.runner import rebuild

    _include(include)
    try:
        finished = rebuild(run_dir)
    except (RunDirError, ConfigError) as exc:
        _fail(str(exc))
    _print_summary(finished.summary, finished.path)


@app.command()
def explain(
    name: Annotated[str, typer.Argument(help="an experiment (tdlab list)")],
    group: Annotated[str | None, typer.Argument(help="one paper claim group of it (default: every one)")] = None,
    results: Annotated[
        Path, typer.Option(help="a results folder of one profile, whose NAME.json record is explained")
    ] = Path("results/paper"),
    as_json: Annotated[bool, typer.Option("--json", help="a JSON list, one object per group")] = False,
    include: IncludeOption = None,
) -> None:
    """Each paper claim group of NAME as the paper states it: its quote and place, its kind (at stated
    settings, a limit, an existence), each hypothesis and whether the run met it, the settings where the run
    departs from the seed's manifest, the threshold and its source, and the verdict (the record re-judged by
    the current rules) with what decided it; above them, how NAME reads the seed where the seed is ambiguous or
    silent. With no record in --results, the declarations alone."""
    from tdlab.explain import explain as explain_groups
    from tdlab.explain import explain_lines, readings_lines

    _include(include)
    try:
        entries = explain_groups(name, group, results)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    if as_json:
        out_console.print_json(json.dumps(entries, default=str))
        return
    for line in [*readings_lines(name), *explain_lines(entries)]:
        out_console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command()
def runs(
    out: Annotated[Path, typer.Option(help="folder that holds run directories")] = DEFAULT_OUT,
    where: Annotated[
        str | None,
        typer.Option(
            help="SQL condition, e.g. 'claims.failed > 0', \"experiment = 'markov-init'\", 'config.task.p >= 0.5'"
        ),
    ] = None,
    reindex: Annotated[
        bool, typer.Option("--reindex", help="rebuild the index from the run directories first")
    ] = False,
) -> None:
    """Table of past runs with their claim verdicts, from the run index (OUT/index.sqlite)."""
    from tdlab.index import INDEX_NAME, RunIndex, set_aside_if_corrupt

    try:
        if not out.expanduser().exists():  # a listing makes no folder: nothing ran there
            raise ConfigError(
                f"--out: {out} does not exist, so no runs are there (`tdlab run NAME --out {out}` writes them)"
            )
        check_output_folder(out, "--out")  # the index is written there: a folder, writable, not a run directory
        aside = set_aside_if_corrupt(out) if reindex else None  # a corrupt index is kept, not deleted
        if aside is not None:
            err_console.print(
                f"{out / INDEX_NAME} was corrupt: moved aside to {aside}; rebuilding the index",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
        fresh = not (out / INDEX_NAME).exists()
        index = RunIndex(out)
        if reindex or fresh:
            for run in list_runs(out, _warning):
                index.add_run(run, run.config.get("sweep"))
        rows = index.query(where)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    table = Table(
        "run", "experiment", "profile", "status", "claims held", "fail", "unresolved", "n/e", "wall (s)", "sweep"
    )
    for r in rows:
        s = r["summary"] or {}
        table.add_row(
            r["run_id"],
            r["experiment"] or "?",
            r["profile"] or "?",
            r["status"] or "?",
            f"{s.get('claims_held', 0)}/{r['claims_total'] or 0}",
            str(r["claims_failed"] or 0),
            str(s.get("claims_not_resolved", 0)),
            str(s.get("claims_not_evaluable", 0)),
            f"{r['wall_time_s'] or 0:.0f}",
            r["sweep"] or "",
        )
    out_console.print(table)
    out_console.print(f"{len(rows)} run(s)", highlight=False)
    stopped = _interrupted(out)
    if stopped:
        out_console.print(
            f"{len(stopped)} interrupted run(s), not finished (their staging folders keep them):", highlight=False
        )
        for run_id, experiment, progress in stopped:
            out_console.print(
                f"  {run_id} ({experiment}{'; ' + progress if progress else ''}): tdlab run --resume {out / run_id}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )


def _interrupted(out: Path) -> list[tuple[str, str, str]]:
    """The stopped or killed runs under ``out`` (a ``.staging-RUN_ID`` folder with its config, not finished): run
    id, experiment and what is stored of it. A staging folder that is not readable is left out, never followed."""
    from tdlab.runs import Run, staged_segments

    found = []
    for staging in sorted(out.glob(".staging-*")):
        if staging.is_symlink() or not staging.is_dir():
            continue
        run_id = staging.name.removeprefix(".staging-")
        if (out / run_id).exists():
            continue
        try:
            experiment = str(Run.read_config(staging / "config.yaml")["experiment"])
        except (RunDirError, OSError, KeyError):
            continue
        wall = sum(g["wall_s"] for g in staged_segments(staging))
        trained = f"{wall:.0f} s trained" if wall < 120 else f"{wall / 60:.0f} min trained"
        found.append((run_id, experiment, trained if wall else ""))
    return found


@app.command("sweep")
def sweep_cmd(
    spec: Annotated[Path, typer.Argument(help="sweep spec (YAML): experiment, profile, set, grid, points")],
    backend: Annotated[str, typer.Option(help="local (process pool) or ray")] = "local",
    workers: Annotated[int, typer.Option(min=1, help="points run at once")] = 2,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address HOST:PORT (ray backend; default: a local Ray instance)")
    ] = None,
    out: Annotated[Path, typer.Option(help="folder that holds run directories")] = DEFAULT_OUT,
    max_points: Annotated[int, typer.Option(min=1, help="refuse specs with more points than this")] = 10_000,
) -> None:
    """Run a grid of runs; finished points are skipped when the sweep is started again."""
    from tdlab.runner import check_out
    from tdlab.sweep import load_spec, run_sweep

    try:
        kind = _backend(backend)
        if kind is None:
            raise ConfigError(f"backend: unknown backend {backend!r}; allowed: local, ray")
        plan = load_spec(spec, max_points)
        check_not_in_run(out, "--out")
        if kind == "ray":
            check_address(address)  # before the folder is made
        check_out(out)  # before the first point writes anything
        points = run_sweep(
            plan, out, kind, workers, address, echo=lambda m: out_console.print(m, highlight=False, soft_wrap=True)
        )
    except ConfigError as exc:
        _fail(str(exc))
    if any(p.status == "failed" for p in points):
        raise typer.Exit(code=1)


def _print_batch_table(jobs: Sequence[Any], parallel: int) -> None:
    from tdlab.batch import status_table

    rows, line = status_table(jobs, parallel)
    table = Table("experiment", "state", "wall", "estimate left", "note")
    for r in rows:
        table.add_row(*(escape(c) for c in r))
    out_console.print(table)
    out_console.print(line, highlight=False)


@app.command("batch")
def batch_cmd(
    names: Annotated[list[str] | None, typer.Argument(help="experiments (default: every one)")] = None,
    profile: Annotated[str, typer.Option(help="the profile every run uses (paper: the seeds' settings)")] = "paper",
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="override a config field of every run: --set train.steps=300")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu, or cuda / cuda:N where a GPU exists")] = "cpu",
    until: Annotated[
        str | None,
        typer.Option(
            help="stop after this wall time (9m, 1.5h, 4m10s): running runs checkpoint and exit; the next batch continues them"
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1024,
            help="runs at once (default: cores / threads on the CPU; up to 8 on a GPU, as its free memory allows)",
        ),
    ] = None,
    threads: Annotated[
        int | None, typer.Option(min=1, max=MAX_THREADS, help="CPU threads per run (default: cores / jobs)")
    ] = None,
    out: Annotated[Path, typer.Option(help="the batch folder: its runs and its state")] = Path("batch"),
    results: Annotated[
        str, typer.Option(help="publish each finished run's record to RESULTS/PROFILE/NAME.json ('' : do not publish)")
    ] = "results",
    checkpoint_every: Annotated[str, typer.Option(help="each run saves a checkpoint after this much wall time")] = "3m",
    backend: Annotated[str, typer.Option(help="local (processes on this machine) or ray")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address HOST:PORT (ray backend; its nodes must see --out)")
    ] = None,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan", help="print the queue (state, estimated time of each run) and run nothing; writes nothing"
        ),
    ] = False,
    order: Annotated[
        str,
        typer.Option(
            help="the order runs start in: shortest (first, by the estimates) or named (as the names are given)"
        ),
    ] = "shortest",
    only_missing: Annotated[
        bool,
        typer.Option(
            "--only-missing",
            help="leave out the experiments with a current record under --results (made at the profile's config as "
            "it is now): a new machine runs only what is not published yet",
        ),
    ] = False,
    include: IncludeOption = None,
) -> None:
    """Run a queue of experiments whose state is its output folder: invoked again (here or on any machine
    with the folder) it resumes every unfinished run from its checkpoints. Prints what finished, what is
    left and the estimated time to finish; exit 0 when all finished, 3 when runs are left, 1 when one failed."""
    from tdlab.batch import ORDERS, check_names, plan_batch, published, run_batch
    from tdlab.runner import check_device

    _include(include)
    try:
        kind = _backend(backend)
        if kind is None:
            raise ConfigError(f"--backend: unknown backend {echo(backend)}; allowed: local, ray")
        ordered = next((o for o in ORDERS if o == order), None)
        if ordered is None:
            raise ConfigError(f"--order: unknown order {echo(order)}; allowed: {', '.join(ORDERS)}")
        until_s = None if until is None else parse_duration(until, "--until")
        parse_duration(checkpoint_every, "--checkpoint-every")
        check_not_in_run(out, "--out")
        check_device(device)
        if only_missing:
            if not results:
                raise ConfigError("--only-missing: reads the records under --results; give --results a folder")
            names = check_names(names or [])
            skip = published(names, profile, Path(results), set_ or [])
            if skip:
                out_console.print(
                    f"published at the current config, left out: {', '.join(skip)}",
                    highlight=False,
                    soft_wrap=True,
                    markup=False,
                )
            names = [n for n in names if n not in skip]
            if not names:
                out_console.print("nothing to run: every experiment named has a current record", highlight=False)
                return
        if plan:
            queue = plan_batch(
                check_names(names or []), profile, out, device, Path(results) if results else None, set_ or [], ordered
            )
            _print_batch_table(queue, jobs or 1)
            return
        done = run_batch(
            names or [],
            profile,
            out,
            device=device,
            until_s=until_s,
            jobs=jobs,
            threads=threads,
            results=Path(results) if results else None,
            checkpoint_every=checkpoint_every,
            backend=kind,
            address=address,
            sets=set_ or [],
            order=ordered,
            say=lambda m: out_console.print(m, highlight=False, soft_wrap=True, markup=False),
        )
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    _print_batch_table(done, jobs or 1)
    if any(j.state == "failed" for j in done):
        raise typer.Exit(code=1)
    if any(j.state not in ("done", "diverged") for j in done):
        raise typer.Exit(code=3)


results_app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    help="Published records (results/PROFILE/NAME.json): publish finished runs, check and re-judge.",
)
app.add_typer(results_app, name="results")


@results_app.command("publish")
def results_publish(
    run_dirs: Annotated[list[Path], typer.Argument(help="finished run directories")],
    to: Annotated[
        Path, typer.Option("--to", "--results", help="the results folder (--results, as findings and batch name it)")
    ] = Path("results"),
    commit: Annotated[
        str | None, typer.Option(help="the commit that trained them, for runs of a tdlab that recorded none")
    ] = None,
) -> None:
    """Write each run's record to TO/PROFILE/NAME.json (a run with no record.json is analysed again)."""
    from tdlab.results import publish
    from tdlab.runs import COMMIT_FORM

    try:
        if commit is not None and not COMMIT_FORM.match(commit):
            raise ConfigError(f"--commit: {echo(commit)} is not a git commit; allowed: 7-40 lowercase hex digits")
        check_output_folder(to, "--to")  # a folder of ours: never a file, a device or a folder inside a run
        paths = publish(run_dirs, to, commit)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    for p in paths:
        out_console.print(f"wrote {p}", highlight=False, soft_wrap=True, markup=False)


@results_app.command("check")
def results_check(
    folder: Annotated[Path, typer.Argument(help="a results folder of one profile (results/paper)")] = Path(
        "results/paper"
    ),
    write: Annotated[
        bool, typer.Option("--write", help="rewrite the records the current rules judge differently")
    ] = False,
) -> None:
    """Load every record (schema, experiment, profile, commits) and re-judge it with the current claims layer
    on its stored measurements: lists the groups whose verdict or cause the current rules would move, and the
    records whose settings diff against the seed's manifest changed (exit 1 if any; with --write, rewrites
    those records in FOLDER and exits 0), and names the records made at a config their profile no longer has
    (to run again)."""
    from tdlab.records import record_text
    from tdlab.results import is_current, load_records, rejudged
    from tdlab.safeio import atomic_write

    try:
        if not folder.is_dir():
            raise ConfigError(f"folder: {folder} is not a folder of records")
        records = load_records(folder)
        moved, changed = [], []
        # the records whose run was not the profile as the code now defines it (at the record's own root seed:
        # a replicate at seed 1 is its profile too): re-run them to publish
        off = [n for n, r in records.items() if not is_current(r, [f"seed={r.seed}"])]
        for name, rec in records.items():
            if rec.measured is None:
                continue
            new = rejudged(rec)
            # a group that moved between paper and sanity moved too: it no longer counts (or now counts)
            before = {g["id"]: (g["kind"], g["verdict"], g["cause"]) for g in rec.claims + rec.sanity}
            after = {g["id"]: (g["kind"], g["verdict"], g["cause"]) for g in new.claims + new.sanity}
            lines = [
                f"{name} {gid}: {' / '.join(before.get(gid, ('absent', '', '')))} -> {' / '.join(v)}"
                for gid, v in after.items()
                if before.get(gid) != v
            ]
            moved += lines
            if rec.settings_diff != new.settings_diff:  # the manifest says otherwise of its settings now
                fields = [d["field"] for d in new.settings_diff or []]
                moved.append(
                    f"{name} settings: not the seed's in {', '.join(fields)}"
                    if fields
                    else f"{name} settings: the seed's"
                )
            if lines or rec.settings_diff != new.settings_diff:
                changed.append(new)
        if write:
            for rec in changed:  # in the folder named, whatever profile its name suggests
                atomic_write(folder / f"{rec.experiment}.json", record_text(rec.model_dump()))
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    out_console.print(
        f"{len(records)} records in {folder}; {len(moved)} groups the current rules would move"
        + (f"; {len(changed)} records rewritten" if write else "")
        + (
            f"; {len(off)} not at their profile's current config (the profile changed since, or a --set): "
            f"{', '.join(off)}; run them again"
            if off
            else ""
        ),
        highlight=False,
        markup=False,
    )
    for m in moved:
        out_console.print(f"  {m}", highlight=False, markup=False, soft_wrap=True)
    if moved and not write:
        raise typer.Exit(code=1)


@results_app.command("reproduce")
def results_reproduce(
    name: Annotated[str, typer.Argument(help="an experiment with a published record")],
    profile: Annotated[str, typer.Option(help="the record's profile (results/PROFILE/NAME.json)")] = "quick",
    results: Annotated[Path, typer.Option(help="the folder of published records")] = Path("results"),
    out: Annotated[
        Path | None, typer.Option(help="where the re-run's run directory goes (default: a temporary folder)")
    ] = None,
) -> None:
    """Train a published record's config again, on its thread count, and say per claim row whether its numbers
    are identical, within float rounding or differ, and which of commit, platform, Python, torch, BLAS and
    threads differ from the record's (exit 1 when a row differs)."""
    from tdlab.reproduce import reproduce
    from tdlab.results import load_record

    path = results / profile / f"{name}.json"
    try:
        if not path.is_file():
            raise ConfigError(f"record: no published record {path}; `tdlab results publish RUN_DIR` writes one")
        if out is not None:
            check_output_folder(out, "--out")
        result = reproduce(load_record(path), out)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    c = result.counts
    out_console.print(
        f"{name} ({profile}) re-run in {result.run_dir}: {len(result.rows)} rows — "
        + ", ".join(f"{n} {k}" for k, n in c.items()),
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    for what, (then, now) in result.differs.items():
        out_console.print(
            f"  differs from the record: {what} {then} -> {now}", highlight=False, markup=False, soft_wrap=True
        )
    if not result.differs:
        out_console.print("  commit, platform, Python, torch, BLAS and threads: the record's", highlight=False)
    for r in result.rows:
        rel = "" if r.status == "identical" else f" (largest relative difference {r.max_rel:.2g})"
        moved = f"; verdict {r.verdict} -> {r.verdict_now}" if r.verdict != r.verdict_now else ""
        out_console.print(f"  {r.id}: {r.status}{rel}{moved}", highlight=False, markup=False, soft_wrap=True)
    if not result.reproduced:
        raise typer.Exit(code=1)


@results_app.command("compare")
def results_compare(
    a: Annotated[Path, typer.Argument(help="a record (results/paper/NAME.json), or a folder of records")],
    b: Annotated[
        Path,
        typer.Argument(help="another record of the same experiment (another device, seed, commit, profile), or folder"),
    ],
    rtol: Annotated[
        float, typer.Option(help="relative tolerance of the rows with no spread on either side (deterministic values)")
    ] = 1e-6,
    all_groups: Annotated[bool, typer.Option("--all", help="list every group, not only those that differ")] = False,
    into: Annotated[
        Path | None,
        typer.Option("--into", help="two folders: write the table as markdown into this file, between markers"),
    ] = None,
    section: Annotated[str, typer.Option(help="the marker name in --into's file: <!-- NAME:start -->")] = "replicates",
) -> None:
    """Two records of one experiment side by side: each group's verdict in A and B (the same, a difference in
    certainty, or holds against fails), and where both ran the same config (the root seed aside) each row's
    numbers (Welch over the members, Holm over the rows). Two folders: every experiment they share, a line
    each. Exit 1 when a group contradicts or a row differs (with --into: 0 once the table is written), 2 for a
    bad record."""
    from tdlab.pages.compare import compare_folders, compare_records, folder_markdown, folder_rows
    from tdlab.report.findings import replace_between_markers
    from tdlab.results import load_record

    folders = a.is_dir() and b.is_dir()
    try:
        if not folders and (a.is_dir() or b.is_dir()):
            raise ConfigError(f"compare a record with a record, or a folder of records with a folder: {a}, {b}")
        if into is not None:
            if not folders:
                raise ConfigError("--into: writes the table of two folders of records; give two folders")
            _check_section(section)
        cs = compare_folders(a, b, rtol) if folders else [compare_records(load_record(a), load_record(b), rtol)]
        if into is not None:
            replace_between_markers(into, folder_markdown(cs), section)
            out_console.print(f"wrote the {section} section of {into}", highlight=False, markup=False)
            return
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    if not folders:
        _print_comparison(cs[0], all_groups)
    else:
        table = Table(
            Column("experiment", no_wrap=True), "seed", "device", "same", "less sure", "opposite", "rows", "differ"
        )
        for row in folder_rows(cs):
            table.add_row(*(escape(x) for x in row))
        out_console.print(table)
        for c in cs:
            if not c.agree:
                _print_comparison(c, all_groups)
    if not all(c.agree for c in cs):
        raise typer.Exit(code=1)


def _print_comparison(c: Comparison, all_groups: bool) -> None:
    from tdlab.pages.compare import group_rows, header_lines, row_rows, summary_line

    for line in header_lines(c):
        out_console.print(line, highlight=False, markup=False, soft_wrap=True)
    shown = [r for r in group_rows(c) if all_groups or r[4] != "same"]
    if shown:
        # an id is never cut or folded: it is what the user searches for; the verdicts wrap instead
        table = Table(
            Column("group", no_wrap=True, min_width=max(len(g[0]) for g in shown)), "kind", "A", "B", "agreement"
        )
        for g in shown:
            table.add_row(*(escape(x) for x in g))
        out_console.print(table)
    differing = row_rows(c)
    if differing:
        rows = Table(
            Column("row that differs", no_wrap=True, min_width=max(len(r[0]) for r in differing)),
            "A",
            "B",
            "p (Holm over the rows)",
        )
        for r in differing:
            rows.add_row(*(escape(x) for x in r))
        out_console.print(rows)
    out_console.print(summary_line(c), highlight=False, markup=False, soft_wrap=True)


@app.command()
def findings(
    run_dirs: Annotated[list[Path] | None, typer.Argument(help="run directories, in the order of the table")] = None,
    results: Annotated[
        Path | None,
        typer.Option(
            help="a results folder (results/): the verdicts at the seeds' own "
            "settings (its paper records) beside quick's, by seed and by experiment, "
            "instead of run directories"
        ),
    ] = None,
    readme: Annotated[
        Path | None,
        typer.Option(
            "--into",
            "--readme",
            help="write between the SECTION markers of this Markdown file (README.md, a docs/ page) "
            "instead of printing",
        ),
    ] = None,
    before: Annotated[
        Path | None,
        typer.Option(
            help="add what changed: a folder of earlier run directories (one per experiment), or with --results "
            "an earlier results folder (e.g. from `git worktree add /tmp/old REV`: /tmp/old/results)"
        ),
    ] = None,
    section: Annotated[
        str, typer.Option(help="--into: write between <!-- SECTION:start --> and <!-- SECTION:end -->")
    ] = "findings",
    per_paper: Annotated[
        bool,
        typer.Option(
            help="with --results: one short table per seed, a row per experiment (quick and the seed's "
            "settings), the README's, instead of the full tables"
        ),
    ] = False,
    records: Annotated[
        Path | None,
        typer.Option(
            help="a results folder of one profile (results/quick): the findings table and one line per claim "
            "group of every record in it, instead of run directories"
        ),
    ] = None,
) -> None:
    """The findings table (verdict counts per run, causes, one line per claim group), generated from run
    directories; with --into FILE, written between that file's SECTION markers (docs/findings.md holds
    the findings and paper-scale sections, docs/decide.md the decide section, README.md the per-seed
    tables); with --before, the groups whose verdict changed since the runs under that folder."""
    from tdlab.pages.records import record_changes
    from tdlab.report.findings import changes_markdown, findings_markdown, replace_between_markers
    from tdlab.report.mdtext import md_code

    try:
        if sum((results is not None, bool(run_dirs), records is not None)) != 1:
            raise ConfigError("findings: give run directories, --results DIR or --records DIR, one of them")
        if records is not None and not records.is_dir():
            raise ConfigError(f"--records: {records} is not a folder of records")
        if per_paper and (results is None or before is not None):
            raise ConfigError("--per-paper: the README's tables of --results DIR; not with run directories or --before")
        if records is not None:
            from tdlab.experiments.base import registry
            from tdlab.pages.records import records_markdown

            text = records_markdown(records, list(registry().values()))
        else:
            text = _published_markdown(results, per_paper) if results is not None else findings_markdown(run_dirs or [])
        if before is not None and results is not None:
            text += "\n**What changed** (every record against the one under `" + md_code(str(before)) + "`):\n\n"
            text += record_changes(results, before)
        elif before is not None:
            text += (
                "\n**What changed** (each experiment's paper groups against its run under `" + before.name + "`):\n\n"
            )
            text += changes_markdown(run_dirs or [], before)
        if readme is None:
            out_console.print(text, highlight=False, soft_wrap=True, markup=False)
        else:
            _check_section(section)
            replace_between_markers(readme, text, section)
            what = (
                f"records of {results or records}"
                if (results or records) is not None
                else f"{len(run_dirs or [])} run(s)"
            )
            out_console.print(f"findings of {what} written to {readme}", highlight=False)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))


def _check_section(section: str) -> None:
    """A ``--section`` marker name, or one line saying what is allowed."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", section):
        raise ConfigError(f"--section: {section!r} is not a marker name; allowed: lower-case letters, digits, '-'")


def _published_markdown(results: Path, per_paper: bool = False) -> str:
    """The by-seed and by-experiment tables of the records under ``results`` (tdlab.pages.records); with
    ``per_paper``, one short table per seed instead (the README's)."""
    from tdlab.experiments.base import registry
    from tdlab.pages.records import experiment_table, load_published, paper_table, paper_tables, undecided_lines
    from tdlab.rounds import length_field

    if not results.is_dir():
        raise ConfigError(f"--results: {results} is not a folder of records (results/PROFILE/NAME.json)")
    pub = load_published(results)
    exps = list(registry().values())
    if per_paper:  # quick's records alone make the README's tables; the seed's settings join once published
        from tdlab.pages.docs_site import PAPERS

        return paper_tables(pub, exps, {s.number: s.title for s in PAPERS})
    if not pub.paper:
        raise ConfigError(f"--results: {results}/paper holds no record; `tdlab batch --profile paper` writes them")
    undecided = undecided_lines(pub, {e.name: length_field(e) for e in exps})
    return (
        "**By seed** (paper claim groups; the seed's settings from `results/paper`, quick from `results/quick` over "
        "the same experiments):\n\n"
        + paper_table(pub, exps)
        + "\n**By experiment:**\n\n"
        + experiment_table(pub, exps)
        + (
            f"\n**Not decided at the seed's settings** ({len(undecided)} groups):\n\n"
            + "\n".join(f"- {u}" for u in undecided)
            + "\n"
            if undecided
            else ""
        )
    )


atlas_app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    help="The claims atlas: where each paper claim holds, as a static site built from the run index.",
)
app.add_typer(atlas_app, name="atlas")


@atlas_app.command("run")
def atlas_run(
    experiments: Annotated[
        list[str] | None, typer.Argument(help="experiments (default: every one that declares atlas axes)")
    ] = None,
    profile: Annotated[
        str, typer.Option(help="quick (a coarser grid, minutes), standard or paper (the declared ranges)")
    ] = "quick",
    backend: Annotated[str, typer.Option(help="local (process pool) or ray")] = "local",
    workers: Annotated[int, typer.Option(min=1, help="points run at once")] = 2,
    address: Annotated[str | None, typer.Option(help="Ray cluster address HOST:PORT (ray backend)")] = None,
    runs_dir: Annotated[
        Path, typer.Option("--runs", help="folder that holds run directories and the index")
    ] = DEFAULT_OUT,
    decide: Annotated[
        str | None,
        typer.Option(
            help="run every point with --decide and this budget (90s, 30m, 1.5h); "
            "use another --runs than the undecided atlas's"
        ),
    ] = None,
) -> None:
    """Sweep each experiment's atlas axes (points already in the runs folder are skipped, killed ones resumed)."""
    from tdlab.atlas.axes import atlas_spec, experiments_with_axes
    from tdlab.sweep import run_sweep

    try:
        kind = _backend(backend)
        if kind is None:
            raise ConfigError(f"backend: unknown backend {backend!r}; allowed: local, ray")
        exps = experiments_with_axes(experiments or [])
        if decide is not None:
            parse_duration(decide, "--decide")
        # every name and profile checked before anything runs
        specs = [atlas_spec(e, profile).model_copy(update={"decide": decide}) for e in exps]
        if kind == "ray":
            check_address(address)  # before the folder is made
        check_output_folder(runs_dir, "--runs")
        failed = False
        for spec in specs:
            points = run_sweep(
                spec,
                runs_dir,
                kind,
                workers,
                address,
                echo=lambda m: out_console.print(m, highlight=False, soft_wrap=True),
            )
            failed |= any(p.status == "failed" for p in points)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    out_console.print(f"next: tdlab atlas build --runs {runs_dir}", highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(code=1)


@atlas_app.command("build")
def atlas_build(
    runs_dir: Annotated[
        Path, typer.Option("--runs", help="folder that holds run directories and the index")
    ] = DEFAULT_OUT,
    out: Annotated[Path | None, typer.Option(help="site folder (default: RUNS/atlas)")] = None,
) -> None:
    """Write the static atlas site (front page, one page per experiment, every run's report) from the run index."""
    from tdlab.atlas.site import build_site

    try:
        front = build_site(runs_dir, out if out is not None else runs_dir / "atlas", _warning)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    out_console.print(f"atlas: {front}", highlight=False, soft_wrap=True)


@atlas_app.command("serve")
def atlas_serve(
    out: Annotated[Path, typer.Option(help="site folder written by tdlab atlas build")] = DEFAULT_OUT / "atlas",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 8000,
) -> None:
    """Serve the site folder with Python's own static HTTP server (the site also opens from disk)."""
    import functools
    import http.server

    if not (out / "index.html").is_file():
        _fail(f"--out: {out} holds no atlas site (index.html); build one with tdlab atlas build --out {out}")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        _fail(f"--port: cannot listen on 127.0.0.1:{port}: {exc}")
    out_console.print(f"serving {out} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


docs_app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    help="The documentation site: seed pages generated from the registry and the runs, then mkdocs build --strict.",
)
app.add_typer(docs_app, name="docs")


@docs_app.command("build")
def docs_build(
    runs_dir: Annotated[
        Path,
        typer.Option(
            "--runs",
            help="folder of run directories: the newest run of each experiment "
            "gives its seed page's verdicts and figures (none: 'no run yet')",
        ),
    ] = DEFAULT_OUT,
    site: Annotated[Path | None, typer.Option(help="site folder (default: mkdocs.yml's site_dir)")] = None,
    config: Annotated[Path | None, typer.Option(help="mkdocs.yml (default: here, else tdlab's checkout)")] = None,
) -> None:
    """Write docs/seeds/ (one page per seed paper) and build the site with mkdocs build --strict."""
    from tdlab.pages.docs_site import build_site

    try:
        result = build_site(runs_dir, site, config, _warning)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    out_console.print(
        f"seed pages: {len(result.pages)} from {result.runs_found} run(s) in {result.generate_s:.1f} s; "
        f"mkdocs build --strict: {result.build_s:.1f} s; site: {result.site}",
        highlight=False,
        soft_wrap=True,
    )


@docs_app.command("serve")
def docs_serve(
    runs_dir: Annotated[
        Path, typer.Option("--runs", help="folder of run directories for the seed pages")
    ] = DEFAULT_OUT,
    config: Annotated[Path | None, typer.Option(help="mkdocs.yml (default: here, else tdlab's checkout)")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="port")] = 8000,
) -> None:
    """Write the seed pages, then mkdocs serve (a live preview on 127.0.0.1; Ctrl-C stops)."""
    import subprocess
    import sys

    from tdlab.pages.docs_site import check_runs, docs_folder, find_config, require_mkdocs, write_paper_pages

    try:
        require_mkdocs()
        cfg = find_config(config)
        write_paper_pages(docs_folder(cfg), check_runs(runs_dir))
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    with contextlib.suppress(KeyboardInterrupt):
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "serve", "--config-file", str(cfg), "--dev-addr", f"127.0.0.1:{port}"],
            cwd=cfg.parent,
            env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        )


@app.command("export")
def export_cmd(
    run_dir: Annotated[Path, typer.Argument(help="a run directory")],
    arm: Annotated[
        str | None,
        typer.Option(help="the arm to export (transformer-lens: required; tensorboard: only this arm's metrics)"),
    ] = None,
    member: Annotated[
        int | None,
        typer.Option(
            min=0, help="ensemble member index (transformer-lens: required; tensorboard: only this member's metrics)"
        ),
    ] = None,
    to: Annotated[str, typer.Option(help="target format: transformer-lens or tensorboard")] = "transformer-lens",
    out: Annotated[
        str | None,
        typer.Option(
            help="transformer-lens: output file, or an existing folder (default: RUNID.ARM.mI.tl.safetensors in the current directory); tensorboard: a folder (default: RUNID.tensorboard); never inside a run directory"
        ),
    ] = None,
) -> None:
    """Export one trained member to another library (TransformerLens 4: one safetensors file holding the weights and a `TransformerBridge.boot_native` config), or a run's metrics as TensorBoard scalars (one run per member, tags ARM/NAME)."""
    try:
        if to == "tensorboard":
            from tdlab.export.tensorboard import export_run

            done = export_run(run_dir, out, arm, member)
            out_console.print(
                f"exported {done.scalars} scalars ({len(done.arms)} arm(s), {len(done.members)} member(s)) "
                f"to {done.folder}; view: tensorboard --logdir {done.folder}",
                highlight=False,
                soft_wrap=True,
            )
            return
        if to != "transformer-lens":
            raise ConfigError(f"--to: unknown target {to!r}; allowed: transformer-lens, tensorboard")
        if arm is None or member is None:
            raise ConfigError(
                f"{'--arm' if arm is None else '--member'}: required with --to transformer-lens (the member to export)"
            )
        from tdlab.export.transformer_lens import export_member  # lazy: the optional extra is never needed by the core

        path = export_member(run_dir, arm, member, out)
    except (ConfigError, RunDirError) as exc:
        _fail(str(exc))
    out_console.print(f"exported {arm} member {member} to {path}", highlight=False, soft_wrap=True)


def _cores_share() -> int | None:
    """The cores a sweep gives this run (``TDLAB_THREADS``, checked by :func:`_setup`), which caps its lanes
    as it caps its threads; ``None`` outside a sweep."""
    threads = os.environ.get("TDLAB_THREADS", "").strip()
    if not (threads.isascii() and threads.isdigit()) or len(threads) > 4:  # '²' is a digit to str.isdigit
        return None
    return int(threads) if 1 <= int(threads) <= MAX_THREADS else None


def _version(value: bool) -> None:
    if value:
        import tdlab
        from tdlab.runs import source_commit

        commit = source_commit()
        out_console.print(f"tdlab {tdlab.__version__}" + (f" ({commit})" if commit else ""), highlight=False)
        raise typer.Exit()


@app.callback()
def _setup(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="print tdlab's version (and the git commit it runs from) and exit",
        ),
    ] = False,
) -> None:
    """tdlab: how transformers learn, reproduced with computed verdicts."""
    # experiments of the user's own that the process which started this one included (a batch's runs)
    _include([Path(p) for p in os.environ.get("TDLAB_INCLUDE", "").split(os.pathsep) if p])
    threads = os.environ.get("TDLAB_THREADS")
    if threads:  # set by sweeps so that concurrent points share the cores instead of fighting over them
        share = _cores_share()
        if share is None:
            _fail(
                f"TDLAB_THREADS: must be a whole number of threads from 1 to {MAX_THREADS}, got {threads[:ECHO_CHARS]!r}"
            )
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(share)
        else:  # torch takes its thread count from here when a command imports it (`tdlab list` never does)
            os.environ["OMP_NUM_THREADS"] = str(share)


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())

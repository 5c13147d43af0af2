"""`fedmc sweep`: every variant of one experiment x every training seed, resumable.

A sweep file (`conf/sweeps/*.yaml`, read by `fedmc_flwr.sweeps`, the sweep's data model)
names a base experiment, the training seeds, the variants (a federated variant runs
through Flower's simulation engine with `fedmc run`'s runner; `centralised` and `local`
train in-process with `fedmc train`) and the policy the others are paired against. Each
(variant, seed) is a *cell* with its own results directory under
`<results_dir>/<sweep name>/`, holding the usual metrics.csv and per_seed.csv (every
dispatcher and the myopic oracle come with every cell).

Finished cells (`sweeps.is_finished`) are skipped, so an interrupted sweep resumes where
it stopped, and a cell whose config changed is an error rather than a silent mix of two
experiments. Cells run seed by seed, so a sweep stopped early still has complete
comparisons over the seeds it finished.

The summary (`summary.csv`, `summary.md`) pools the cells through `fedmc_flwr.analysis.report`:
per policy, the mean and 95% CI over training seeds of every per-seed metric, and its
paired difference against the baseline (training seeds and held-out worlds). The arena
summary (`arena.csv`, `arena.md`) does the same for every trained policy and dispatcher
in the joint arena (`fedmc_flwr.experiments.arena`: all regions' policies at once on one estate),
beside each policy's level alone.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd

from fedmc_flwr.analysis.report import (
    FIXED,
    Run,
    collect,
    format_markdown,
    summary_frame,
    summary_table,
    world_table,
)
from fedmc_flwr.analysis.tables import with_ci
from fedmc_flwr.config import ConfigError, shares_one_estate
from fedmc_flwr.errors import RunFailure
from fedmc_flwr.federation.drift import DRIFT_FILE
from fedmc_flwr.outputs import output_dir
from fedmc_flwr.progress_bars import progress_bar
from fedmc_flwr.results import (
    PER_SEED_COLUMNS,
    PER_SEED_FILE,
    PER_SEED_VALUES,
    MetricsWriter,
    read_per_seed,
    record_provenance,
)
from fedmc_flwr.sim.sources import check_files
from fedmc_flwr.stop_signals import stop_requests
from fedmc_flwr.sweeps import Cell, Sweep, complete_seeds, finished_frame, is_finished, load_sweep


class CellFailed(RunFailure, RuntimeError):
    """A cell's run did not finish; the sweep stops there (rerun it to continue)."""


def federate(config: Path, overrides: list[str]) -> int:
    """One federated run through Flower (`fedmc run`'s runner); its exit code. The cell's
    folder is new or a half-written one `run_cell` removed, so nothing is refused."""
    from fedmc_flwr.federation.runner import run_federation

    return run_federation(config, overrides, on_existing="overwrite")


def run_cell(cell: Cell, experiment: Path) -> None:
    """Run one cell from scratch (a half-written folder from an interrupted run goes first)."""
    if cell.out_dir.exists():
        shutil.rmtree(cell.out_dir)
    if cell.kind == "federated":
        if federate(experiment, list(cell.overrides)) != 0:
            raise CellFailed(f"{cell.label}: the federated run failed; see its log")
    else:
        from fedmc_flwr.experiments.training import train

        train(cell.cfg, cell.kind)


@contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """Send this process's output, and its children's, to `log`: file descriptors 1 and 2
    (Flower's log stream is a child process) and sys.stdout/sys.stderr (which a Jupyter
    kernel points elsewhere)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with log.open("a", buffering=1) as handle, redirect_stdout(handle), redirect_stderr(handle):
            os.dup2(handle.fileno(), 1)
            os.dup2(handle.fileno(), 2)
            try:
                yield
            finally:
                handle.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


def _run_logged(cell: Cell, experiment: Path, log: Path) -> None:
    """Run one cell with its output, and its children's, in `log`."""
    with _output_to(log):
        run_cell(cell, experiment)


def _shown(path: Path) -> str:
    """A path as a command names it: relative to the working directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_sweep(sweep: Sweep, progress: bool = True, jobs: int = 1) -> list[Cell]:
    """Run every unfinished cell in order (seed by seed); return the cells that ran.

    Each cell's output goes to `<sweep>/logs/<cell>.log`; the terminal shows one progress
    bar whose time left is the cells to go over the rate of the cells run so far.
    `jobs` > 1 runs that many cells at once, each in a process of its own: a cell's
    results do not depend on what runs beside it, and much of a federated cell's time is
    spent starting Flower and Ray rather than computing, which another cell can use.
    """
    if jobs < 1:
        raise ConfigError(f"jobs = {jobs}: expected 1 or more cells at once")
    todo = [cell for cell in sweep.cells if not is_finished(cell)]
    done = len(sweep.cells) - len(todo)
    if todo:
        record_provenance(sweep.out_dir, f"fedmc sweep --config {_shown(sweep.path)}")
    print(
        f"fedmc sweep {sweep.name}: {len(sweep.cells)} cells, {done} finished, "
        f"{len(todo)} to run{f', {jobs} at once' if jobs > 1 else ''}; "
        f"results in {sweep.out_dir}",
        file=sys.stderr,
    )

    def log(cell: Cell) -> Path:
        return sweep.out_dir / "logs" / f"{cell.out_dir.name}.log"

    bar_file = os.fdopen(os.dup(2), "w")
    with bar_file, progress_bar(len(todo), "cell", file=bar_file, disable=not progress) as bar:
        if jobs == 1:
            for cell in todo:
                bar.set_description(cell.label)
                _run_logged(cell, sweep.experiment, log(cell))
                bar.update()
            return todo
        spawn = multiprocessing.get_context("spawn")  # no fork of torch's or numba's threads
        workers = ProcessPoolExecutor(
            max_workers=jobs, mp_context=spawn, initializer=_leave_ctrl_c_to_the_sweep
        )
        with stop_requests(), workers as pool:
            running = {
                pool.submit(_run_logged, cell, sweep.experiment, log(cell)): cell for cell in todo
            }
            try:
                for future in as_completed(running):
                    future.result()
                    bar.set_description(f"{running[future].label} done")
                    bar.update()
            except KeyboardInterrupt:
                _stop_cells(pool)
                raise
            except BaseException:  # a failed cell: the others running finish theirs
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    return todo


def _leave_ctrl_c_to_the_sweep() -> None:
    """A worker ignores SIGINT, and so do the Flower processes its cell starts: a Ctrl-C
    at the terminal reaches the sweep, which stops each cell once (`_stop_cells`). A
    second signal landing in a cell's cleanup would cut it short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_cells(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C or SIGTERM to the sweep: SIGTERM to each worker, and wait for them. A
    federated cell's runner then stops every Flower process it started; an in-process cell
    ends with its worker. Either cell's half-written folder is run again next time."""
    for worker in multiprocessing.active_children():
        worker.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Each policy's per-round means over held-out worlds, per training seed and region:
    what the learning-curve plots draw (dispatchers sit at round 0, seed `FIXED`)."""
    frame = frame.copy()
    frame.loc[frame["round"] == 0, "train_seed"] = FIXED
    keys = ["policy", "train_seed", "round", "client"]
    values = list(PER_SEED_VALUES)
    return frame.drop_duplicates([*keys, "eval_seed"]).groupby(keys, as_index=False)[values].mean()


def summarise_sweep(sweep: Sweep, baseline: str | None = None) -> tuple[Path, Path, Path]:
    """Write summary.csv, summary.md and curves.csv from the training seeds whose every
    cell is finished; return their paths."""
    seeds = complete_seeds(sweep)
    if not seeds:
        raise ConfigError(f"sweep {sweep.name}: no training seed has all its cells finished")
    frame = finished_frame(sweep, seeds)
    policies = collect(frame)
    curves_path = sweep.out_dir / "curves.csv"
    curves(frame).to_csv(curves_path, index=False)
    summary = summary_frame(policies, baseline or sweep.baseline)
    csv_path = sweep.out_dir / "summary.csv"
    md_path = sweep.out_dir / "summary.md"
    summary.to_csv(csv_path, index=False)
    level, paired = summary_table(summary)
    md_path.write_text(
        f"Sweep `{sweep.name}`: training seeds {seeds}; learners at their last round; "
        "means per job with 95% CIs (the `CI over` column says over what: training seeds "
        "when a learner has two or more, else the held-out worlds); differences paired per "
        "held-out world.\n\n"
        f"{format_markdown(level)}\n\n"
        f"Paired difference against `{summary['baseline'].iloc[0]}`:\n\n"
        f"{format_markdown(paired)}\n{worlds_section(policies, summary['baseline'].iloc[0])}"
        f"{drift_section(sweep, seeds)}"
    )
    return csv_path, md_path, curves_path


def worlds_section(policies: dict[str, dict[int, Run]], baseline: str) -> str:
    """`world_table` under its heading; empty when the sweep has no learner."""
    rows = world_table(policies, baseline)
    if len(rows) == 1:
        return ""
    return (
        f"\nWorld by world against `{baseline}` (each learner at the mean of its training "
        "seeds): the median held-out world's difference, and the worlds where the learner "
        "does at least as well.\n\n"
        f"{format_markdown(rows)}\n"
    )


def drift_section(sweep: Sweep, seeds: list[int]) -> str:
    """How far each federated variant's region updates pulled apart (its cells'
    `drift.csv`, `federation/drift.py`), means over training seeds: the share of the
    regions' update length the mean kept, over all rounds, in the first and in the last,
    and the spread; empty when no cell of `seeds` has the file."""
    rows = [["policy", "length kept", "in round 1", "in the last round", "spread"]]
    for variant in dict.fromkeys(cell.variant for cell in sweep.cells if cell.kind == "federated"):
        files = [
            cell.out_dir / DRIFT_FILE
            for cell in sweep.cells
            if cell.variant == variant and cell.seed in seeds
        ]
        if not files or not all(path.is_file() for path in files):
            continue
        drift = pd.concat([pd.read_csv(path) for path in files])
        first, last = drift["round"] == drift["round"].min(), drift["round"] == drift["round"].max()
        shares = [drift["shrink"], drift.loc[first, "shrink"], drift.loc[last, "shrink"]]
        rows.append(
            [variant, *(f"{share.mean():.3f}" for share in shares), f"{drift['spread'].mean():.2f}"]
        )
    if len(rows) == 1:
        return ""
    return (
        "\nClient drift (each federated cell's drift.csv, means over rounds and training "
        "seeds): the length of the mean update as a share of the regions' mean update "
        "length (1: the updates add up; 1/sqrt(regions): unrelated directions), and the "
        "spread of the updates around their mean over the mean's length.\n\n"
        f"{format_markdown(rows)}\n"
    )


def arena_frame(sweep: Sweep, seeds: list[int], progress: bool = True) -> pd.DataFrame:
    """Every finished cell of `seeds` and every dispatcher in the joint arena
    (`fedmc_flwr.experiments.arena`), in per_seed.csv's schema with a `source` column.
    Each cell's rows are kept in its folder's arena.csv and the dispatchers' in
    `<sweep>/arena/`, so a summary evaluates only what is new (a rerun cell loses its file
    with its folder)."""
    from fedmc_flwr.experiments import arena

    cells = [cell for cell in sweep.cells if cell.seed in seeds]
    dispatchers = sweep.out_dir / "arena" / arena.ARENA_FILE
    todo = [cell for cell in cells if not (cell.out_dir / arena.ARENA_FILE).is_file()]
    todo_dispatchers = not dispatchers.is_file()
    with progress_bar(len(todo) + todo_dispatchers, "run", disable=not progress) as bar:
        for cell in todo:
            bar.set_description(f"arena: {cell.label}")
            last = read_per_seed(cell.out_dir / PER_SEED_FILE)
            steps = int(last.loc[last["round"] == cell.cfg.train.rounds, "train_steps"].max())
            rows = arena.learner_rows(cell.cfg, cell.out_dir, cell.kind, cell.variant, steps)
            _write_rows(cell.out_dir / arena.ARENA_FILE, rows)
            bar.update()
        if todo_dispatchers:
            bar.set_description("arena: dispatchers")
            _write_rows(dispatchers, arena.dispatcher_rows(cells[0].cfg))
            bar.update()
    frames = [read_per_seed(dispatchers).assign(source=str(dispatchers.parent))]
    frames += [
        read_per_seed(cell.out_dir / arena.ARENA_FILE).assign(source=str(cell.out_dir))
        for cell in cells
    ]
    return pd.concat(frames, ignore_index=True)


def _write_rows(path: Path, rows: list[dict]) -> None:
    """Write per_seed.csv-schema rows to `path` whole (a partial file never stays)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    MetricsWriter(partial, columns=PER_SEED_COLUMNS).write(rows)
    os.replace(partial, path)


def summarise_arena(sweep: Sweep, seeds: list[int], baseline: str) -> tuple[Path, Path]:
    """arena.csv and arena.md of the sweep: each policy in the joint arena, paired against
    `baseline` there, and beside its level alone (summary.csv)."""
    summary = summary_frame(collect(arena_frame(sweep, seeds)), baseline)
    csv_path = sweep.out_dir / "arena.csv"
    md_path = sweep.out_dir / "arena.md"
    summary.to_csv(csv_path, index=False)
    level, paired = summary_table(summary)
    alone = pd.read_csv(sweep.out_dir / "summary.csv").set_index("policy")
    side = [
        ["policy", "reward alone", "reward in the arena", f"vs {baseline} alone", "in the arena"]
    ]
    for row in summary.to_dict("records"):
        mine = alone.loc[row["policy"]]
        side.append(
            [
                row["policy"],
                with_ci(mine["reward"], mine["reward_ci95"]),
                with_ci(row["reward"], row["reward_ci95"]),
                "(baseline)"
                if row["policy"] == baseline
                else with_ci(mine["d_reward"], mine["d_reward_ci95"], sign="+"),
                "(baseline)"
                if row["policy"] == baseline
                else with_ci(row["d_reward"], row["d_reward_ci95"], sign="+"),
            ]
        )
    md_path.write_text(
        f"Sweep `{sweep.name}` in the joint arena: every region's jobs arrive at one shared "
        "estate at once, each routed by its own region's policy (`fedmc_flwr.experiments.arena`); "
        f"training seeds {seeds}, learners at their last round, 95% CIs as in summary.md, "
        "differences paired per arena world.\n\n"
        f"Alone (summary.md, mean over regions) and in the arena, reward per job:\n\n"
        f"{format_markdown(side)}\n\n"
        f"In the arena:\n\n{format_markdown(level)}\n\n"
        f"Paired difference against `{baseline}` in the arena:\n\n{format_markdown(paired)}\n"
    )
    return csv_path, md_path


def main(config: Path, baseline: str | None, *, summary_only: bool, jobs: int = 1) -> int:
    """`fedmc sweep`: run what is missing, then summarise; the exit code (a failed cell
    is a `CellFailed`, a summary that cannot be made a `ReportError`)."""
    sweep = load_sweep(config)
    if not summary_only:
        for cell in sweep.cells:
            check_files(cell.cfg.world)
        output_dir(sweep.out_dir, "results_dir")
        run_sweep(sweep, jobs=jobs)
    paths = summarise_sweep(sweep, baseline)
    if shares_one_estate(sweep.cells[0].cfg):
        paths += summarise_arena(sweep, complete_seeds(sweep), baseline or sweep.baseline)
    else:
        print("fedmc: sweep: no arena: the regions' estates differ (world.region_estates)")
    for path in paths:
        print(path)
    for summary in paths:
        if summary.suffix == ".md":
            print(summary.read_text())
    return 0

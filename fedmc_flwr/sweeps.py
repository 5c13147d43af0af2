"""A sweep's data model: its file's schema, its cells and its folder.

A sweep file (`conf/sweeps/*.yaml`) names a base experiment, the training seeds, the
variants and the policy the others are paired against. Each (variant, seed) is a *cell*
whose results directory lies under `<results_dir>/<sweep name>/`, as `results.py` lays
out one run's. Running the cells is `fedmc sweep`'s job (`experiments/sweep.py`);
reading them is the analysis's (`analysis/federating.py`, `analysis/results_doc.py`),
so both read the sweep from here, below them.

A cell is finished when its saved config.yaml loads as the config the sweep would run now
and its per_seed.csv holds the learner's last round for every held-out world.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from fedmc_flwr.config import ConfigError, ExperimentConfig, load_config, read_yaml
from fedmc_flwr.outputs import resolved
from fedmc_flwr.results import PER_SEED_FILE, read_per_seed

KINDS = ("federated", "centralised", "local")


@dataclass
class VariantSpec:
    """One arm of the sweep."""

    kind: str = "federated"
    """'federated' (Flower simulation), 'centralised' or 'local' (`fedmc train` modes)."""
    set: list[str] = field(default_factory=list)
    """Dotted key=value overrides of the base experiment for this arm."""


@dataclass
class SweepSpec:
    """The schema of a sweep file."""

    name: str = "sweep"
    """The sweep's folder inside results_dir."""
    experiment: str = "../small_demo.yaml"
    """The base experiment config, relative to the sweep file."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    """Training seeds (the experiment's `seed`): the replicates of every learner."""
    set: list[str] = field(default_factory=list)
    """Overrides applied to every cell (say, smaller budgets for a quick sweep)."""
    baseline: str = "sed"
    """Policy every other is paired against in the summary (a variant or a dispatcher)."""
    results_dir: str = "results/sweeps"
    """Where the sweep's folder goes; relative paths are taken from the current directory."""
    variants: dict[str, VariantSpec] = field(default_factory=dict)
    """Variant name (the learner's policy name in the summary) -> its spec."""


@dataclass(frozen=True)
class Cell:
    """One variant trained with one seed."""

    variant: str
    kind: str
    seed: int
    cfg: ExperimentConfig
    overrides: tuple[str, ...]
    """What turns the base experiment into this cell's config (`cfg`)."""

    @property
    def out_dir(self) -> Path:
        """Where the cell's results land (`fedmc train` suffixes its mode)."""
        suffix = "" if self.kind == "federated" else f"-{self.kind}"
        return Path(self.cfg.results_dir) / f"{self.cfg.name}{suffix}"

    @property
    def label(self) -> str:
        return f"{self.variant} seed {self.seed}"


@dataclass(frozen=True)
class Sweep:
    name: str
    path: Path
    """The sweep file."""
    out_dir: Path
    experiment: Path
    baseline: str
    cells: tuple[Cell, ...]


def load_sweep(path: str | Path, results_dir: str | Path | None = None) -> Sweep:
    """Read and check a sweep file; every cell's config is loaded (and so validated) here.
    `results_dir` replaces the file's (a notebook or a test writes elsewhere)."""
    path = Path(path).resolve()
    spec: SweepSpec = OmegaConf.to_object(read_yaml(path, SweepSpec, "sweep file"))  # type: ignore[assignment]
    if not spec.variants:
        raise ConfigError(f"{path}: variants: expected at least one")
    if not spec.seeds or len(set(spec.seeds)) != len(spec.seeds):
        raise ConfigError(f"{path}: seeds = {spec.seeds}: expected distinct training seeds")
    for name, variant in spec.variants.items():
        if variant.kind not in KINDS:
            raise ConfigError(f"{path}: variants.{name}.kind = {variant.kind!r}; expected {KINDS}")
    root = spec.results_dir if results_dir is None else results_dir
    out_dir = resolved(root, "results_dir") / spec.name
    try:
        experiment = (path.parent / spec.experiment).resolve()
    except ValueError:  # a NUL byte, which no system call takes
        raise ConfigError(f"{path}: experiment: not a path (a NUL byte)") from None
    cells = []
    for seed in spec.seeds:
        for name, variant in spec.variants.items():
            overrides = [
                *spec.set,
                *variant.set,
                f"seed={seed}",
                f"name={name}-s{seed}",
                f"results_dir={out_dir}",
            ]
            cfg = load_config(experiment, overrides)
            cells.append(Cell(name, variant.kind, seed, cfg, tuple(overrides)))
    return Sweep(spec.name, path, out_dir, experiment, spec.baseline, tuple(cells))


def is_finished(cell: Cell) -> bool:
    """The cell's results are this config's, and its last round is there for every world.

    Raises ConfigError when the folder holds a run of another config (never overwritten).
    Where the sweep's folder lies is no part of a cell's config: a sweep's results copied
    or moved to another checkout are still its cells."""
    saved = cell.out_dir / "config.yaml"
    per_seed = cell.out_dir / PER_SEED_FILE
    if not saved.is_file() or not per_seed.is_file():
        return False
    if replace(load_config(saved), results_dir=cell.cfg.results_dir) != cell.cfg:
        raise ConfigError(
            f"{cell.out_dir}: ran with another config than the sweep's {cell.label}; "
            "remove the folder or give the sweep another name"
        )
    try:
        frame = read_per_seed(per_seed)
    except ValueError:
        return False
    last = frame[frame["round"] == cell.cfg.train.rounds]
    return len(last) == cell.cfg.world.regions * cell.cfg.eval.seeds


def complete_seeds(sweep: Sweep) -> list[int]:
    """Training seeds whose every cell is finished: the ones a summary pairs over."""
    seeds = sorted({cell.seed for cell in sweep.cells})
    return [s for s in seeds if all(is_finished(c) for c in sweep.cells if c.seed == s)]


def finished_frame(sweep: Sweep, seeds: list[int]) -> pd.DataFrame:
    """per_seed.csv of the cells of `seeds`, learners renamed to their variant's name."""
    frames = []
    for cell in sweep.cells:
        if cell.seed not in seeds:
            continue
        frame = read_per_seed(cell.out_dir / PER_SEED_FILE).assign(source=str(cell.out_dir))
        frame.loc[frame["round"] > 0, "policy"] = cell.variant
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)

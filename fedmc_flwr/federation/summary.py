"""How a completed federated run ends, however it was started: its plots drawn beside its
results and its last round's table printed.

`fedmc run` prints it once the run's status says completed; under a plain `flwr run`,
where no `fedmc` process waits for the run, the ServerApp prints it when the run ends
(its output reaches `flwr run --stream` and `flwr log`), so both end the same way.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedmc_flwr.analysis.plots import plot_metrics
from fedmc_flwr.analysis.tables import PAIRED_BASELINES, format_table, paired_against
from fedmc_flwr.results import PER_SEED_FILE, read_per_seed


def last_round_table(csv_path: Path) -> str:
    """The last round's held-out evaluation (mean over regions), best reward first, with
    each policy's paired difference against `PAIRED_BASELINES` from the run's per-world
    rewards (per_seed.csv beside metrics.csv), so the table carries its own evidence."""
    frame = pd.read_csv(csv_path)
    evals = frame[frame["phase"] == "eval"]
    last = int(evals["round"].max())
    rows = evals[evals["round"] == last].sort_values("reward", ascending=False)
    per_seed = csv_path.parent / PER_SEED_FILE
    paired = (
        paired_against(read_per_seed(per_seed), PAIRED_BASELINES) if per_seed.is_file() else None
    )
    table = format_table(rows.drop(columns=["reason"], errors="ignore").to_dict("records"), paired)
    note = (
        "\nreward: higher is better. vs X: reward minus X's on the same held-out worlds, "
        "± 95% CI over those worlds (one training seed)."
        if paired
        else ""
    )
    return f"round {last}, held-out evaluation, mean over regions:\n{table}{note}"


def finish(out: Path) -> str:
    """Draw the plots of the completed run in `out` (into `out/plots/`, as `fedmc plot`
    does) and return what ends its console: the last round's table, where the results
    are and the plots' paths."""
    plots = plot_metrics(out / "metrics.csv", None)
    return (
        f"{last_round_table(out / 'metrics.csv')}\n"
        f"fedmc: results in {out}\n"
        f"fedmc: plots: {', '.join(str(p) for p in plots)}"
    )

"""How a completed federated run ends, however it was started: its plots drawn beside its
results and its last round's table printed.

`fedmc run` prints it once the run's status says completed; under a plain `flwr run`,
where no `fedmc` process waits for the run, the ServerApp prints it when the run ends
(its output reaches `flwr run --stream` and `flwr log`), so both end the same way. The
table is the one `fedmc train` prints too (`tables.last_round_table`), and its rows are
`tables.policy_table`'s, as `fedmc baselines` and `fedmc transfer` print them.
"""

from __future__ import annotations

from pathlib import Path

from fedmc_flwr.analysis.plots import plot_metrics
from fedmc_flwr.analysis.tables import last_round_table


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

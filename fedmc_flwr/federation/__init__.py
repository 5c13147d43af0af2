"""Flower's side of the product: ClientApp, ServerApp, Strategy, runner and deployment."""


def load_choices() -> None:
    """Loads every module that registers the names a config chooses among
    (`fedmc_flwr.choices`: the dispatchers, the aggregation rules), so that a config
    loaded next has every such name checked. The federation is the lowest layer that sees
    both; every entry point calls this before it loads a config."""
    from fedmc_flwr.federation import aggregation  # noqa: F401
    from fedmc_flwr.policies import heuristics  # noqa: F401

"""`fedmc export` and `fedmc hooks plan|apply`: the subcommands that leave the simulator.

Kept out of `fedmc_flwr/cli.py` so that the main parser only registers them. Every
failure a person can fix (a missing checkpoint, a bad config, live mode without
credentials) is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from fedmc_flwr.outputs import output_file

HOOKS = ("prometheus", "openstack", "k8s")
DEFAULT_CONFIGS = {
    "prometheus": "conf/integrations/prometheus.yaml",
    "openstack": "conf/integrations/openstack.yaml",
    "k8s": "conf/integrations/kubernetes.yaml",
}


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `export` and `hooks` on the `fedmc` parser."""
    export = sub.add_parser("export", help="write a checkpoint's greedy policy as ONNX")
    export.add_argument("--checkpoint", type=Path, required=True, help="round_NNN.npz")
    export.add_argument("--out", type=Path, required=True, help="the .onnx file to write")
    export.add_argument(
        "--config", type=Path, default=None, help="the run's config (default: its config.yaml)"
    )
    hooks = sub.add_parser("hooks", help="plan or apply an integration hook with a policy")
    hooks.add_argument("action", choices=("plan", "apply"))
    hooks.add_argument("--hook", choices=HOOKS, required=True)
    hooks.add_argument("--policy", type=Path, required=True, help="a `fedmc export` file")
    hooks.add_argument(
        "--config", type=Path, default=None, help="hook config (default: conf/integrations/)"
    )
    hooks.add_argument("--log", type=Path, default=None, help="also append JSON lines here")


def run(args: argparse.Namespace) -> int:
    """Run `export` or `hooks`; returns the exit code. Failures are `InputError`s and
    `RunFailure`s, which the `fedmc` command reports."""
    logging.basicConfig(format="fedmc: %(message)s", level=logging.WARNING)
    if args.command == "export":
        from fedmc_flwr.integrations.export import export_checkpoint

        print(export_checkpoint(args.checkpoint, args.out, args.config))
        return 0
    from fedmc_flwr.integrations.runner import run_hook

    config = args.config or Path(DEFAULT_CONFIGS[args.hook])
    log = None if args.log is None else output_file(args.log, "--log")
    return run_hook(args.hook, args.action, args.policy, config, log)

"""The `fedmc` command: one subcommand per job, each a thin call into the package.

The experiment subcommands (run, deploy, baselines, train, transfer) take `--config FILE`
and repeatable `--set key=value` overrides; the others take their own arguments. Every
failure is an `InputError` or a `RunFailure` (`fedmc_flwr.errors`), caught once in
`main`: bad input (a config, an override, a file to read, an experiment that already
holds results) prints one line naming what is wrong and exits with 2; a run that fails
exits with 1.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from fedmc_flwr.config import ConfigError, ExperimentConfig, find_config, load_config
from fedmc_flwr.errors import InputError, RunFailure
from fedmc_flwr.federation import load_choices
from fedmc_flwr.integrations import cli as hooks_cli
from fedmc_flwr.outputs import output_dir

DEFAULT_CONFIG = "conf/small_demo.yaml"
RESUMABLE = ("run", "deploy")
"""The commands an interrupted run of which `--resume` continues."""


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=DEFAULT_CONFIG,
        help="experiment YAML file (default: %(default)s); a conf/... path not found in the "
        "working directory is taken from the configs shipped with the package",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set train.rounds=2 (repeatable)",
    )


def _add_run_args(parser: argparse.ArgumentParser) -> None:
    _add_config_args(parser)
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume",
        action="store_true",
        help="continue the experiment after its last completed round (or start it)",
    )
    existing.add_argument(
        "--overwrite", action="store_true", help="replace the results of an earlier run"
    )
    parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics")
    parser.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        help="address the metrics exporter listens on (default 127.0.0.1; 0.0.0.0 opens it "
        "to the network)",
    )


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, through its metadata)."""
    try:
        return version("fedmc-flwr")
    except PackageNotFoundError:
        return "(not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedmc",
        description="Federated RL for multi-cloud load balancing and scheduling.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_config_args(sub.add_parser("baselines", help="evaluate the classic dispatchers"))
    train = sub.add_parser("train", help="train PPO without federation")
    _add_config_args(train)
    train.add_argument("--mode", choices=("centralised", "local"), default="centralised")
    train.add_argument(
        "--overwrite", action="store_true", help="replace the results of an earlier run"
    )
    transfer = sub.add_parser(
        "transfer", help="a trained size-agnostic policy, unchanged, on another estate (--config)"
    )
    _add_config_args(transfer)
    transfer.add_argument(
        "--checkpoint", type=Path, required=True, help="a run's checkpoints/round_NNN.npz"
    )
    run = sub.add_parser(
        "run",
        help="federated training through Flower's simulation engine",
        description="Federated training through Flower's simulation engine, on this machine, "
        "or across machines: with RAY_ADDRESS=HEAD:PORT naming a Ray cluster of your own, "
        "the virtual clients run on its nodes (docs/deployment.md, 'A Ray cluster across "
        "machines').",
    )
    _add_run_args(run)
    run.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="virtual clients (not machines), each serving regions p, p + nodes, ... "
        "(default: one per region; fewer spread Flower's per-client cost over more regions)",
    )
    deploy = sub.add_parser(
        "deploy",
        help="federated training through Flower's deployment engine, SuperNodes on 127.0.0.1",
    )
    _add_run_args(deploy)
    deploy.add_argument(
        "--nodes", type=int, default=None, help="SuperNodes (default: one per region)"
    )
    deploy.add_argument("--insecure", action="store_true", help="plain HTTP instead of TLS")
    deploy.add_argument(
        "--no-node-auth", action="store_true", help="admit any SuperNode (no registered keys)"
    )
    credentials = sub.add_parser(
        "credentials", help="a TLS CA, a SuperLink certificate and SuperNode keys for a deployment"
    )
    credentials.add_argument("--out", type=Path, required=True, help="folder to write them to")
    credentials.add_argument(
        "--host",
        dest="hosts",
        action="append",
        required=True,
        help="name or IP address the SuperNodes use to reach the SuperLink (repeatable)",
    )
    credentials.add_argument("--nodes", type=int, required=True, help="SuperNode key pairs")
    for action, what in (("start", "start"), ("stop", "stop, by the PID file start wrote,")):
        home = sub.add_parser(
            f"{action}-superlink",
            help=f"{what} the local SuperLink `flwr run .` uses, its files in the project",
        )
        home.add_argument(
            "--home",
            type=Path,
            default=None,
            help="Flower home (default: $FLWR_HOME, else ./.flwr)",
        )
    sweep = sub.add_parser("sweep", help="every variant x training seed, resumable, summarised")
    sweep.add_argument(
        "--config",
        required=True,
        type=Path,
        help="sweep YAML; a conf/sweeps/... path not found in the working directory is taken "
        "from the sweeps shipped with the package",
    )
    sweep.add_argument("--baseline", default=None, help="pair against this policy instead")
    sweep.add_argument("--summary-only", action="store_true", help="summarise, run nothing")
    sweep.add_argument(
        "--jobs", type=int, default=1, help="cells run at once, each in its own process"
    )
    speedup = sub.add_parser("speedup", help="steps until 1, 2, 4, 8 identical regions beat SED")
    _add_config_args(speedup)
    speedup.set_defaults(config="conf/speedup.yaml")
    plot = sub.add_parser("plot", help="draw the plots of a metrics.csv or a sweep folder")
    plot.add_argument(
        "metrics", type=Path, help="path to a metrics.csv, or a sweep folder (summary.csv)"
    )
    plot.add_argument("--out", type=Path, default=None, help="folder for the PNGs")
    plot.add_argument(
        "--baseline",
        dest="baselines",
        action="append",
        default=None,
        metavar="NAME",
        help="dispatcher to plot the paired difference against (repeatable; "
        "default: sed and two-tier)",
    )
    report = sub.add_parser(
        "report", help="paired comparison of the policies of one or more results directories"
    )
    report.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="holds per_seed.csv")
    report.add_argument(
        "--baseline",
        dest="baselines",
        action="append",
        required=True,
        metavar="NAME",
        help="policy every other is compared with, paired per eval seed (repeatable)",
    )
    report.add_argument(
        "--round", default="last", help="learners' round: a number, or 'last' (default)"
    )
    report.add_argument("--markdown", action="store_true", help="print a Markdown table")
    hooks_cli.add_parsers(sub)
    return parser


def _config(args: argparse.Namespace) -> ExperimentConfig:
    """The experiment `--config` and `--set` give, its trace files read: a bad one stops
    the command here, before any work."""
    from fedmc_flwr.sim.sources import check_files

    cfg = load_config(find_config(args.config), args.overrides)
    check_files(cfg.world)
    return cfg


def _naming(path: Path, exc: Exception) -> str:
    """An error's first line, naming the file it is about."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return lines[0] if str(path) in lines[0] else f"{path}: not readable ({lines[0]})"


def _run(args: argparse.Namespace) -> int:
    """`fedmc run` and `fedmc deploy`: a bad config fails fast, before Flower starts;
    `--metrics-port` serves the run's rows to Prometheus while it goes, on loopback unless
    `--metrics-addr` says otherwise."""
    if args.metrics_port is not None and not 1 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port {args.metrics_port}: give a port from 1 to 65535")
    cfg = _config(args)
    from fedmc_flwr.federation.deployment import DeploymentEngine
    from fedmc_flwr.federation.runner import SimulationEngine, run_federation
    from fedmc_flwr.results import experiment_path

    nodes = args.nodes or cfg.world.regions
    if not 1 <= nodes <= cfg.world.regions:
        raise ConfigError(f"--nodes {nodes}: give 1 to {cfg.world.regions} (world.regions)")
    engine: DeploymentEngine | SimulationEngine = SimulationEngine(nodes)
    if args.command == "deploy":
        engine = DeploymentEngine(nodes, tls=not args.insecure, node_auth=not args.no_node_auth)
    on_existing = "resume" if args.resume else "overwrite" if args.overwrite else "refuse"
    config = find_config(args.config)
    if args.metrics_port is None:  # the exporter is the `hooks` extra's: not imported then
        return run_federation(config, args.overrides, on_existing=on_existing, engine=engine)
    from fedmc_flwr.integrations.prometheus import exporting

    out = experiment_path(cfg.results_dir, cfg.name)
    with exporting(out, args.metrics_port, args.metrics_addr):
        return run_federation(config, args.overrides, on_existing=on_existing, engine=engine)


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues an interrupted `fedmc run` or `fedmc deploy`: the
    same config, overrides and options, with `--resume`, quoted for a POSIX shell."""
    words = ["fedmc", args.command, "--config", args.config]
    for override in args.overrides:
        words += ["--set", override]
    words += ["--nodes", str(args.nodes)] if args.nodes is not None else []
    if args.command == "deploy":
        words += ["--insecure"] if args.insecure else []
        words += ["--no-node-auth"] if args.no_node_auth else []
    if args.metrics_port is not None:
        words += ["--metrics-port", str(args.metrics_port), "--metrics-addr", args.metrics_addr]
    return shlex.join([*words, "--resume"])


def _credentials(args: argparse.Namespace) -> None:
    """`fedmc credentials`: what the README's multi-machine commands read."""
    from fedmc_flwr.federation.credentials import make_node_key, make_tls

    if args.nodes < 1:
        raise ConfigError(f"--nodes {args.nodes}: give at least 1")
    output_dir(args.out, "--out")
    try:
        tls = make_tls(args.out, args.hosts)
    except ValueError as exc:  # cryptography's refusal of a name a certificate cannot hold
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise ConfigError(f"--host {args.hosts}: not a certificate name ({first})") from None
    print(f"CA certificate (every SuperNode and `flwr` user): {tls.ca_certificate}")
    print(f"SuperLink certificate and key: {tls.certificate}, {tls.key}")
    for k in range(args.nodes):
        key = make_node_key(args.out, f"node-{k}")
        print(f"SuperNode {k}: private key {key.private} (stays on the node), public {key.public}")


def _local_superlink(args: argparse.Namespace) -> None:
    """`fedmc start-superlink` and `fedmc stop-superlink`: the SuperLink of the README's
    `flwr run .`, started with Flower's files, Ray's token and its PID file under the
    project, and stopped by that file, so that nothing else is signalled."""
    from fedmc_flwr.federation import superlink

    home = args.home.expanduser().resolve() if args.home else superlink.local_home()
    if args.command == "stop-superlink":
        stopped = superlink.stop_local_superlink(home)
        done = f"stopped ({stopped} processes)" if stopped else "had ended; its PID file removed"
        print(f"fedmc: the SuperLink of {home} {done}")
        return
    pid, connection = superlink.start_local_superlink(home)
    print(f"fedmc: SuperLink on {connection.address} (pid {pid}), its files in {home}")
    print(f"fedmc: run with FLWR_HOME={shlex.quote(str(home))} flwr run . --stream ...")


def _label(args: argparse.Namespace) -> str:
    """The words a failure's line starts with: the command that failed (`fedmc export`,
    `fedmc hooks plan`), so a script running several can tell which one refused."""
    words = [args.command, args.action] if args.command == "hooks" else [args.command]
    return " ".join(["fedmc", *words])


def _one_line(text: str) -> str:
    """`text` as one line: a path may hold a newline, and the failure stays one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `fedmc` console script; returns the process exit code."""
    args = _parser().parse_args(argv)
    label = _label(args)
    load_choices()  # before any command loads a config, whichever it is
    try:
        if args.command in ("export", "hooks"):
            return hooks_cli.run(args)
        if args.command == "baselines":
            cfg = _config(args)
            from fedmc_flwr.experiments.baselines import run_baselines

            run_baselines(cfg)
        elif args.command == "train":
            cfg = _config(args)
            from fedmc_flwr.experiments.training import train

            train(cfg, args.mode, overwrite=args.overwrite)
        elif args.command == "transfer":
            cfg = _config(args)
            from fedmc_flwr.experiments.transfer import run_transfer

            run_transfer(args.checkpoint, cfg)
        elif args.command in ("run", "deploy"):
            return _run(args)
        elif args.command == "credentials":
            _credentials(args)
        elif args.command in ("start-superlink", "stop-superlink"):
            _local_superlink(args)
        elif args.command == "sweep":
            from fedmc_flwr.experiments.sweep import main as sweep_main

            return sweep_main(
                find_config(args.config),
                args.baseline,
                summary_only=args.summary_only,
                jobs=args.jobs,
            )
        elif args.command == "speedup":
            from fedmc_flwr.experiments.speedup import main as speedup_main

            speedup_main(find_config(args.config), args.overrides)
        elif args.command == "plot":
            from fedmc_flwr.analysis.plots import plot_metrics
            from fedmc_flwr.analysis.sweep_plots import plot_sweep

            out = None if args.out is None else output_dir(args.out, "--out")
            try:
                if args.metrics.is_dir():
                    paths = plot_sweep(args.metrics, out)
                else:
                    paths = plot_metrics(args.metrics, out, baselines=args.baselines)
            except (FileNotFoundError, ValueError) as exc:
                print(_one_line(f"{label}: {_naming(args.metrics, exc)}"), file=sys.stderr)
                return 2
            for path in paths:
                print(path)
        elif args.command == "report":
            from fedmc_flwr.analysis.report import parse_round, report

            chosen = parse_round(args.round)
            print(report(args.dirs, args.baselines, round_=chosen, markdown=args.markdown))
    except InputError as exc:
        print(_one_line(f"{label}: {exc.label}{exc}"), file=sys.stderr)
        return 2
    except RunFailure as exc:
        if not exc.logged:
            print(_one_line(f"{label}: {exc}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        resume = f"; continue with: {resume_command(args)}" if args.command in RESUMABLE else ""
        print(_one_line(f"fedmc: interrupted{resume}"), file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

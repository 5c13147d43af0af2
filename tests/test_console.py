"""A quiet console: no colour codes off a terminal, none of the Flower and Ray lines that do
not apply here, one progress line per round and one as each region's reply arrives, a
resumed run's own round numbers, and the command that resumes an interrupted run. What a
real run printed is checked on the reference run (tests/simulation/test_reference_run.py)."""

from __future__ import annotations

import io
import logging
import re
import shlex
import warnings
from pathlib import Path

import pytest

from fedmc_flwr.federation import console
from fedmc_flwr.federation.progress import RoundProgress, duration

NOT_APPLICABLE = (
    "Since flwr 1.32",
    "Evaluation returned no results",
    "Starting evaluation of initial global parameters",
    "History (loss",
    "flwr federation simulation-config",
    "To change federation size",
    "FutureWarning",
    "Manually terminating",
)
ROUND_LINE = re.compile(r"round (\d+)/(\d+) done in .*: held-out reward -?\d+\.\d{4} ")


@pytest.fixture
def flower_console():
    """Flower's own console handler, writing to a string, as a Flower process has it."""
    from flwr.common.logger import FLOWER_LOGGER, ConsoleHandler

    stream = io.StringIO()
    handler = ConsoleHandler(stream=stream)
    FLOWER_LOGGER.addHandler(handler)
    yield stream
    FLOWER_LOGGER.removeHandler(handler)


def test_flower_drops_what_does_not_apply_and_colours_nothing_under_no_color(
    flower_console: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flwr.common.logger import log

    monkeypatch.setenv("NO_COLOR", "1")
    console.quiet_flower()
    console.quiet_flower()  # twice, as two app modules in one process do
    log(logging.INFO, "Starting evaluation of initial global parameters")
    log(logging.INFO, "Evaluation returned no results (`None`)")
    log(logging.INFO, "round %d/%d done", 1, 2)
    text = flower_console.getvalue()
    assert "\x1b" not in text
    assert text.splitlines() == ["INFO :      round 1/2 done"]


def test_flower_keeps_its_colours_on_a_terminal(
    flower_console: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flwr.common.logger import log

    monkeypatch.delenv("NO_COLOR", raising=False)
    console.quiet_flower()
    log(logging.INFO, "round %d/%d done", 1, 2)
    assert "\x1b[92m" in flower_console.getvalue()


def test_rays_accelerator_warning_is_ignored() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        console.quiet_flower()
        warnings.warn(console.RAY_FUTURE_WARNING + " visible devices ...", FutureWarning, 2)
        warnings.warn("another FutureWarning", FutureWarning, 2)
    assert [str(w.message) for w in caught] == ["another FutureWarning"]


STREAM = [
    "\x1b[92mINFO \x1b[0m:      Starting Flower Simulation\n",
    "\x1b[93mWARNING \x1b[0m:   Since flwr 1.32, default simulated SuperNodes changed from"
    " 10 to 2.\n",
    "\x1b[92mINFO \x1b[0m:      To change federation size, use the following command:\n",
    "\x1b[92mINFO \x1b[0m:      \tflwr federation simulation-config @none/default <superlink>"
    " --num-supernodes <N>\n",
    "\x1b[36m(ClientAppActor pid=7)\x1b[0m round 1/2: us-east1 trained in 3 s\n",
    "\x1b[36m(ClientAppActor pid=8)\x1b[0m \x1b[93mWARNING \x1b[0m:   Manually terminating"
    " ClientAppActor\n",
]


def test_the_relay_drops_what_does_not_apply_and_strips_colour_off_a_terminal() -> None:
    out = io.StringIO()
    console.relay(STREAM, out, tty=False)
    assert out.getvalue() == (
        "INFO :      Starting Flower Simulation\n"
        "(ClientAppActor pid=7) round 1/2: us-east1 trained in 3 s\n"
    )
    coloured = io.StringIO()
    console.relay(STREAM, coloured, tty=True)
    assert coloured.getvalue() == STREAM[0] + STREAM[4]


def test_plain_env_only_off_a_terminal() -> None:
    assert console.plain_env(tty=True) == {}
    assert console.plain_env(tty=False) == {"NO_COLOR": "1", "RAY_COLOR_PREFIX": "0"}


def test_progress_says_each_reply_and_each_round_with_the_time_left(
    flower_console: io.StringIO,
) -> None:
    ticks = iter([0.0, 30.0, 50.0])
    progress = RoundProgress(3, ["us-east1", "europe-west9"], clock=lambda: next(ticks))
    progress.reply(1, "trained", [1], 12.3)
    progress.reply(1, "trained", [0], 14.0)
    progress.reply(1, "trained", [5], 1.0)  # not a region of this run: nothing to say
    progress.round_done(1, -1.23456, 2)
    progress.round_done(2, -1.2, 2)
    lines = [line.split(":", 1)[1].strip() for line in flower_console.getvalue().splitlines()]
    assert lines == [
        "round 1/3: europe-west9 trained in 12 s (1 of 2 regions)",
        "round 1/3: us-east1 trained in 14 s (2 of 2 regions)",
        "round 1/3 done in 30 s: held-out reward -1.2346 (mean over 2 regions), "
        "about 1 min 00 s left",
        "round 2/3 done in 20 s: held-out reward -1.2000 (mean over 2 regions), about 20 s left",
    ]


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration(s) for s in (0.4, 59, 200, 7300)] == [
        "0 s",
        "59 s",
        "3 min 20 s",
        "2 h 01 min",
    ]


def test_a_resumed_runs_flower_banners_name_its_own_rounds(flower_console: io.StringIO) -> None:
    """Flower counts the rounds it runs from 1; a run resumed after round 2 is at round 3."""
    from flwr.common.logger import log

    console.number_rounds_from(3)
    console.number_rounds_from(3)  # once per ServerApp start: the filter is not doubled
    log(logging.INFO, console.ROUND_BANNER, 1)
    log(logging.INFO, console.ROUND_BANNER, 2)
    log(logging.INFO, console.RUN_FINISHED, 2, 61.0)
    console.number_rounds_from(1)  # a fresh run in the same process: Flower's own numbers
    log(logging.INFO, console.ROUND_BANNER, 1)
    lines = [line.split(":", 1)[1].strip() for line in flower_console.getvalue().splitlines()]
    assert lines == [
        "[ROUND 3]",
        "[ROUND 4]",
        "Run finished 2 round(s), rounds 3 to 4, in 61.00s",
        "[ROUND 1]",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["run"],
        ["run", "--config", "my conf/x.yaml", "--set", "train.rounds=3", "--overwrite"],
        ["run", "--nodes", "2"],
        ["deploy", "--set", "name=it's", "--nodes", "2", "--insecure", "--metrics-port", "9"],
    ],
)
def test_ctrl_c_names_the_command_that_resumes_the_run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command, pasted into a shell, is the same run with `--resume`."""
    from fedmc_flwr import cli

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main(argv) == 130
    (line,) = capsys.readouterr().err.splitlines()
    said, command = line.split("; continue with: ")
    assert said == "fedmc: interrupted"
    words = shlex.split(command)
    assert words[0] == "fedmc"
    given, resumed = cli._parser().parse_args(argv), cli._parser().parse_args(words[1:])
    assert resumed.resume and not resumed.overwrite
    assert vars(resumed) == vars(given) | {"resume": True, "overwrite": False}


@pytest.mark.parametrize(("nodes", "served"), [(None, 3), ("1", 1), ("3", 3), ("4", None)])
def test_fedmc_run_spreads_the_regions_over_the_virtual_clients_it_is_given(
    nodes: str | None,
    served: int | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--nodes` virtual clients (one per region by default); more nodes than regions is
    refused in one line before Flower starts."""
    from fedmc_flwr import cli
    from fedmc_flwr.federation import runner

    engines = []
    monkeypatch.setattr(
        runner, "run_federation", lambda config, overrides, **kw: engines.append(kw["engine"]) or 0
    )
    small_demo = str(Path(__file__).resolve().parents[1] / "conf" / "small_demo.yaml")
    argv = ["run", "--config", small_demo] + (["--nodes", nodes] if nodes else [])
    code = cli.main(argv)
    if served is None:
        assert code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line == "fedmc run: config error: --nodes 4: give 1 to 3 (world.regions)"
        assert engines == []
    else:
        assert code == 0 and engines == [runner.SimulationEngine(served)]


FAILED_MESSAGE_STREAM = [
    "INFO :      [ROUND 2]\n",
    "\x1b[93mWARNING \x1b[0m:   ClientApp actor lost: its Ray node left the cluster. Ray says: x\n",
    "ERROR :     An exception was raised when processing a message by RayBackend\n",
    "ERROR :     its Ray node left the cluster\n",
    "ERROR :     Traceback (most recent call last):\n",
    '  File "vce_api.py", line 130, in worker\n',
    "RayActorLost: its Ray node left the cluster\n",
    "\n",
    "WARNING :   round 2 training: region 0 left out: client failed: RayActorLost: its Ray"
    " node left the cluster\n",
    "ERROR :     a later error of its own\n",
    "INFO :      [ROUND 3]\n",
]


def test_a_failures_details_go_to_the_log_and_the_console_says_where() -> None:
    out, log = io.StringIO(), io.StringIO()
    log.name = "results/x/run.log"
    console.relay(FAILED_MESSAGE_STREAM, out, tty=False, log=log)
    assert log.getvalue() == "".join(FAILED_MESSAGE_STREAM).replace("\x1b[93m", "").replace(
        "\x1b[0m", ""
    )
    assert out.getvalue() == (
        "INFO :      [ROUND 2]\n"
        "fedmc: a failure's details (tracebacks, Ray's words) are in results/x/run.log\n"
        "WARNING :   round 2 training: region 0 left out: client failed: RayActorLost: its Ray"
        " node left the cluster\n"
        "ERROR :     a later error of its own\n"
        "INFO :      [ROUND 3]\n"
    )


def test_without_a_log_the_relay_keeps_tracebacks() -> None:
    out = io.StringIO()
    console.relay(FAILED_MESSAGE_STREAM, out, tty=False)
    assert "Traceback" in out.getvalue()

"""`flwr run .` as the README gives it: how a completed run ends (as `fedmc run` ends), what
a refused run prints, and what is left running afterwards. (What Flower's runtime install
would put in the run's environment is in test_packaging.)"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, TINY
from flower_runs import processes_with_env, ray_start_slot
from flwr.app import Context, RecordDict
from flwr.common.logger import log

from fedmc_flwr.federation.server_app import prepare_run
from fedmc_flwr.federation.strategy import RoundFailed
from fedmc_flwr.federation.summary import last_round_table
from fedmc_flwr.federation.superlink import BIN, LOCAL_PID_FILE, free_port
from fedmc_flwr.results import ExperimentExists

FLOWERS_OWN = {"flower-superlink", "flower-superexec"}
"""Processes of Flower's local SuperLink, which outlives `flwr run` by design."""


def _context(results: Path, owner: str = "") -> Context:
    run_config = {
        "config": str(TINY),
        "overrides": "",
        "results-dir": str(results),
        "on-existing": "refuse",
        "owner": owner,
        "client-state-dir": "",
    }
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)


def test_a_refused_experiment_names_the_run_config_way_under_flwr_and_the_flags_under_fedmc(
    tmp_path: Path,
) -> None:
    """`flwr run` users pass run-config settings, `fedmc run` users flags: the message the
    ServerApp raises names what its user can type."""
    existing = tmp_path / "tiny_federation"
    existing.mkdir()
    (existing / "metrics.csv").write_text("")
    with pytest.raises(ExperimentExists) as refused:
        prepare_run(_context(tmp_path))
    message = str(refused.value)
    assert "--run-config \"on-existing='overwrite'\"" in message
    assert "--run-config \"on-existing='resume'\"" in message
    assert "pass --overwrite" not in message
    with pytest.raises(ExperimentExists, match="pass --overwrite"):
        prepare_run(_context(tmp_path, owner="123:456"))


def _logged(exc: BaseException) -> str:
    """What Flower's `log(ERROR, ..., exc_info=exc)` prints for an exception that ended
    a run (`flwr.simulation.app` logs it so), with the ServerApp module imported."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(handler)
    try:
        try:
            raise exc
        except BaseException as raised:
            log(logging.ERROR, "%s raised an exception", "Simulation", exc_info=raised)
    finally:
        flwr_logger.removeHandler(handler)
    return stream.getvalue()


def test_bad_input_and_a_stopped_federation_end_the_run_in_one_line_a_bug_in_a_traceback() -> None:
    refused = _logged(ExperimentExists("/r/x already holds results"))
    assert refused == "fedmc: /r/x already holds results\n"
    stopped = _logged(RoundFailed("round 1 training: 0 of 2 regions healthy"))
    assert stopped == "fedmc: run failed: round 1 training: 0 of 2 regions healthy\n"
    bug = _logged(ZeroDivisionError("division by zero"))
    assert bug.startswith("Simulation raised an exception\nTraceback")


def _flwr(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "flwr"), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def _run_and_status(run_config: str, env: dict[str, str]) -> tuple[str, str]:
    """The README's `flwr run . --stream` on the tiny experiment: its output and the run's
    final status from `flwr list`."""
    done = _flwr(
        [
            "run",
            ".",
            "--stream",
            "--federation-config",
            "num-supernodes=2 client-resources-num-cpus=1",
            "--run-config",
            run_config,
        ],
        env,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    (run_id,) = re.findall(r"Successfully started run (\d+)", output)
    listed = _flwr(["list", "--run-id", run_id, "--format", "json"], env)
    return output, json.loads(listed.stdout)["runs"][0]["status"]


def _program(pid: int) -> str:
    """The program a process runs: the script for Python entry points, else its name."""
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return "(gone)"
    scripts = [Path(a).name for a in cmdline[:2] if Path(a).name.startswith(("flower-", "flwr"))]
    return scripts[0] if scripts else Path(cmdline[0]).name if cmdline else "?"


def _settled(marker: str, allowed: set[str], wait_s: float) -> list[tuple[int, str]]:
    """The processes of `marker` not in `allowed`, once they have had `wait_s` to exit."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [(pid, _program(pid)) for pid in processes_with_env(marker)]
        left = [(pid, name) for pid, name in left if name not in allowed]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.flower
def test_flwr_run_ends_as_fedmc_run_as_a_guest_and_stops_by_its_pid_file(tmp_path: Path) -> None:
    """The README's `flwr run .` on the tiny experiment, over an earlier run's results with
    `on-existing='overwrite'`, completes as `fedmc run` does: the last round's table and
    the plots' paths in its log, the plots drawn in the experiment's `plots/`, and what the
    run does not write left alone. Run again on the same results, it is refused in one
    line that names the run-config way to overwrite, and no traceback. The SuperLink is
    the README's `fedmc start-superlink`'s: between and after the runs only it and its
    SuperExec are left, `fedmc stop-superlink` stops them and everything else by its PID
    file, and nothing is written into the user's home directory (an empty one here; the
    compile cache and matplotlib's config folder go where XDG_CACHE_HOME and
    XDG_CONFIG_HOME say). A private Flower home and ports keep it apart from any other
    run."""
    home = tmp_path / "flwr-home"
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "FLWR_"))},
        "HOME": str(user_home),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "FLWR_HOME": str(home),
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    marker = f"FLWR_HOME={home}"
    results = tmp_path / "results"
    out = results / "tiny_federation"
    earlier = {"metrics.csv": "earlier run\n", "plots/old.png": "", "notes.txt": "mine\n"}
    for name, text in earlier.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    run_config = f"config='{TINY.relative_to(REPO)}' results-dir='{results}'"
    try:
        started = _fedmc(["start-superlink"], env)
        assert started.returncode == 0 and (home / LOCAL_PID_FILE).is_file(), started.stderr
        with ray_start_slot(out / "progress.json"):
            output, status = _run_and_status(f"{run_config} on-existing='overwrite'", env)
        assert status == "finished:completed", output
        assert "Starting local SuperLink" not in output  # the one started above
        assert last_round_table(out / "metrics.csv") in output, output
        plots = [out / "plots" / f"{name}.png" for name in ("reward", "latency", "paired")]
        assert f"fedmc: plots: {', '.join(map(str, plots))}" in output, output
        assert all(plot.stat().st_size for plot in plots)
        assert not (out / "plots" / "old.png").exists()  # the earlier run's, replaced
        assert (out / "notes.txt").read_text() == "mine\n"  # not the run's: kept
        assert _settled(marker, FLOWERS_OWN, 30) == []

        with ray_start_slot(out / "progress.json"):
            output, status = _run_and_status(run_config, env)
        assert status == "finished:failed", output
        (line,) = [ln for ln in output.splitlines() if "already holds results" in ln]
        assert "--run-config \"on-existing='overwrite'\"" in line, line
        assert "Traceback" not in output, output
        assert _settled(marker, FLOWERS_OWN, 30) == []

        stopped = _fedmc(["stop-superlink"], env)
        assert stopped.returncode == 0, stopped.stderr
        assert _settled(marker, set(), 30) == []
        assert list(user_home.iterdir()) == []
    finally:
        for pid in processes_with_env(marker):
            psutil.Process(pid).kill()


def _fedmc(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "fedmc"), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )

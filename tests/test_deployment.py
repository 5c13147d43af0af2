"""Flower's deployment engine on loopback: TLS, SuperNode authentication, state per node.

The reference experiment (conftest's `tiny_run`) runs with one SuperLink and two
SuperNodes, over TLS with a CA made for the run and only registered SuperNodes admitted;
the second SuperNode starts mid-run, for its region's first round. Its tables must equal
the simulation engine's byte for byte (same config and seed), each region's learner state
must live in its own SuperNode's folder, and nothing it started may outlive it; watched
from outside, every process of its family listens on loopback only. A `fedmc deploy`
stopped with Ctrl-C leaves nothing running. A SuperNode whose key was never registered
must be refused.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import TINY_TRACED
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from flower_runs import (
    TINY,
    ListenerWatch,
    check_listeners,
    processes_with_env,
    run_isolated,
)

from fedmc_flwr.federation.client_app import state_root
from fedmc_flwr.federation.credentials import make_node_key, make_tls
from fedmc_flwr.federation.deployment import (
    DeploymentEngine,
    node_config,
    online_nodes,
    start_supernode,
)
from fedmc_flwr.federation.processes import FlowerProcesses
from fedmc_flwr.federation.superlink import (
    CONNECTION,
    flower_env,
    flwr,
    start_superlink,
    write_connection,
)

REGIONS = ("us-east1", "europe-west9")


class Deployed(NamedTuple):
    out: Path
    """The experiment directory."""
    listeners: dict[int, tuple[str, set[str]]]
    """Every socket a process of the run's family listened on (`ListenerWatch`)."""
    console: str
    """What the run printed."""


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    """The reference experiment through the deployment engine, TLS and SuperNode
    authentication on, watched from outside while it runs."""
    results = tmp_path_factory.mktemp("deployed")
    homes = tmp_path_factory.mktemp("deploy-home")
    engine = DeploymentEngine(2, tls=True, node_auth=True)
    overrides = [f"results_dir={results}"]
    console = results / "console.txt"
    with ListenerWatch(f"FLWR_HOME={homes}") as watch:
        code = run_isolated(homes, overrides, None, TINY_TRACED, engine=engine, console=console)
        assert code == 0, console.read_text()[-4000:]
    return Deployed(results / "tiny_traced", watch.seen(), console.read_text())


@pytest.mark.flower
def test_a_deployment_listens_on_loopback_only(deployed: Deployed) -> None:
    """Every process of the family, SuperLink and SuperNodes included, whatever it ran
    (the simulation engine's run gets the same watch in test_kill_and_resume)."""
    check_listeners(deployed.listeners, {"fedmc-supernode"})


@pytest.mark.flower
def test_each_region_keeps_its_learner_on_its_own_node_the_late_one_from_its_round(
    deployed: Deployed,
) -> None:
    """Node 1, whose region joins in round 2, is started once round 1 is done and keeps
    that region's learner from round 2 on."""
    # printed once progress.json says round 1 is done (the log stream may lag behind it)
    assert "fedmc: node 1 joins for round 2" in deployed.console
    for node, (region, kept) in enumerate(zip(REGIONS, ([1, 2], [2]), strict=True)):
        folder = deployed.out / "nodes" / f"node-{node}" / "tiny_traced" / region
        assert sorted(p.name for p in folder.iterdir()) == [f"round_{k:03d}.npz" for k in kept]
        log = (deployed.out / "nodes" / f"node-{node}.log").read_text()
        assert "ROUND 2]" in log and "Sending: evaluate message" in log  # it served rounds
    assert not (deployed.out / "clients").exists()


@pytest.mark.flower
def test_each_node_serves_its_messages_from_a_launcher_that_imported_once(
    deployed: Deployed,
) -> None:
    """Not Flower's fresh `flwr-clientapp` process per message (`forking_exec`)."""
    for node in range(len(REGIONS)):
        log = (deployed.out / "nodes" / f"node-{node}.log").read_text()
        assert log.count("fedmc: ClientApp launcher ready") == 1, node
        assert "Start `flwr-clientapp` process" not in log, node


@pytest.mark.parametrize("table", ["metrics.csv", "per_seed.csv"])
@pytest.mark.flower
def test_deployment_gives_the_simulation_engines_tables(
    deployed: Deployed, tiny_run: Path, table: str
) -> None:
    assert (deployed.out / table).read_bytes() == (tiny_run / table).read_bytes()


@pytest.mark.flower
def test_ctrl_c_stops_every_process_the_deployment_started(tmp_path: Path) -> None:
    """SIGINT once both SuperNodes are up and the run is under way: exit 130 and nothing
    left running. `fedmc: run <id>` is printed only after every SuperNode is online and
    the run was submitted (a SuperNode's own log may reach its file later than that)."""
    command = [sys.executable, "-m", "fedmc_flwr.cli", "deploy", "--config", str(TINY)]
    command += ["--set", f"results_dir={tmp_path}"]
    output = tmp_path / "deploy.out"
    with tempfile.TemporaryDirectory(dir="/tmp") as private, output.open("w") as sink:
        deploy = subprocess.Popen(
            command,
            env={**os.environ, "TMPDIR": private},
            stdout=sink,
            stderr=subprocess.STDOUT,
            # a shell's background job (CI's, say) starts with SIGINT ignored, and a
            # child inherits that: give this one the terminal's Ctrl-C
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            deadline = time.monotonic() + 300
            while "fedmc: run " not in output.read_text():
                assert deploy.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
            deploy.send_signal(signal.SIGINT)
            assert deploy.wait(timeout=120) == 130
        finally:
            if deploy.poll() is None:
                deploy.kill()
        resume = f"fedmc: interrupted; continue with: fedmc deploy --config {TINY} --set "
        assert f"{resume}results_dir={tmp_path} --resume" in output.read_text()
        assert "held-out evaluation" not in output.read_text()  # it did not run to the end
        assert processes_with_env(f"TMPDIR={private}") == []


@pytest.mark.flower
def test_an_unregistered_supernode_is_refused(tmp_path: Path) -> None:
    """With `--enable-supernode-auth`, the registered key's node comes online, while a
    node with a key nobody registered and a node with no key at all (which, without the
    flag, registers itself and joins) exit without ever joining."""
    env = flower_env(tmp_path)
    processes = FlowerProcesses()
    try:
        tls = make_tls(tmp_path / "tls", ["127.0.0.1"])
        connection = start_superlink(
            processes,
            env,
            tmp_path,
            tmp_path / "superlink.log",
            simulation=False,
            tls=tls,
            node_auth=True,
        )
        write_connection(tmp_path, connection)
        known = make_node_key(tmp_path / "keys", "known")
        stranger = make_node_key(tmp_path / "keys", "stranger")
        flwr(["supernode", "register", str(known.public), CONNECTION], env, tmp_path)
        config = node_config(0, 1, tmp_path / "state")
        refused = {
            name: start_supernode(
                processes,
                env,
                connection,
                config,
                tmp_path / name,
                tmp_path / f"{name}.log",
                key,
                max_retries=1,
            )
            for name, key in (("stranger", stranger.private), ("keyless", None))
        }
        start_supernode(
            processes,
            env,
            connection,
            config,
            tmp_path / "known",
            tmp_path / "known.log",
            known.private,
        )
        for name, node in refused.items():
            assert node.wait(timeout=120) != 0, name
            assert "Exit Code" in (tmp_path / f"{name}.log").read_text(), name
        deadline = time.monotonic() + 60
        while online_nodes(env, tmp_path) < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        nodes = flwr(["supernode", "list", CONNECTION], env, tmp_path)["nodes"]
        assert [node["status"] for node in nodes] == ["online"]
    finally:
        processes.stop()
    assert processes.alive() == []


def test_credentials_chain_to_their_ca_and_keep_private_keys_private(tmp_path: Path) -> None:
    tls = make_tls(tmp_path, ["superlink.example.org", "10.0.0.5"])
    ca = x509.load_pem_x509_certificate(tls.ca_certificate.read_bytes())
    certificate = x509.load_pem_x509_certificate(tls.certificate.read_bytes())
    certificate.verify_directly_issued_by(ca)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["superlink.example.org"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    key = make_node_key(tmp_path, "node-0")
    assert key.public.read_text().startswith("ecdsa-sha2-nistp384 ")
    for private in (tls.key, key.private):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)


def test_a_node_keeps_state_where_it_says(tmp_path: Path) -> None:
    """Its own `state-dir` first, then the run's `client-state-dir`, then its working
    directory: never a path the server picks."""
    mine, runs = tmp_path / "mine", tmp_path / "run"
    assert state_root({"state-dir": str(mine)}, {"client-state-dir": str(runs)}) == mine
    assert state_root({}, {"client-state-dir": str(runs)}) == runs
    assert state_root({}, {"client-state-dir": ""}) == Path.cwd() / "fedmc-state"


def _fedmc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedmc_flwr.cli", *args], capture_output=True, text=True
    )


@pytest.mark.slow
def test_bad_deploy_and_credentials_input_is_one_line(tmp_path: Path) -> None:
    done = _fedmc("deploy", "--config", str(TINY), "--nodes", "3")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "fedmc deploy: config error: --nodes 3: give 1 to 2 (world.regions)"
    )
    blocked = tmp_path / "file"
    blocked.write_text("")
    done = _fedmc("credentials", "--out", str(blocked), "--host", "h", "--nodes", "1")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert str(blocked) in done.stderr

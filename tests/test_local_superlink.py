"""`fedmc start-superlink` and `fedmc stop-superlink`, the README's way to run `flwr run .`
as a guest: Flower's files, Ray's token and a PID file in the project's Flower home, and a
stop that signals what that file names and what it started, nothing else. A stand-in
`flower-superlink` (a health check and a detached child, as Flower's starts its
SuperExec) keeps these tests to seconds."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from flwr.cli import constant

from fedmc_flwr import cli
from fedmc_flwr.federation import superlink
from fedmc_flwr.federation.processes import record_pid, recorded_alive, stop_recorded

STAND_IN = """
import http.server, json, os, subprocess, sys
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True)
seen = {"args": args, "child": child.pid, "cwd": os.getcwd(),
        "token": os.environ.get("RAY_AUTH_TOKEN_PATH")}
with open(os.path.join(os.environ["FLWR_HOME"], "stand-in.json"), "w") as handle:
    json.dump(seen, handle)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _sleeper(*, with_child: bool = False) -> subprocess.Popen:
    """A process that sleeps, optionally after starting a child in a session of its own."""
    code = "import time; time.sleep(120)"
    if with_child:
        code = (
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(120)'], start_new_session=True); print(flush=True); "
            "time.sleep(120)"
        )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    if with_child:
        process.stdout.readline()  # the child has started
    return process


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _children(process: subprocess.Popen) -> list[int]:
    return [child.pid for child in psutil.Process(process.pid).children()]


def test_a_recorded_process_and_what_it_started_are_stopped_and_nothing_else(
    tmp_path: Path,
) -> None:
    recorded, bystander = _sleeper(with_child=True), _sleeper(with_child=True)
    (child,), (bystanders_child,) = _children(recorded), _children(bystander)
    pid_file = tmp_path / "x.pid"
    try:
        record_pid(pid_file, recorded.pid)
        assert recorded_alive(pid_file) == [recorded.pid]
        assert stop_recorded(pid_file) == 2
        recorded.wait(10)
        assert _gone(child) and not pid_file.exists()
        assert bystander.poll() is None and not _gone(bystanders_child)
    finally:
        for pid in (child, bystanders_child, bystander.pid, recorded.pid):
            if not _gone(pid):
                psutil.Process(pid).kill()


def test_a_pid_that_another_process_holds_now_is_never_signalled(tmp_path: Path) -> None:
    """The recorded process ended and its PID went to another (forged here: the live
    process's PID with an earlier start time): neither it nor its children are touched."""
    other = _sleeper(with_child=True)
    (child,) = _children(other)
    pid_file = tmp_path / "x.pid"
    record_pid(pid_file, other.pid)
    recorded = json.loads(pid_file.read_text())["family"][str(other.pid)]
    pid_file.write_text(json.dumps({"family": {str(other.pid): recorded - 5.0}}))
    try:
        assert recorded_alive(pid_file) == []
        assert stop_recorded(pid_file) == 0 and not pid_file.exists()
        time.sleep(0.5)
        assert other.poll() is None and not _gone(child)
    finally:
        psutil.Process(child).kill()
        other.kill()
        other.wait()


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `flower-superlink` stand-in in place of Flower's, on a free port; its folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "flower-superlink"
    program.write_text(f"#!{sys.executable}\n{STAND_IN}")
    program.chmod(0o755)
    monkeypatch.setattr(superlink, "BIN", bin_dir)
    monkeypatch.setattr(constant, "LOCAL_SUPERLINK_HTTP_API_PORT", str(superlink.free_port()))
    monkeypatch.setattr(constant, "LOCAL_CONTROL_API_ADDRESS", "127.0.0.1:1")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return bin_dir


def test_start_and_stop_superlink_keep_everything_in_the_project_and_stop_by_pid_file(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.delenv("FLWR_HOME", raising=False)
    home = project / ".flwr"
    assert cli.main(["start-superlink"]) == 0
    seen = json.loads((home / "stand-in.json").read_text())
    pid = int(next(iter(json.loads((home / superlink.LOCAL_PID_FILE).read_text())["family"])))
    try:
        out = capsys.readouterr().out
        assert f"(pid {pid}), its files in {home}" in out and f"FLWR_HOME={home}" in out
        args = seen["args"]
        assert args[args.index("--log-file") + 1].startswith(f"{home}/")
        assert args[args.index("--database") + 1].startswith(f"{home}/")
        assert "--disable-runtime-dependency-installation" in args
        assert seen["cwd"] == str(project)  # ServerApps start where `flwr run .` starts
        token = Path(seen["token"])
        assert token.parent == home and stat.S_IMODE(token.stat().st_mode) == 0o600
        # a second start is refused while the first runs
        assert cli.main(["start-superlink"]) == 1
        assert "already has a running SuperLink" in capsys.readouterr().err
    finally:
        assert cli.main(["stop-superlink"]) == 0
    assert capsys.readouterr().out == f"fedmc: the SuperLink of {home} stopped (2 processes)\n"
    assert _gone(pid) and _gone(seen["child"])
    assert not (home / superlink.LOCAL_PID_FILE).exists() and not token.exists()
    assert cli.main(["stop-superlink"]) == 2  # nothing recorded any more: one line
    assert capsys.readouterr().err.count("\n") == 1


def test_a_port_that_answers_already_is_refused_before_anything_starts(
    stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`flwr run .` would use whatever answers on the port, so a start there is refused."""
    monkeypatch.setattr(superlink, "_answers", lambda connection: True)
    assert cli.main(["start-superlink", "--home", str(tmp_path / "h")]) == 1
    assert "already answers as a SuperLink not started here" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()

"""The Placement hook against a real OpenStack Placement (PyPI openstack-placement on
SQLite, noauth2), started on 127.0.0.1 by the fixture from `make placement`'s virtualenv.
What the server received is read from its own request log."""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import REPO
from exported import NODES, REGIONS, apply_argv, exported_policy, integration_config
from services import Service, free_port

from fedmc_flwr.cli import main

PLACEMENT_PYTHON = REPO / ".venv-placement" / "bin" / "python"
HEADERS = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}
SERVE = (
    "import sys; from wsgiref.simple_server import make_server; "
    "from placement.wsgi.api import application; "
    "make_server('127.0.0.1', int(sys.argv[1]), application).serve_forever()"
)
REQUEST = re.compile(r'"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP')


class Placement:
    """A running Placement server and the requests it logged since `mark()`.

    The server logs a request after answering it, so both ends of a window are fenced by
    a marker request that must show up in the log first.
    """

    def __init__(self, service: Service, url: str) -> None:
        self.service, self.url, self._seen, self._fences = service, url, 0, 0

    def _fence(self) -> int:
        """Send a marker request, wait until it is logged; the log's length before it."""
        self._fences += 1
        marker = f"/?fence={self._fences}"
        line = f'"GET {marker} HTTP'  # the server's access log line, not the app's own
        httpx.get(f"{self.url}{marker}")
        self.service.wait_until(lambda: line in self.service.log.read_text(), 10, "log")
        text = self.service.log.read_text()
        return text.rindex("\n", 0, text.index(line)) + 1

    def mark(self) -> None:
        self._fence()
        self._seen = len(self.service.log.read_text())

    def requests(self) -> list[tuple[str, str]]:
        end = self._fence()
        return REQUEST.findall(self.service.log.read_text()[self._seen : end])


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Placement]:
    """One Placement for the module, with a provider (4 VCPU, 4 GB) per node of the
    test estate, named as the hook's default template names them."""
    tmp_path = tmp_path_factory.mktemp("placement")
    if not PLACEMENT_PYTHON.is_file():
        message = f"{PLACEMENT_PYTHON} missing; create it with: make placement"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    env = {
        **os.environ,
        "OS_PLACEMENT_DATABASE__CONNECTION": f"sqlite:///{tmp_path / 'placement.db'}",
        "OS_API__AUTH_STRATEGY": "noauth2",
    }
    manage = PLACEMENT_PYTHON.parent / "placement-manage"
    subprocess.run([str(manage), "db", "sync"], env=env, check=True, capture_output=True)
    port = free_port()
    service = Service([str(PLACEMENT_PYTHON), "-c", SERVE, str(port)], tmp_path / "api.log", env)
    url = f"http://127.0.0.1:{port}"
    try:
        service.wait_until(lambda: httpx.get(url).is_success, 30, "placement")
        inventory = {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 4096}}
        for region in REGIONS:
            for node in range(NODES):
                name = f"{region}-node-{node}"
                rp = httpx.post(f"{url}/resource_providers", headers=HEADERS, json={"name": name})
                httpx.put(
                    f"{url}/resource_providers/{rp.json()['uuid']}/inventories",
                    headers=HEADERS,
                    json={"resource_provider_generation": 0, "inventories": inventory},
                ).raise_for_status()
        yield Placement(service, url)
    finally:
        service.stop()


@pytest.fixture
def argv(placement: Placement, tmp_path: Path, monkeypatch) -> list[str]:
    experiment, policy = exported_policy(tmp_path)
    config = integration_config(tmp_path, experiment, "openstack", url=placement.url)
    monkeypatch.delenv("INTEGRATION_MODE", raising=False)
    monkeypatch.setenv("OS_AUTH_TOKEN", "admin")
    placement.mark()
    return apply_argv("openstack", policy, config)


def claims(out: str) -> list[str]:
    return [line for line in out.splitlines() if '"action": "claim"' in line]


def test_dry_run_only_reads(placement, argv, capsys) -> None:
    assert main(argv) == 0
    methods = {method for method, _ in placement.requests()}
    assert methods == {"GET"}, "a dry run sends no mutating request"
    lines = claims(capsys.readouterr().out)
    assert len(lines) == len(REGIONS)
    assert all('"fits": true' in line and "VCPU:1" in line for line in lines)


def test_dry_run_without_a_token_contacts_nothing(placement, argv, monkeypatch, capsys) -> None:
    monkeypatch.delenv("OS_AUTH_TOKEN")
    assert main(argv) == 0
    assert placement.requests() == []
    assert len(claims(capsys.readouterr().out)) == len(REGIONS)


def test_live_claims_on_the_chosen_providers(placement, argv, monkeypatch, capsys) -> None:
    monkeypatch.setenv("INTEGRATION_MODE", "live")
    assert main(argv) == 0
    puts = [path for method, path in placement.requests() if method != "GET"]
    assert len(puts) == len(REGIONS) and all(p.startswith("/allocations/") for p in puts)
    for line in claims(capsys.readouterr().out):
        consumer = re.search(r'"consumer": "([0-9a-f-]+)"', line).group(1)
        held = httpx.get(f"{placement.url}/allocations/{consumer}", headers=HEADERS).json()
        [(provider, allocation)] = held["allocations"].items()
        assert allocation["resources"] == {"VCPU": 1, "MEMORY_MB": 512}
        assert f'"{provider}"' in line


def test_live_without_a_token_refuses_in_one_line(placement, argv, monkeypatch, capsys) -> None:
    monkeypatch.setenv("INTEGRATION_MODE", "live")
    monkeypatch.delenv("OS_AUTH_TOKEN")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "OS_AUTH_TOKEN" in err
    assert placement.requests() == []


def test_a_placement_that_is_down_costs_one_line_and_exit_1(tmp_path, monkeypatch, caplog):
    experiment, policy = exported_policy(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    config = integration_config(tmp_path, experiment, "openstack", url=dead, attempts=2)
    monkeypatch.setenv("OS_AUTH_TOKEN", "admin")
    with caplog.at_level(logging.WARNING, logger="fedmc.hooks"):
        assert main(apply_argv("openstack", policy, config)) == 1
    assert len(caplog.records) == 1 and "unavailable after 2 tries" in caplog.text

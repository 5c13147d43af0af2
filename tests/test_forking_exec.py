"""The ClientApp launcher finds a FAB already installed instead of unpacking it again."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest
from flwr.cli import install
from flwr.common.config import get_project_dir
from flwr.supernode.runtime import run_clientapp

from fedmc_flwr.federation import forking_exec

PYPROJECT = """
[project]
name = "demo-app"
version = "1.2.3"

[tool.flwr.app]
publisher = "someone"
"""


def fab_bytes(extra: str = "") -> bytes:
    """A FAB's bytes: enough of one for finding where it installs."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pyproject.toml", PYPROJECT)
        archive.writestr("app.py", f"# {extra}\n")
    return buffer.getvalue()


@pytest.fixture
def flower_installs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[bytes]:
    """Flower's own install, recorded rather than run; FLWR_HOME under `tmp_path`."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    calls: list[bytes] = []

    def record(fab: bytes, *args: object, **kwargs: object) -> Path:
        calls.append(fab)
        return tmp_path / "installed-by-flower"

    monkeypatch.setattr(install, "install_from_fab", record)
    return calls


def test_a_new_fab_is_installed_by_flower(flower_installs: list[bytes]) -> None:
    fab = fab_bytes()
    installed = forking_exec.installed_fab_or_install(fab, skip_prompt=True)
    assert installed.name == "installed-by-flower"
    assert flower_installs == [fab]


def test_an_installed_fab_is_found_not_unpacked(flower_installs: list[bytes]) -> None:
    fab = fab_bytes()
    installed = get_project_dir("someone/demo-app", "1.2.3", hashlib.sha256(fab).hexdigest())
    installed.mkdir(parents=True)
    assert forking_exec.installed_fab_or_install(fab, skip_prompt=True) == installed
    assert flower_installs == []
    other = fab_bytes("changed")  # same app and version, other bytes: installed afresh
    forking_exec.installed_fab_or_install(other, skip_prompt=True)
    assert flower_installs == [other]


def test_the_runtime_installs_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_clientapp, "install_from_fab", install.install_from_fab)
    forking_exec.find_installed_fabs()
    assert run_clientapp.install_from_fab is forking_exec.installed_fab_or_install
    monkeypatch.setattr(run_clientapp, "install_from_fab", lambda *args: None)
    with pytest.raises(RuntimeError, match="no longer calls install_from_fab"):
        forking_exec.find_installed_fabs()  # another Flower: say so rather than guess

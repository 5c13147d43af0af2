"""A SuperNode's ClientApp launcher that imports once and forks a child per message.

Flower's own launcher (`flower-superexec`, which a SuperNode starts under its default
`--isolation subprocess`) runs every message in a fresh `flwr-clientapp` process, and each
of those imports torch, Flower and the simulator and loads the compiled kernels before it
reads its message: seconds per message, twice per round (train, then evaluate), on every
node. `fedmc deploy` starts its SuperNodes with `--isolation process` instead and runs this
launcher beside each one. It pays the imports and the kernel loads once, then asks the
SuperNode's Runtime API for tasks and forks a child per task, and the child runs Flower's
own ClientApp runtime (`run_clientapp`), as `flwr-clientapp` would. While a child works
the launcher waits for it rather than asking again: a SuperNode takes its next message
only once it holds this one's reply. Each message still
gets a process of its own, as Flower's isolation intends: nothing one message leaves in
memory reaches the next.

The child serves the ClientApp this launcher imported, the installed `fedmc_flwr`, not a
copy unpacked from the run's FAB (Flower reuses a module already imported). `fedmc
deploy` builds the FAB from the same installation, so the two are the same code.

    python -m fedmc_flwr.federation.forking_exec --runtime-api-address 127.0.0.1:PORT \\
        --parent-pid SUPERNODE_PID
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import time
import tomllib
import traceback
import zipfile
from pathlib import Path
from typing import Any

from fedmc_flwr.federation.prompt_supernode import retry_pulls_promptly

DEFAULT_POLL_S = 0.05
"""Between two asks for a task while no child works; Flower's launcher waits 1 s, also
while its ClientApp works."""


def preload() -> None:
    """Import what every child would import, and load the compiled kernels, in this process,
    so that a forked child starts with them in memory."""
    import flwr.supernode.runtime.run_clientapp  # noqa: F401  (the imports are the point)

    import fedmc_flwr.federation.client_app  # noqa: F401
    from fedmc_flwr.policies import two_tier_kernels
    from fedmc_flwr.sim import world

    world.warm_cache()
    two_tier_kernels.warm_cache()
    retry_pulls_promptly()  # a child forked at once asks for arrays still on their way
    find_installed_fabs()


def installed_fab_or_install(fab: bytes | Path, *args: Any, **kwargs: Any) -> Path:
    """Flower's `install_from_fab`, except that a FAB whose bytes are installed already is
    found rather than unpacked again. Flower unpacks the archive into a temporary folder and
    checks every file's hash before it finds the app installed, 0.05 to 0.15 s of every
    message; the installed copy came from bytes with the same SHA-256 and was checked then."""
    from flwr.cli.install import install_from_fab
    from flwr.common.config import get_metadata_from_config, get_project_dir

    if isinstance(fab, bytes):
        with zipfile.ZipFile(io.BytesIO(fab)) as archive:
            project = tomllib.loads(archive.read("pyproject.toml").decode())
        fab_id, version = get_metadata_from_config(project)
        installed = get_project_dir(fab_id, version, hashlib.sha256(fab).hexdigest())
        if installed.is_dir():
            return installed
    return install_from_fab(fab, *args, **kwargs)


def find_installed_fabs() -> None:
    """In this process and the children it forks, Flower's ClientApp runtime installs a
    run's FAB with `installed_fab_or_install`."""
    from flwr.cli.install import install_from_fab
    from flwr.supernode.runtime import run_clientapp

    if run_clientapp.install_from_fab is not install_from_fab:  # a Flower other than the lock's
        raise RuntimeError("flwr.supernode.runtime.run_clientapp no longer calls install_from_fab")
    run_clientapp.install_from_fab = installed_fab_or_install


def fork_task(runtime_api_address: str, token: str, parent_pid: int) -> int:
    """Serve one task in a forked child, with Flower's ClientApp runtime: the child's PID.
    The child ends with the runtime's exit code and never returns here."""
    child = os.fork()
    if child != 0:
        return child
    from flwr.supernode.runtime.run_clientapp import run_clientapp

    try:
        run_clientapp(runtime_api_address, token, insecure=True, parent_pid=parent_pid)
        code = 0
    except SystemExit as exit_:  # Flower ends a task by exiting, with its code
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # never back into the launcher's loop
        traceback.print_exc()
        code = 1
    os._exit(code)


def serve(runtime_api_address: str, parent_pid: int, poll_s: float = DEFAULT_POLL_S) -> None:
    """Ask the SuperNode for ClientApp tasks until it goes away; fork a child for each."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.app_utils import start_parent_process_monitor
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    started = time.monotonic()
    preload()
    print(
        f"fedmc: ClientApp launcher ready in {time.monotonic() - started:.1f} s "
        f"(imports and kernels loaded; one forked process per message)",
        flush=True,
    )
    start_parent_process_monitor(parent_pid)  # the SuperNode gone: SIGINT, and out
    client = RuntimeHttpClient.from_server_address(
        server_address=runtime_api_address,
        insecure=True,  # `fedmc deploy` binds each SuperNode's Runtime API to loopback
        root_certificates=None,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        retry_invoker=make_simple_http_retry_invoker(),
    )
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    while True:
        reply = client.AcquireTask(request)
        if reply.HasField("task") and reply.token:
            # the SuperNode hands out its next message only after this one's reply: asking
            # meanwhile would only load the cores the child works on
            os.waitpid(fork_task(runtime_api_address, reply.token, parent_pid), 0)
        else:
            time.sleep(poll_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-api-address", required=True, help="the SuperNode's HOST:PORT")
    parser.add_argument("--parent-pid", type=int, required=True, help="the SuperNode's PID")
    parser.add_argument("--poll-s", type=float, default=DEFAULT_POLL_S, help="between asks")
    args = parser.parse_args(argv)
    try:
        serve(args.runtime_api_address, args.parent_pid, args.poll_s)
    except KeyboardInterrupt:  # the SuperNode ended, or the run stopped us
        sys.exit(0)


if __name__ == "__main__":
    main()

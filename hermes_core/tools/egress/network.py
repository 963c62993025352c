"""What a sandbox needs to reach the network through the egress proxy: a mount, an
environment, and the bridge started before the command."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

MOUNT = "/run/hermes"
"""Where the proxy's directory appears in the sandbox."""
SOCKET_NAME = "egress.sock"
BRIDGE_NAME = "bridge.py"
BRIDGE_PORT = 3128
"""The bridge's port on the sandbox's own loopback (a namespace of its own: always free)."""
PROXY_URL = f"http://127.0.0.1:{BRIDGE_PORT}"


@dataclass(frozen=True, slots=True)
class SandboxNetwork:
    """Arguments for bubblewrap, the command's environment, and the command's wrapper.

    The sandbox must keep ``--unshare-net``: its namespace then has loopback only, and the
    bridge on it is the one way out.
    """

    bwrap_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def through(cls, directory: Path) -> SandboxNetwork:
        """Through the proxy whose socket and bridge are in ``directory``."""
        env = {name: PROXY_URL for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
        env |= {name.lower(): url for name, url in env.items()}
        # Empty, not unset: nothing (not even localhost) is reached around the proxy — there
        # is no route there anyway, and an error from the proxy says why.
        env |= {"NO_PROXY": "", "no_proxy": ""}
        return cls(bwrap_args=["--ro-bind", str(directory), MOUNT], env=env)

    def wrap(self, argv: list[str], python: str) -> list[str]:
        """``argv`` started once the bridge listens (run with the sandbox's ``python``).

        The bridge binds its port, forks a server and exits, so the shell goes on only when
        connections to it are accepted. A bridge that cannot start leaves the command without
        network, with a line on stderr saying so.
        """
        bridge = f"{MOUNT}/{BRIDGE_NAME}"
        socket = f"{MOUNT}/{SOCKET_NAME}"
        script = (
            f'"$0" -I {bridge} {socket} {BRIDGE_PORT} "$$" '
            '|| echo "hermes: the network bridge did not start: no network" >&2; exec "$@"'
        )
        return ["/bin/sh", "-c", script, python, *argv]

    def describe(self) -> str:
        """The wrapper as one shell line (for logs)."""
        return shlex.join(self.wrap(["<command>"], "python3"))

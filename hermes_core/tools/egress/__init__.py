"""Network for sandboxed commands: only through an egress proxy that applies the web tools'
address guard (and, when restricted, a host allow-list).

A sandboxed command keeps its own network namespace, which holds only loopback: there is no
route out. A bridge (``bridge.py``, run in the sandbox with its ``python3``) listens on the
sandbox's loopback and relays each connection to the proxy's Unix socket, bind-mounted into
the sandbox; ``HTTP(S)_PROXY`` point the command's tools (curl, pip, requests) at it. The proxy
(``proxy.py``) runs in the server, checks every target, and connects to the checked address.
"""

from hermes_core.tools.egress.network import SandboxNetwork
from hermes_core.tools.egress.policy import EgressMode, EgressPolicy
from hermes_core.tools.egress.proxy import EgressProxy, ProxyLimits
from hermes_core.tools.egress.registry import EgressProxies, close_egress_proxies, sandbox_network

__all__ = [
    "EgressMode",
    "EgressPolicy",
    "EgressProxies",
    "EgressProxy",
    "ProxyLimits",
    "SandboxNetwork",
    "close_egress_proxies",
    "sandbox_network",
]

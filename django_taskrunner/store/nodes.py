"""Redis Cluster node addresses, parsed apart from the connection so that the
settings checks can use the parser without importing the settings' users."""

from __future__ import annotations


def parse_node(node: str) -> tuple[str, int]:
    """`"host:port"` (or `"[v6 address]:port"`) -> (host, port); ValueError if malformed."""
    host, sep, port = node.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f'a cluster node must be "host:port", not {node!r}')
    return host, int(port)

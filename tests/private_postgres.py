"""A private PostgreSQL cluster for tests that stop the database: its own data
directory, port and socket directory, never the shared server. `available()` says why
not when the binaries are missing; tests then skip with that reason."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from pathlib import Path


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def available() -> str | None:
    """None when a private cluster can be started here, else why not."""
    missing = [name for name in ("initdb", "pg_ctl") if _binary(name) is None]
    if missing:
        return f"needs the PostgreSQL server binaries ({', '.join(missing)} not found)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runs as root without runuser: initdb refuses root"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """initdb in `workdir`, then `start()` / `stop()` at will; `url` for Django."""

    def __init__(self, workdir: Path, database: str = "taskrunner") -> None:
        self.dir = workdir / "pgdata"
        self.sockets = workdir / "pgsock"
        self.log = workdir / "pg.log"
        self.port = _free_port()
        self.database = database
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{database}"
        self._as_user: list[str] = []
        self.sockets.mkdir()
        if os.geteuid() == 0:  # initdb and postgres refuse root: run them as "postgres"
            self._as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(workdir, "postgres")
            shutil.chown(self.sockets, "postgres")
        self._run(_binary("initdb"), "-D", str(self.dir), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync")

    def _run(self, *args: str | None) -> None:
        subprocess.run([*self._as_user, *[a for a in args if a]], check=True,  # noqa: S603
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off")
        self._run(_binary("pg_ctl"), "-D", str(self.dir), "-o", options, "-l",
                  str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run(_binary("pg_ctl"), "-D", str(self.dir), "-m", "immediate", "-w", "-t",
                  "60", "stop")

    def running(self) -> bool:
        return (self.dir / "postmaster.pid").exists()

    def create_database(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def admin_dsn(self, database: str | None = None) -> str:
        return (f"host=127.0.0.1 port={self.port} user=postgres "
                f"dbname={database or self.database}")

"""A real PostgreSQL server for the tests: started once per run in a temporary folder on a
loopback port, one fresh database per test, stopped at the end. A pytest-xdist run's workers
share one (`shared_server`: the first that wants it starts it, its controller stops it once
every worker is done); each worker started its own before, and built the same template
databases on it (about 8 CPU-s a worker).

It uses the server binaries of the machine (Debian's `postgresql` package, which `make test`
installs when missing: /usr/lib/postgresql/<version>/bin, or `initdb` on PATH, or
RRG_TEST_PG_BINDIR). PostgreSQL refuses to run as root, so as root the server runs as the
`postgres` user the Debian package creates. RRG_TEST_POSTGRES_URL points the tests at an
existing server instead (a role allowed to CREATE DATABASE).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ENV_URL = "RRG_TEST_POSTGRES_URL"
ENV_BINDIR = "RRG_TEST_PG_BINDIR"


class NoPostgres(RuntimeError):
    """No server could be started here (the reason says what is missing)."""


def find_bindir() -> Path:
    candidates = []
    if os.environ.get(ENV_BINDIR):
        candidates.append(Path(os.environ[ENV_BINDIR]))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                    key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    candidates.extend(reversed(debian))
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    raise NoPostgres("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found: install "
                     "Debian's postgresql package (make test does as root) or set "
                     f"{ENV_BINDIR} or {ENV_URL}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    """Admin URL of a running server and how to make/drop a database on it."""

    admin_url: str  # postgresql+psycopg://user@127.0.0.1:port/postgres
    stop_command: list[str] | None = None
    folder: Path | None = None
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    def _admin(self):
        import psycopg

        return psycopg.connect(self.admin_url.replace("postgresql+psycopg://", "postgresql://"),
                               autocommit=True)

    def create_database(self, prefix: str = "rrg_test", template: str | None = None) -> str:
        """A new database, empty or a copy of `template`; its SQLAlchemy URL (psycopg 3)."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        copy = f' TEMPLATE "{template}"' if template else ""
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        return self.admin_url.rsplit("/", 1)[0] + "/" + name

    def mark_template(self, name: str) -> None:
        """Make a database a template nobody connects to: `CREATE DATABASE ... TEMPLATE`
        fails while anyone is connected to it."""
        with self._admin() as conn:
            conn.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false')

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_template(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE false')
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.stop_command:
            subprocess.run(self.stop_command, capture_output=True, timeout=60, check=False)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def start_server() -> PostgresServer:
    """Start a throw-away server in a new temporary folder (or use RRG_TEST_POSTGRES_URL).

    The folder is made with mkdtemp in the system temp dir (not under pytest's private 0700
    folders) so that the `postgres` user can reach it when we run as root."""
    if os.environ.get(ENV_URL):
        url = os.environ[ENV_URL]
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://"):]
        return PostgresServer(url)
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise NoPostgres("psycopg (3) is not installed") from exc
    bindir = find_bindir()
    folder = Path(tempfile.mkdtemp(prefix="rrg-test-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses root; Debian's package creates `postgres`
        try:
            import pwd

            account = pwd.getpwnam("postgres")
        except KeyError:
            raise NoPostgres("running as root and there is no 'postgres' user to run the "
                             "server as (install Debian's postgresql package)") from None
        runuser = shutil.which("runuser")
        if runuser is None:
            raise NoPostgres("running as root without runuser to drop to the postgres user")
        as_user = [runuser, "-u", "postgres", "--"]
        os.chown(folder, account.pw_uid, account.pw_gid)
    data = folder / "data"
    port = free_port()
    log = folder / "server.log"

    def run(cmd: list[str], what: str) -> None:
        done = subprocess.run(as_user + cmd, capture_output=True, text=True, timeout=120,
                              check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-1500:]
            if log.is_file():
                tail += "\n" + log.read_text(errors="replace")[-1500:]
            shutil.rmtree(folder, ignore_errors=True)
            raise NoPostgres(f"{what} failed (exit {done.returncode}): {tail}")

    run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
         "--encoding=UTF8", "--no-locale", "--no-sync"], "initdb")
    options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
    run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w",
         "-t", "60", "start"], "pg_ctl start")
    return PostgresServer(
        f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres",
        [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
        folder)


def shared_server(folder: Path) -> PostgresServer:
    """The server of the run whose workers share `folder`: started by the first worker that
    asks (under a file lock), found by the others (its address and stop command in
    `server.json`); a start that failed is reported to every worker with its reason, not tried
    again by each. Not stopped by any worker: `stop_shared_server`, by the run's controller."""
    from filelock import FileLock

    from rrg_review.core.files import atomic_write

    folder.mkdir(parents=True, exist_ok=True)
    kept, failed = folder / "server.json", folder / "failed.txt"
    with FileLock(folder / "server.lock"):
        if failed.exists():
            raise NoPostgres(failed.read_text())
        if not kept.exists():
            try:
                server = start_server()
            except NoPostgres as exc:
                failed.write_text(str(exc))
                raise
            atomic_write(kept, json.dumps({
                "admin_url": server.admin_url, "stop_command": server.stop_command,
                "folder": str(server.folder) if server.folder else None}))
        return _kept_server(kept)


def stop_shared_server(folder: Path) -> None:
    """Stop the server `shared_server` started in `folder`, if any (the run is over)."""
    kept = folder / "server.json"
    if kept.exists():
        _kept_server(kept).stop()
        kept.unlink()


def _kept_server(kept: Path) -> PostgresServer:
    """The server whose address and stop command `shared_server` wrote to `kept`."""
    found = json.loads(kept.read_text())
    return PostgresServer(found["admin_url"], found["stop_command"],
                          Path(found["folder"]) if found["folder"] else None)

"""A throwaway PostgreSQL server for the tests and the benchmark: Debian's binaries, a private folder, loopback only.

`initdb` and `postgres` refuse to run as root, so as root they run as the `postgres`
user (`runuser`); the folder above the data directory is made 0755 so that user can
enter it. The server listens on 127.0.0.1 at a free port and on no unix socket
outside its folder; `fsync=off` is fine because the tests kill clients, never the server.

It trusts nobody: every connection, the superuser's included, logs in with a password
(SCRAM-SHA-256, pg_hba.conf as initdb --auth=scram-sha-256 writes it). The roles a team
makes exist from the start: `durable` (owns the databases: the store's administrator),
the people alice, bob and carol, and `worker`. Their passwords are random per server,
never in a URL, a file of the repository or SQL text (roles get SCRAM verifiers): they
are in a private pgpass file that PGPASSFILE names for this process and its children.

    server = PgServer.start(folder)   # server.url: postgresql://durable@127.0.0.1:PORT/durable
    server.role_url(server.url, "alice")
    server.stop()
"""

from __future__ import annotations

import atexit
import base64
import glob
import hashlib
import hmac
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROLES = ("durable", "alice", "bob", "carol", "worker", "mallory")  # the administrator, three people, a worker, a role never granted


def pg_bin(name: str) -> str:
    """The newest installed PostgreSQL's program `name` (Debian keeps them out of PATH)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    if found:
        return found[-1]
    path = shutil.which(name)
    if not path:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: apt-get install -y postgresql (make test does it)")
    return path


def scram_verifier(password: str) -> str:
    """What PostgreSQL stores for a SCRAM-SHA-256 password, made here: CREATE ROLE never sees the password itself."""
    salt, iterations = secrets.token_bytes(16), 4096
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored)}:{b64(server)}"


def passfile() -> str:
    """This process's private pgpass file (PGPASSFILE, which child processes inherit), made on first use."""
    path = os.environ.get("PGPASSFILE", "")
    if not path.startswith(tempfile.gettempdir()) or not os.path.exists(path):
        fd, path = tempfile.mkstemp(prefix="durable-pgpass-")
        os.close(fd)
        os.environ["PGPASSFILE"] = path
        atexit.register(lambda: os.path.exists(path) and os.unlink(path))
    return path


def free_port() -> int:
    """A loopback port with nothing listening on it (the kernel's pick, released at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, folder: str, port: int, as_root: bool):
        self.folder = folder
        self.data = os.path.join(folder, "data")
        self.port = port
        self.as_root = as_root
        self.url = f"postgresql://durable@127.0.0.1:{port}/durable"
        self.admin_url = f"postgresql://postgres@127.0.0.1:{port}/durable"

    def role_url(self, url: str, role: str) -> str:
        """The same database, logging in as role."""
        return f"postgresql://{role}@127.0.0.1:{self.port}/{url.rsplit('/', 1)[1]}"

    def remember_password(self, role: str, password: str) -> None:
        with open(passfile(), "a") as fh:
            fh.write(f"127.0.0.1:{self.port}:*:{role}:{password}\n")

    def _run(self, argv, **kw):
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)

    @classmethod
    def start(cls, folder: str, max_connections: int = 200) -> PgServer:
        """A new server in `folder` (max_connections: the server's own limit, as a small team's server may set it)."""
        folder = os.path.abspath(folder)
        os.makedirs(folder, exist_ok=True)
        as_root = os.geteuid() == 0
        server = cls(folder, free_port(), as_root)
        os.chmod(folder, 0o755)
        parent = os.path.dirname(folder)
        while as_root and parent not in ("/", ""):  # the postgres user must reach the folder
            mode = os.stat(parent).st_mode & 0o777
            if not mode & 0o001:
                os.chmod(parent, mode | 0o001)
            parent = os.path.dirname(parent)
        if as_root:
            shutil.chown(folder, "postgres", "postgres")
        password = secrets.token_urlsafe(24)
        pwfile = os.path.join(folder, "pwfile")
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, password.encode() + b"\n")
        os.close(fd)
        if as_root:
            shutil.chown(pwfile, "postgres", "postgres")
        try:
            argv = [pg_bin("initdb"), "--no-sync", "--auth=scram-sha-256", f"--pwfile={pwfile}", "-U", "postgres", "-D", server.data]
            proc = server._run(argv)
        finally:
            os.unlink(pwfile)
        if proc.returncode != 0:
            raise RuntimeError(f"initdb failed: {proc.stderr.strip()[-600:]}")
        os.chmod(passfile(), 0o600)
        server.remember_password("postgres", password)
        log = os.path.join(folder, "server.log")
        # pg_stat_statements counts what each command runs (a read's cost must not grow with the store); no autovacuum:
        # its ANALYZE writes pg_statistic under a transaction id of its own, and a test that a read takes none would see it
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {server.port} -k {folder} -c fsync=off -c max_connections={int(max_connections)} "
            "-c shared_preload_libraries=pg_stat_statements -c autovacuum=off"
        )
        server.log, server.opts = log, opts
        proc = server._run([pg_bin("pg_ctl"), "-w", "-D", server.data, "-l", log, "-o", opts, "start"])
        if proc.returncode != 0:
            with open(log, errors="replace") as fh:
                raise RuntimeError(f"PostgreSQL did not start: {proc.stderr.strip()[-300:]} {fh.read()[-600:]}")
        for role in ROLES:
            password = secrets.token_urlsafe(24)
            server.remember_password(role, password)
            server.sql("postgres", f"CREATE ROLE {role} LOGIN PASSWORD '{scram_verifier(password)}'", db="postgres")
        server.sql("postgres", "CREATE DATABASE durable OWNER durable", db="postgres")
        return server

    def sql(self, user: str, statements: str, db: str = "durable") -> str:
        """Run SQL as `user` through psql; returns its output (raises on error)."""
        proc = subprocess.run(
            [
                pg_bin("psql"),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                user,
                "-d",
                db,
                "-c",
                statements,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PGPASSFILE": passfile()},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"psql failed: {proc.stderr.strip()}")
        return proc.stdout

    def new_database(self, name: str, owner: str = "durable", template: str | None = None) -> str:
        """A fresh database, empty or a copy of template; returns its owner's URL (each test its own store)."""
        copy = f' TEMPLATE "{template}"' if template else ""
        self.sql("postgres", f'CREATE DATABASE "{name}" OWNER {owner}{copy};', db="postgres")
        return f"postgresql://{owner}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self._run([pg_bin("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop"])

    def start_again(self) -> None:
        """After stop(): the same server up again on its port (a database that went away and came back)."""
        for attempt in range(5):  # an immediate stop's last backends may still hold the port a moment on a loaded machine
            proc = self._run([pg_bin("pg_ctl"), "-w", "-D", self.data, "-l", self.log, "-o", self.opts, "start"])
            if proc.returncode == 0:
                return
            time.sleep(1 + attempt)
        raise RuntimeError(f"PostgreSQL did not start again: {proc.stderr.strip()[-300:]}")


if __name__ == "__main__":  # a server for a person to try: python tests/pg_server.py FOLDER
    s = PgServer.start(sys.argv[1] if len(sys.argv) > 1 else "/tmp/durable-pg")
    print(s.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        s.stop()

"""Fixtures shared by the trainmedic.data tests."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

INSTALL_HINT = (
    "PostgreSQL's server programs (initdb, pg_ctl) were not found under "
    "/usr/lib/postgresql/*/bin or on PATH. Install them (Debian/Ubuntu: apt-get install "
    "postgresql; macOS: brew install postgresql), or set TRAINMEDIC_TEST_POSTGRES_URL="
    "postgresql+psycopg://user@host:port/dbname to a server where the tests may create schemas."
)


@pytest.fixture(scope="session")
def postgres_url():
    """An SQLAlchemy URL of a PostgreSQL server the tests may create schemas in.

    TRAINMEDIC_TEST_POSTGRES_URL when set (CI starts one); otherwise a throwaway cluster on
    loopback with trust authentication, started here and removed at the end of the session."""
    url = os.environ.get("TRAINMEDIC_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    bindir = _postgres_bindir()
    if bindir is None:
        _unavailable(INSTALL_HINT)
    root = Path(tempfile.mkdtemp(prefix="trainmedic-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        # initdb and postgres refuse to run as root.
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            _unavailable(
                "PostgreSQL refuses to run as root and there is no 'postgres' user to "
                "run it as; create one (useradd postgres) or run the tests as another user."
            )
        shutil.chown(root, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    data, log, port = root / "data", root / "log", _free_port()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120)

    init = run(
        str(bindir / "initdb"),
        "-A",
        "trust",
        "-U",
        "postgres",
        "-N",
        "-E",
        "UTF8",
        "--locale=C",
        "-D",
        str(data),
    )
    if init.returncode:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"initdb failed:\n{init.stdout[-2000:]}{init.stderr[-2000:]}")
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
    start = run(str(bindir / "pg_ctl"), "-w", "-D", str(data), "-l", str(log), "-o", options, "start")
    if start.returncode:
        text = log.read_text(errors="replace")[-2000:] if log.exists() else start.stderr
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"the PostgreSQL server did not start:\n{text}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _postgres_bindir() -> Path | None:
    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _unavailable(reason: str) -> None:
    if os.environ.get("TRAINMEDIC_REQUIRE_POSTGRES") == "1":
        pytest.fail(
            f"{reason}\n(TRAINMEDIC_REQUIRE_POSTGRES=1 makes this an error, not a skip.)", pytrace=False
        )
    pytest.skip(reason)

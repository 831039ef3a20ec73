"""The rows of an SQL query: SQLite (embedded), PostgreSQL, or any database SQLAlchemy reaches.

One PostgreSQL round trip per batch can leave a GPU idle 70-90 % of the time. This source runs
the query once per materialisation and streams it in chunks through a server-side cursor where
the driver has one (PostgreSQL), so a read costs one statement, never one per batch. It runs no
``SELECT count(*)`` first either: the field specs become known with the first chunk and the
length when the last one has been read.

Columns become fields in the query's column order. Numbers become 1-D arrays; BLOB / bytea
columns are raw bytes that ``schema=`` gives a dtype and a per-sample shape; array columns
(``real[]``) and other sequences become one row of an array per sample. NULLs, strings, dates
and ragged arrays are refused by name, with the row and the SQL that fixes them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Generator
from pathlib import Path

import numpy as np

from trainmedic.data.sources.base import Source
from trainmedic.data.sources.sql_decode import Decoder, parse_schema
from trainmedic.errors import SourceError, require

#: Rows of the first chunk when chunk_rows() is asked before any row was read: the size of a
#: query's rows is unknown until they arrive, and a BLOB row may be megabytes.
FIRST_CHUNK_ROWS = 1024

#: Characters of the query shown in descriptions and messages.
_QUERY_SHOWN = 300


class SqlSource(Source):
    """Rows of ``query`` on the database at ``url`` (an SQLAlchemy URL).

    ``schema`` maps column names to a dtype or ``(dtype, per-sample shape)``; BLOB / bytea
    columns need it (``{"x": ("float32", (64,))}``), other columns use it to pick the dtype
    (``{"y": "int64"}``) instead of the inferred int64 / float64 / bool.

    ``fingerprint()`` cannot tell cheaply whether a table of a database server changed, so it
    is the URL (without password) and the query: a disk cache of a server query is trusted
    until deleted. SQLite files add their size and modification time.
    """

    kind = "sql"
    random_access = False

    def __init__(
        self,
        url: str,
        query: str | None = None,
        fields: list[str] | None = None,
        schema: dict | None = None,
    ) -> None:
        sa = require("sqlalchemy", "sql", "Reading an SQL database")
        self._sa = sa
        try:
            self._url = sa.engine.make_url(url)
        except (sa.exc.ArgumentError, ValueError, TypeError, AttributeError):
            raise SourceError(
                f"{_scrub_url_text(str(url))!r} is not a database URL; write it like "
                f"sqlite:///path/to/file.db or postgresql+psycopg://user:password@host:5432/dbname."
            ) from None
        self._password = self._url.password
        #: The URL with the password masked: safe to show, log and put in a report.
        self.url = self._url.render_as_string(hide_password=True)
        if query is None or not isinstance(query, str) or not query.strip():
            raise SourceError(
                f'an SQL source needs the rows to read: pass query="SELECT ..." naming the '
                f'columns to serve, e.g. query="SELECT features, label FROM samples" '
                f"(database {self.url}; got query={query!r})."
            )
        self.query = query
        self._fields = [fields] if isinstance(fields, str) else None if fields is None else list(fields)
        self._schema = parse_schema(schema)
        self.description = f"{self.url}: {_short(query)}"
        self._where = f"the result of the query on {self.url}"
        self._engine = self._create_engine()
        self._conn = None
        # An SQLite file's size and mtime show a change; a server's tables cannot be checked cheaply.
        self.sees_changes = self._sqlite_path() is not None

    # -- Source protocol -------------------------------------------------------------------

    def fingerprint(self) -> str:
        ident = {
            "url": self._url._replace(password=None).render_as_string(hide_password=False),
            "query": self.query,
            "fields": self._fields,
            "schema": {k: [v[0].str, v[1]] for k, v in sorted(self._schema.items())},
        }
        path = self._sqlite_path()
        if path is not None:
            ident["files"] = [
                (p.name, p.stat().st_size, p.stat().st_mtime_ns)
                for p in (path, path.with_name(path.name + "-wal"))
                if p.exists()
            ]
        blob = json.dumps(ident, sort_keys=True, default=str).encode()
        return "sql:" + hashlib.sha256(blob).hexdigest()

    def chunk_rows(self, target_bytes: int | None = None) -> int:
        if not self.specs:
            return FIRST_CHUNK_ROWS
        return super().chunk_rows(target_bytes)

    def iter_chunks(self, rows: int) -> Generator[dict[str, np.ndarray], None, None]:
        """Run the query once and yield its rows decoded, ``rows`` at a time.

        ``specs`` is set before the first chunk is yielded, ``length`` after the last."""
        rows = int(rows)
        if rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        sa = self._sa
        self._check_sqlite_file()
        try:
            conn = self._engine.connect()
        except sa.exc.SQLAlchemyError as exc:
            raise self._error(
                "could not connect to",
                exc,
                "Check the host, port, user, password and database name in the URL, and that "
                "the server is running and reachable from this machine.",
            ) from exc
        self._conn = conn
        result = None
        try:
            try:
                # yield_per streams: a named (server-side) cursor on PostgreSQL, FETCHed in
                # chunks; SQLite's cursor is lazy anyway. One statement for the whole read.
                result = conn.execution_options(stream_results=True, yield_per=rows).execute(
                    sa.text(self.query)
                )
            except sa.exc.SQLAlchemyError as exc:
                raise self._error(
                    "the query failed on",
                    exc,
                    "Fix the SQL; trying it in the database's own shell (psql, sqlite3) shows "
                    "the tables and columns it can see.",
                ) from exc
            if not result.returns_rows:
                raise SourceError(
                    f"the query on {self.url} returns no result set ({_short(self.query)}); "
                    f"pass a SELECT that returns the columns to serve."
                )
            decoder = Decoder(list(result.keys()), self._fields, self._schema, self._where)
            total = 0
            while True:
                try:
                    batch = result.fetchmany(rows)
                except sa.exc.SQLAlchemyError as exc:
                    raise self._error(
                        f"reading row {total} of the result failed on",
                        exc,
                        "Fix the SQL or the data it reads.",
                    ) from exc
                if not batch:
                    break
                chunk = decoder.decode(batch, total)
                if total == 0:
                    self.specs = decoder.specs
                total += len(batch)
                yield chunk
            if total == 0:
                raise SourceError(
                    f"the query returned no rows on {self.url}: {_short(self.query)}. "
                    f"Check its WHERE clause and that the table holds data."
                )
            self.length = total
        finally:
            if result is not None:
                try:
                    result.close()  # a PostgreSQL named cursor warns if garbage-collected open
                except sa.exc.SQLAlchemyError:
                    pass  # the connection broke; closing it below is all that is left
            self._release()

    def close(self) -> None:
        self._release()

    # -- helpers -----------------------------------------------------------------------------

    def _create_engine(self):
        sa = self._sa
        url = self._url
        postgres = url.get_backend_name() == "postgresql"
        # A bare postgresql:// means psycopg2 to SQLAlchemy; the postgres extra installs psycopg 3.
        if url.drivername == "postgresql" and (_installed("psycopg") or not _installed("psycopg2")):
            url = url.set(drivername="postgresql+psycopg")
        try:
            # NullPool: a materialisation holds one connection and closes it when done.
            return sa.create_engine(url, poolclass=sa.pool.NullPool)
        except ImportError as exc:
            module = exc.name or url.get_driver_name()
            if postgres and module == "psycopg":
                require("psycopg", "postgres", f"Reading PostgreSQL ({self.url})")
            hint = (
                " or use postgresql+psycopg://..., whose driver pip install 'trainmedic[postgres]' installs"
                if postgres
                else ""
            )
            raise SourceError(
                f"the URL {self.url} needs the database driver {module!r}, which is not "
                f"installed: pip install {module}{hint}."
            ) from exc
        except sa.exc.ArgumentError as exc:
            raise SourceError(
                f"SQLAlchemy cannot use the URL {self.url}: {self._scrub(str(exc))}. Write it "
                f"like sqlite:///path/to/file.db or postgresql+psycopg://user@host:5432/dbname."
            ) from exc

    def _sqlite_path(self) -> Path | None:
        if self._url.get_backend_name() != "sqlite":
            return None
        database = self._url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        return Path(database)

    def _check_sqlite_file(self) -> None:
        # sqlite3 would create an empty database and then fail with "no such table".
        path = self._sqlite_path()
        if path is not None and not path.is_file():
            raise SourceError(
                f"the SQLite database {str(path)!r} does not exist (URL {self.url}, "
                f"working directory {str(Path.cwd())!r}); sqlite:///relative/path.db is relative "
                f"to the working directory, sqlite:////absolute/path.db is absolute."
            )

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except self._sa.exc.SQLAlchemyError:
                pass  # the connection is broken already; nothing left to release
        self._engine.dispose()

    def _error(self, action: str, exc: Exception, fix: str) -> SourceError:
        orig = getattr(exc, "orig", None)
        message = str(orig if orig is not None else exc).strip()
        message = self._scrub(re.sub(r"\s*\(Background on this error at: \S+\)", "", message))
        if "bind parameter" in message:
            fix = (
                "A :name in the query is a bind parameter and SqlSource passes none: write the "
                "value into the query, or escape a literal colon as \\:."
            )
        return SourceError(f"{action} {self.url}: {message}\nquery: {_short(self.query)}\n{fix}")

    def _scrub(self, text: str) -> str:
        # Drivers do not echo passwords, but a message must never be the one that leaks it.
        if self._password and len(self._password) >= 3:
            text = text.replace(self._password, "***")
        return text


def _short(query: str) -> str:
    text = " ".join(query.split())
    return text if len(text) <= _QUERY_SHOWN else text[: _QUERY_SHOWN - 1] + "…"


def _scrub_url_text(text: str) -> str:
    """Mask a password in a string that is not a parseable URL (user:password@host)."""
    return re.sub(r"(^|//)([^/:@\s]*):[^@/\s]*@", r"\1\2:***@", text)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a None entry in sys.modules, i.e. blocked
        return False

"""The team's PostgreSQL store: a shared journal, job rows and LangGraph's checkpoints, under row-level security.

An extension of durable_job.py (the one-file core), imported only by the commands that name a --store. It is the
core's Store interface (section 11 there) for a store job, the store's own commands (migrate, a listing's page,
usage, delete) and nothing a state directory needs. Its sections 1 to 4, through the line that ends them (the
core's ENGINE_MARK), are part of a store job's engine, with the core's engine and the migrations it applies
(durable_job_team/migrations/*.sql): a store job is continued only by a program with exactly that engine
(STORE_ENGINE_PARTS; durable_job.new_job seals their digest as engineSha256). Sections 1 to 4 use only the core's
engine (its sections 1 to 12); administration and listing, below the line, change no job.

Sections, each using only what stands above it and the core:

 1. PostgreSQL driver: store addresses, psycopg
 2. Migrations: the SQL files, in order
 3. The journal on a psycopg connection, and LangGraph's checkpoint rows
 4. The store: its lock, PgStore and its schema set up
 5. Administration: grants, migrate, shred and rotate-key
 6. Listing: a page of jobs in one statement, usage, delete
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Self, cast

from durable_job import (
    COMMAND_ACTS,
    GENESIS,
    KEY_FILE_ENV,
    KEY_FIX,
    NEW_STORE_JOB,
    PASSKEY_COLUMNS,
    STATE_KEYS,
    BusyError,
    CheckpointRows,
    CheckpointState,
    Cipher,
    Dialect,
    EncryptedError,
    Holder,
    Item,
    Job,
    JobError,
    Journal,
    Kek,
    Keys,
    LangGraphRows,
    Manifest,
    ManifestError,
    RowUnchanged,
    SealError,
    Secrets,
    StateError,
    Store,
    UsageError,
    Writes,
    append_link,
    apply_migrations,
    canonical,
    check_job_matches_manifest,
    check_program_seals,
    check_source_bytes,
    checked_passkey_row,
    checkpoint_serializer,
    clip,
    command_line,
    crash_point,
    decode_checkpoint,
    default_program,
    encrypted_document,
    encrypted_pruned,
    encrypted_source,
    is_encrypted,
    job_writes,
    keep_data_key,
    kept_sources,
    keyed_sources,
    may_by_rule,
    new_cipher,
    now_utc,
    opened_checkpoint,
    opened_document,
    opened_pruned,
    opened_source,
    parse_manifest,
    passkey_select,
    plain_value,
    pruned_checkpoint,
    read_checkpoint,
    redact,
    rotated_refusal,
    sha256_hex,
    source_failure,
    strict_json,
    taken_error,
    who_may,
    with_decision,
)

###############################################################################
# 1. PostgreSQL driver: store addresses, psycopg
###############################################################################


STORE_SCHEMA = "durable_job"  # the journal, the job rows and LangGraph's checkpoint tables, apart from `public`
PG_REQUIREMENTS = "requirements-postgres.txt"
CHECKPOINT_MIGRATION = 9  # the highest checkpoint_migrations row langgraph-checkpoint-postgres 3.2.0 writes
SETUP_WAIT_SECONDS = 60.0
# A reader's session setting, sent with the connection (no statement of its own): no JIT compilation. A listing's
# one statement over a thousand jobs is costed high enough for the server to JIT-compile it, which took 1.2 s for a
# statement that runs in 0.15 s; a reader's short statements never gain from it. A URL's own `options` replace it.
READER_OPTIONS = "-c jit=off"


def need_psycopg():
    """psycopg, or a HOLD naming the optional requirements file."""
    try:
        import psycopg
    except ImportError:
        raise UsageError(f"a --store URL needs PostgreSQL support, which is not installed: pip install -r {PG_REQUIREMENTS}") from None
    return psycopg


STORE_URL_SCHEMES = ("postgresql://", "postgres://")


def check_store_url(url: str) -> None:
    """A store is named by a postgresql:// URL only: a libpq keyword string could carry a password
    that this program would then have to find and hide in every form it prints."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", url) if isinstance(url, str) else None
    if scheme and not url.lower().startswith(STORE_URL_SCHEMES):
        raise UsageError(
            f"the store must be a PostgreSQL database, named by a postgresql:// URL (postgresql://ROLE@HOST:PORT/DBNAME): "
            f"{scheme[1]}:// is not one (only postgresql:// and postgres:// URLs)"
        )
    if not isinstance(url, str) or not url.lower().startswith(STORE_URL_SCHEMES):
        raise UsageError(
            "the store must be named by a postgresql:// URL (postgresql://ROLE@HOST:PORT/DBNAME), not a libpq "
            "keyword string (host=… user=…); put the password in PGPASSWORD or ~/.pgpass, never in the address"
        )


def public_url(url: str) -> str:
    """The store URL with any password removed (user:secret@host → user@host, password=… dropped)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            netloc = f"{userinfo.partition(':')[0]}@{host}"
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() != "password"])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "postgresql://[unparseable URL]"


@functools.lru_cache(maxsize=64)
def address_secrets(url: str) -> frozenset:
    """The spellings of the password a store address carries (what a Secrets notes of it).

    The password is found by the driver's own parser (psycopg's conninfo_to_dict, which is libpq's
    PQconninfoParse), in the URL's user info or its query, and in a keyword string too (which
    check_store_url then refuses), plus the URL's own spelling of it.
    """
    from urllib.parse import parse_qsl, unquote, urlsplit

    secrets = [conninfo_password(url) or ""]
    try:
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        secrets += [userinfo.partition(":")[2]] + [v for k, v in parse_qsl(parts.query) if k.lower() == "password"]
    except ValueError:
        pass
    return frozenset(spelling for secret in secrets if len(secret) >= 3 for spelling in (secret, unquote(secret)))


def conninfo_password(conninfo: str) -> str | None:
    """The password a libpq connection string (URL or keywords) carries, as libpq itself reads it; None without one."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    try:
        return cast("str | None", conninfo_to_dict(conninfo).get("password"))
    except Exception:  # psycopg.ProgrammingError for an unparseable string: there is nothing to hide
        return None


def connect_target(url: str) -> dict:
    """The role, host, port and database a connection to the URL uses, as libpq fills them (its environment and defaults)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        given = conninfo_to_dict(url)
    except Exception:  # psycopg.ProgrammingError for an unparseable URL: libpq's defaults alone
        given = {}
    role = given.get("user") or os.environ.get("PGUSER") or getpass.getuser()
    return {
        "role": role,
        "host": given.get("host") or os.environ.get("PGHOST") or "localhost",
        "port": given.get("port") or os.environ.get("PGPORT") or "5432",
        "database": given.get("dbname") or os.environ.get("PGDATABASE") or role,
    }


def connect_cause(url: str, said: str) -> str:
    """What a refused connection most likely means, in words the server's message hides (a wrong database name reads
    'no password supplied' when ~/.pgpass has a line for the right one), and the fix."""
    t = connect_target(url)
    where = f"{t['host']}:{t['port']}:{t['database']}:{t['role']}"
    if "does not exist" in said and "database" in said:
        return f"the database {t['database']} is not on that server: check the URL's /DBNAME (postgresql://ROLE@HOST:PORT/DBNAME)"
    if "no password supplied" in said:
        return (
            f"no password was found for role {t['role']}: ~/.pgpass (or the file PGPASSFILE names) needs a line matching "
            f"{where}:PASSWORD exactly (a wrong database or role name in the URL matches no line), or set PGPASSWORD; "
            "a URL without ROLE@ connects as your login name"
        )
    if "password authentication failed" in said:
        return f"the server refused role {t['role']}'s password: check its ~/.pgpass line ({where}:PASSWORD) or PGPASSWORD"
    if "role" in said and "does not exist" in said:
        return f"there is no role {t['role']} on that server: name your own role in the URL (postgresql://ROLE@HOST/DBNAME)"
    return "check the URL, the server and your role's password (PGPASSWORD or ~/.pgpass)"


def holder_name(command: str) -> str:
    """The lock connection's application_name: how `status` and `jobs` name the holder (command, pid, since, host).

    PostgreSQL keeps 63 bytes of it, so the host (the short name) comes last and is cut to fit.
    """
    import socket

    head = f"durable_job {command} {os.getpid()} {now_utc()[:19]}Z"
    host = "".join(ch for ch in socket.gethostname().split(".")[0] if 33 <= ord(ch) < 127)
    return f"{head} {host}"[:63] if host else head


def parse_holder_name(name) -> Holder:
    """{pid, command, sinceUtc[, host]} from a holder_name, or an unknown holder."""
    words = (name or "").split()
    if len(words) in (4, 5) and words[0] == "durable_job" and words[2].isdigit():
        holder: Holder = {"pid": int(words[2]), "command": words[1], "sinceUtc": words[3]}
        if len(words) == 5:
            holder["host"] = words[4]
        return holder
    return {"pid": None, "command": "unknown", "sinceUtc": None}


###############################################################################
# 2. Migrations: the SQL files, in order
###############################################################################


# A store's schema, as numbered, append-only migrations: SQL files in durable_job_team/migrations/, one a migration,
# applied in this order (the first four before LangGraph's own tables exist, the rest once PostgresSaver.setup() has
# made them). A released file never changes (tests/test_house.py hashes each): a change is a new file, named here.
STORE_MIGRATIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
PG_MIGRATIONS = ("m001_jobs", "m002_journal", "m003_identity", "m005_links")
PG_SETUP_MIGRATIONS = (
    "m004_policies",
    "m006_link_policies",
    "m007_notify",
    "m008_finished_mark",
    "m009_retention",
    "m010_creation_order",
    "m011_hostile_roles",
    "m012_passkeys",
    "m013_holds",
    "m014_outbox",
    "m015_sealed",
    "m016_floor",
    "m017_changed_one",
    "m019_current_key",
    "m020_outbox_stamped",
    "m021_holds_links",
    "m022_passkey_origin",
    "m023_engine_seal",
    "m024_rate_limited",
    "m025_limits",
    "m026_submitted",
)
# A store job's engine, read in this order (durable_job.engine_sha256): the core's engine, this file's sections 1 to
# 4, and every migration whole, in name order. A changed byte in any strands the store's jobs in flight; the
# workers, the web app, administration and listings stand outside it.
STORE_ENGINE_PARTS = (
    "durable_job.py",
    "durable_job_team/store.py",
    *(f"durable_job_team/migrations/{name}.sql" for name in sorted(PG_MIGRATIONS + PG_SETUP_MIGRATIONS)),
)
STORE_TABLES = (  # every table a store's migrations make (LangGraph's among them), each under row-level security
    "jobs",
    "job_locks",
    "roles",
    "calls",
    "call_events",
    "drafts",
    "outcomes",
    "decisions",
    "receipts",
    "links",
    "_migrations",
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_migrations",
    "prunes",
    "tombstones",
    "passkeys",
    "holds",
    "outbox",
    "sealing",
    "data_keys",
    "retired_keys",
    "limits",
    "slots",
    "slot_waits",
)
NOTIFY_CHANNEL = "durable_job"  # m007_notify: every committed write to a job's rows notifies it, with an empty payload


def sql_statements(text: str) -> list:
    """The statements of a SQL file, split at each `;` outside a quoted string, a dollar-quoted body or a comment."""
    out, start, n, size = [], 0, 0, len(text)
    while n < size:
        if text.startswith("--", n):
            end = text.find("\n", n)
            n = size if end < 0 else end
        elif text[n] == "'":
            n = text.index("'", n + 1) + 1
            while text.startswith("'", n):  # '' inside a string
                n = text.index("'", n + 1) + 1
        elif text[n] == "$" and (tag := re.match(r"\$[A-Za-z_]*\$", text[n:])):
            n = text.index(tag.group(), n + len(tag.group())) + len(tag.group())
        elif text[n] == ";":
            out.append(text[start:n])
            start = n = n + 1
        else:
            n += 1
    out.append(text[start:])
    kept = [re.sub(r"^(\s*--[^\n]*\n)*", "", s).strip() for s in out]
    return [s for s in kept if s]


def store_migrations(names: tuple) -> list:
    """(name, statements) of each named migration file, for apply_migrations."""
    found = []
    for name in names:
        with open(os.path.join(STORE_MIGRATIONS_DIR, f"{name}.sql"), encoding="utf-8") as fh:
            found.append((name, tuple(sql_statements(fh.read()))))
    return found


###############################################################################
# 3. The journal on a psycopg connection, and LangGraph's checkpoint rows
###############################################################################


PSYCOPG = Dialect(STORE_SCHEMA, lambda name, n: f"%({name})s", "seq", "BEGIN")


# The job's lock checked by a statement that fails (SQLSTATE LOCK_LOST) when the lock's transaction is gone
# (m016_floor): sent first in a writer's transaction, or before a checkpoint's writes, it aborts what follows it.
LOCK_CHECK = "SELECT durable_job.lock_stands(%(xact)s)"
LOCK_LOST = "DJ001"
# A pipelined change_one (m017_changed_one): the statement counts the rows it changed, and fails (SQLSTATE ROW_UNCHANGED)
# unless it was one, so it need not be waited for.
CHANGED_ONE = "WITH changed AS ({statement} RETURNING 1) SELECT durable_job.changed_one((SELECT pg_catalog.count(*) FROM changed))"
ROW_UNCHANGED = "DJ002"


class PgJournal(Journal):
    """A job's journal in a store, on a psycopg connection (a writer's, or the read connection).

    Any database error becomes the store's StateError (`on_error`): a dropped
    connection has lost the job's lock with it, and is never reopened.

    Note to maintainers: a writer under the job's lock keeps its connection in psycopg's pipeline mode (`pipe`, from
    PgLock.take, or from the seal of the job a start makes, to the lock's end). A statement whose answer is read (rows,
    a count) is sent with everything queued before it and waited for (one round trip); one whose answer nobody reads
    (`send`: BEGIN, the lock's check, a link, an event, a notification, a new call's row) only joins the queue. So a
    transaction costs the round trips of what it reads, plus its COMMIT's, which is always awaited: the server runs the
    queue in order, and the first statement that fails (a policy's refusal, the lock's check) aborts the transaction
    and is raised at the next answer awaited, where the act's ROLLBACK follows. No COMMIT is ever queued behind a
    failure the act has not seen: a failed queue leaves the transaction aborted, and its COMMIT is then a ROLLBACK.
    """

    dialect = PSYCOPG
    writing = False  # a writer's open transaction has queued a write (send)
    wrote = False  # and one such transaction has committed (a start's since its seal: see PgLock.flush_seal)

    def __init__(self, conn, job_id: str, on_error, *, owns: bool = True, **parts):
        super().__init__(job_id, **parts)
        self.conn, self.on_error, self.owns = conn, on_error, owns
        self.lock_pid: int | None = None  # a writer's: the backend whose open transaction holds the job's lock row
        self.lock_xid8: str | None = None  # and that transaction's full id (pg_current_xact_id: with its epoch)
        self.pipe = None  # a writer's psycopg Pipeline while it holds the lock (see the note above)
        self.unpipe: Callable[[], Any] | None = None

    def lock_check(self) -> dict:
        """LOCK_CHECK's values: this writer's lock (its transaction's full id)."""
        return {"xact": str(self.lock_xid8)}

    def check_lock(self, *, queued: bool = False) -> None:
        """A writer's LOCK_CHECK: its answer awaited, or (queued, when pipelined) raised with the next answer awaited."""
        if self.lock_pid is not None:
            check = self.lock_check()
            (self.send if queued else self.execute)(LOCK_CHECK, list(check), list(check.values()))

    def lock_lost(self) -> StateError:
        return self.on_error(RuntimeError("the connection that held the job's lock is gone"))

    def began(self) -> None:
        """A writer writes only while its lock stands: the lock connection's transaction, seen from this connection."""
        self.check_lock()

    def open_transaction(self) -> None:
        """A writer's BEGIN and its lock's check, queued: answered with the transaction's first read, or its COMMIT."""
        if self.pipe is None:
            return super().open_transaction()
        self.send("BEGIN", [], [])
        self.check_lock(queued=True)
        return None

    def failed(self, exc: Exception) -> Exception:
        """A database error as the store's StateError (the lock's check as the lost lock); anything else as it is."""
        psycopg = sys.modules.get("psycopg")
        if psycopg is None or not isinstance(exc, psycopg.Error):
            return exc
        cause: BaseException | None = exc
        while cause is not None:  # a pipeline's later statements fail as "pipeline aborted", the check's failure before them
            if getattr(cause, "sqlstate", None) == LOCK_LOST:
                return self.lock_lost()
            if getattr(cause, "sqlstate", None) == ROW_UNCHANGED:
                return RowUnchanged(str(cause).split("\n")[0])
            cause = cause.__context__
        return self.on_error(exc)

    def store_slot(self, endpoint: str, model: str, tokens: int) -> float | None:
        """The call's slot under the store's limits, in the claim's transaction (m025_limits: take_slot); one round trip."""
        row = self.row(
            "SELECT durable_job.take_slot({p.endpoint}, {p.model}, {p.tokens}, {p.job_id}) AS wait",
            endpoint=endpoint,
            model=model,
            tokens=tokens,
            job_id=self.job_id,
        )
        return float(row["wait"]) if row is not None else 0.0

    def slot_taken(self, endpoint: str, model: str, tokens: int) -> tuple[str, dict]:
        """store_slot's take_slot, as an expression a read evaluates (attempts_so_far: no round trip of its own)."""
        values = {"slot_endpoint": endpoint, "slot_model": model, "slot_tokens": tokens}
        return "durable_job.take_slot({p.slot_endpoint}, {p.slot_model}, {p.slot_tokens}, {p.job_id})", values

    def for_job(self, job_id: str, **parts) -> PgJournal:
        """The same connection, scoped to another job (a listing reads every job on one connection), made with `parts`
        (Journal's: its secrets are this one's)."""
        return PgJournal(self.conn, job_id, self.on_error, owns=False, secrets=self.secrets, **parts)

    def execute(self, sql: str, names: list, values: list) -> tuple[list[dict], int]:
        try:
            cursor = self.conn.execute(sql, dict(zip(names, values)) if names else None)
            if self.pipe is not None:
                self.pipe.sync()  # this statement's answer, and every queued one's before it
            return (cursor.fetchall() if cursor.description else []), cursor.rowcount
        except Exception as exc:
            raise self.failed(exc) from None

    def rows_together(self, *reads: tuple[str, dict], last: bool = False) -> list[list[dict]]:
        """Pipelined (a writer under the job's lock), the reads sent together and their answers awaited once; `last`: with
        the pipeline's end (its Sync), so the lock's end sends none of its own (what follows, if anything, is not pipelined)."""
        if self.pipe is None:
            return super().rows_together(*reads)
        with self.guard:
            cursors = []
            try:
                for template, params in reads:
                    sql, names, values = self.statement(template, params)
                    cursors.append(self.conn.execute(sql, dict(zip(names, values)) if names else None))
                if last:
                    unpipe, self.pipe, self.unpipe = cast(Callable[[], Any], self.unpipe), None, None
                    unpipe()
                else:
                    self.pipe.sync()
                found = [cursor.fetchall() if cursor.description else [] for cursor in cursors]
            except Exception as exc:
                raise self.failed(exc) from None
        return [self.opened_rows(template, rows) for (template, _), rows in zip(reads, found)]

    def send(self, sql: str, names: list, values: list) -> None:
        """Queued when pipelined (see the note above), else run at once."""
        if self.pipe is None:
            self.execute(sql, names, values)
            return
        try:
            self.conn.execute(sql, dict(zip(names, values)) if names else None)
        except Exception as exc:
            raise self.failed(exc) from None
        if sql != "BEGIN" and sql != LOCK_CHECK:
            self.writing = True

    def change_one(self, template: str, **params) -> None:
        """Pipelined, sent as CHANGED_ONE: its count is checked where it runs, and a failure comes with the next answer."""
        if self.pipe is None:
            super().change_one(template, **params)
            return
        with self.transaction():
            self.run(CHANGED_ONE.format(statement=template), params, answer=False)

    def commit(self) -> None:
        """COMMIT, or (a queued statement failed: the transaction is aborted) ROLLBACK and the failure raised."""
        writing, self.writing = self.writing, False
        try:
            self.execute("COMMIT", [], [])
        except BaseException:
            self.rollback()
            raise
        self.wrote = self.wrote or writing

    def rollback(self) -> None:
        """ROLLBACK; when pipelined, a queued statement's failure (already the act's reason to roll back) is let go.

        Through psycopg's own rollback(), not a ROLLBACK statement: psycopg forgets its prepared statements at a
        ROLLBACK, and only its rollback() also drops them on the server at once. Pipelined, a ROLLBACK sent as SQL left
        that DEALLOCATE ALL queued behind the next statement's preparation, which it then removed: every later use of
        that statement failed (`prepared statement "_pg3_N" does not exist`), in every run of the job after an act
        rolled back (an item out of attempts)."""
        if self.pipe is not None:
            try:
                self.pipe.sync()
            except Exception:
                pass
        if self.conn.closed:
            return
        try:
            self.conn.rollback()
        except Exception as exc:
            raise self.failed(exc) from None

    def locked(self, pid: int, xid8: str, head: dict, *, since_seal: bool = False) -> None:
        """The job's lock taken (PgLock.take): by backend `pid`'s transaction `xid8`, which each of this writer's
        transactions checks first; the chain's `head` as read under the lock (another writer may have added links since
        this one last wrote); `since_seal`: a start's, whose seal did not wait for the disk, counts its writes from
        here (PgLock.flush_seal); this connection pipelined from here."""
        self.lock_pid, self.lock_xid8 = pid, xid8
        self.forget()
        self.keep_head(head)
        if since_seal:
            self.wrote = False
        self.pipelined()

    def pipelined(self) -> None:
        """Under the job's lock (and while a start seals its job): this connection in pipeline mode until unpipelined
        (see the note above)."""
        if self.pipe is not None:
            return
        stack = contextlib.ExitStack()
        self.pipe = stack.enter_context(self.conn.pipeline())
        self.unpipe = stack.close

    def unpipelined(self) -> None:
        unpipe, self.pipe, self.unpipe = self.unpipe, None, None
        if unpipe is not None and not self.conn.closed:
            try:
                unpipe()
            except Exception:
                pass  # a broken connection is discarded by whoever gives it back

    def sole_writer(self) -> bool:
        return self.lock_pid is not None  # the job's lock keeps every other writer out while its transaction stands

    def alive(self) -> None:
        """Raise unless the connection and the job's lock are still there (one statement: the lock's check, or a ping);
        pipelined, the check is queued, and raises with the next answer awaited (the command's next read or write)."""
        if self.lock_pid is None:
            self.rows("SELECT 1 AS up")
        else:
            self.check_lock(queued=True)  # send: at once when not pipelined

    def close(self) -> None:
        if self.owns:
            self.conn.close()


def flush_queued(pipe, exc_type, exc, tb) -> bool:
    """A saver's queued writes (put_writes) sent as its pipeline ends: after a run that ended well, by the pipeline's own
    end (its one round trip), which raises their refusal; after one that failed, here, so that failure is the one told
    (the queued writes, behind their lock's check, are aborted with it) and psycopg logs nothing beside it."""
    if exc_type is None:
        return False
    try:
        pipe.sync()
    except need_psycopg().Error:
        pass
    return False


class PgCheckpointRows(CheckpointRows):
    """PostgresSaver's tables in a store, read for one thread or many at once (three queries, whatever their number).

    Simple channel values sit inline in the checkpoint's JSON, lists and dicts in checkpoint_blobs.
    """

    def __init__(self, journal: PgJournal, where: str, threads: list[str]):
        self.journal, self.where = journal, where
        self.cipher = lambda: journal.cipher  # for an encrypted value: the journal's, found when first needed
        self.latest_of: dict[str, tuple[str, dict]] = {}
        self.writes_of: dict[tuple[str, str], list] = {}
        if threads:
            self.load(threads)

    def load(self, threads: list[str]) -> None:
        wanted: dict[str, dict[str, str]] = {}  # thread → {channel: version} of values kept as blobs
        for row in self.journal.rows(
            "SELECT DISTINCT ON (thread_id) thread_id, checkpoint_id, checkpoint FROM durable_job.checkpoints "
            "WHERE thread_id = ANY({p.threads}) AND checkpoint_ns = {p.ns} ORDER BY thread_id, checkpoint_id DESC",
            threads=threads,
            ns=LangGraphRows.namespace,
        ):
            checkpoint = row["checkpoint"] if isinstance(row["checkpoint"], dict) else json.loads(row["checkpoint"])
            inline, versions = LangGraphRows.inline_values(checkpoint), LangGraphRows.versions(checkpoint)
            self.latest_of[row["thread_id"]] = (row["checkpoint_id"], {key: inline[key] for key in STATE_KEYS if key in inline})
            wanted[row["thread_id"]] = {key: str(versions[key]) for key in STATE_KEYS if key not in inline and key in versions}
        pairs = [(thread, channel, version) for thread, channels in wanted.items() for channel, version in channels.items()]
        if pairs:
            for blob in self.journal.rows(
                "SELECT b.thread_id, b.channel, b.type, b.blob FROM durable_job.checkpoint_blobs b "
                "JOIN unnest({p.threads}::text[], {p.channels}::text[], {p.versions}::text[]) AS w(thread_id, channel, version) "
                "ON b.thread_id = w.thread_id AND b.channel = w.channel AND b.version = w.version WHERE b.checkpoint_ns = {p.ns}",
                threads=[t for t, _, _ in pairs],
                channels=[c for _, c, _ in pairs],
                versions=[v for _, _, v in pairs],
                ns=LangGraphRows.namespace,
            ):
                if LangGraphRows.holds_value(blob):
                    value = decode_checkpoint(*opened_checkpoint(self.cipher, blob["type"], bytes(blob["blob"])), self.where)
                    self.latest_of[blob["thread_id"]][1][blob["channel"]] = plain_value(value, blob["channel"], self.where)
        latest = [(thread, cid) for thread, (cid, _) in self.latest_of.items()]
        for w in self.journal.rows(
            "SELECT w.thread_id, w.checkpoint_id, w.channel, w.type, w.blob FROM durable_job.checkpoint_writes w "
            "JOIN unnest({p.threads}::text[], {p.checkpoints}::text[]) AS c(thread_id, checkpoint_id) "
            "ON w.thread_id = c.thread_id AND w.checkpoint_id = c.checkpoint_id "
            "WHERE w.checkpoint_ns = {p.ns} AND w.channel = ANY({p.channels}) "
            "ORDER BY w.thread_id, w.channel = 'final' DESC, w.task_id DESC",
            threads=[t for t, _ in latest],
            checkpoints=[c for _, c in latest],
            ns=LangGraphRows.namespace,
            channels=list(LangGraphRows.saved_channels),
        ):
            saved = (w["channel"], *opened_checkpoint(self.cipher, w["type"], w["blob"]))
            self.writes_of.setdefault((w["thread_id"], w["checkpoint_id"]), []).append(saved)

    def latest(self, thread_id: str) -> tuple[str, dict] | None:
        return self.latest_of.get(thread_id)

    def writes(self, thread_id: str, checkpoint_id: str) -> list[tuple[str, str, bytes | None]]:
        return self.writes_of.get((thread_id, checkpoint_id), [])


###############################################################################
# 4. The store: its lock, PgStore and its schema set up
###############################################################################


def lock_holders(db: PgJournal) -> dict[str, Holder]:
    """Who holds each job's lock row now, by jobId, among the jobs this role may see (none waits for it).

    A held row's xmax is the holder's open transaction: pg_locks names its backend, pg_stat_activity the
    role that authenticated it; the holder's own application_name adds its command, pid, start and host.
    """
    rows = db.rows(
        "SELECT k.job_id, a.usename AS role, a.application_name, l.pid AS backend FROM durable_job.job_locks k "
        "JOIN pg_catalog.pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = k.xmax AND l.mode = 'ExclusiveLock' AND l.granted "
        "LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid"
    )
    return {r["job_id"]: {**parse_holder_name(r["application_name"]), "role": r["role"] or "unknown"} for r in rows}


def holder_words(holder: Holder | None) -> str:
    """ " (resume by role alice on host h, pid 123, since …)": who holds a job busy, as a refusal names them."""
    if not holder:
        return ""
    where = f" on host {holder['host']}" if holder.get("host") else ""
    return f" ({holder['command']} by role {holder.get('role', 'unknown')}{where}, pid {holder['pid']}, since {holder['sinceUtc']})"


class PgConnections:
    """A process's idle connections to one store, one of each kind, shared by an opened store and every store it names
    (for_manifest, for_job): a program that opens a store once (a worker, a caller of the command API) logs in once
    for each kind, not once a job. Kinds: "work" (the reads and the journal's writes), "lock" (the job's lock, its
    transaction ended before it comes back), "checkpoints" and "checkpoints unsynced" (LangGraph's saver).

    A connection comes back only when it is idle and unbroken, and is pinged before it is used again when the server
    sent it anything meanwhile (heard_from), or renamed (one round trip either way): after the database restarts, or
    ends the session, the next command logs in anew. Each kind has at most one idle connection (a second given back
    is closed); a caller always has the one it took to itself.
    """

    def __init__(self) -> None:
        self.guard = threading.Lock()  # a web app's requests take and give from several threads
        self.idle: dict = {}  # kind -> a psycopg connection
        self.schema_ready = False  # once a command found the store's schema whole, it stays so for this process
        self.principal: str | None = None  # the role its connections log in as (session_user), once read

    def take(self, kind: str, name: str, *, named: bool = True):
        """An idle connection of `kind` that still answers, named `name` (what holders and pg_stat_activity show), or None;
        `named` False: the caller names it in its own first round trip (PgLock.take), so it is only pinged if need be."""
        with self.guard:
            conn = self.idle.pop(kind, None)
        if conn is None:
            return None
        try:
            if conn.info.parameter_status("application_name") == name or not named:
                if self.heard_from(conn):  # else nothing came while it was idle: it answers as it did (no round trip)
                    conn.execute("SELECT 1")
            else:
                conn.execute("SELECT pg_catalog.set_config('application_name', %s, false)", (name,))
            return conn
        except Exception:
            self.discard(conn)
            return None

    @staticmethod
    def heard_from(conn) -> bool:
        """Whether the server sent anything to an idle connection: a server that stopped or ended the session (restart,
        pg_terminate_backend) says so and closes it, which a ping then finds; a session nobody ended sends nothing."""
        import select

        return bool(select.select([conn.fileno()], [], [], 0)[0])

    def give(self, kind: str, conn) -> None:
        """Keep a connection a caller is done with (closed instead when it is broken or inside a transaction)."""
        import psycopg

        with self.guard:
            keep = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE and kind not in self.idle
            if keep:
                self.idle[kind] = conn
        if not keep:
            self.discard(conn)

    @staticmethod
    def discard(conn) -> None:
        try:
            conn.close()
        except Exception:
            pass

    def close(self) -> None:
        with self.guard:
            idle, self.idle = self.idle, {}
        for conn in idle.values():
            self.discard(conn)


def insert_job_row(writer: PgJournal, job: Job, kept: bytes, data: list, reviewers: list) -> None:
    """A new job's row and its lock's row, sent with the seal's other statements (no round trip of their own): the first
    fails (SQLSTATE ROW_UNCHANGED, m017_changed_one) unless the job's row is new, which aborts the seal's transaction.
    The bytes go in binary format (%b): psycopg's text form of a bytea array is escaped twice when the session runs
    with standard_conforming_strings off, and the store would keep other bytes."""
    row = {
        "job": job["jobId"],
        "thread": job["threadId"],
        "record": json.dumps(job, indent=2) + "\n",
        "manifest": kept,
        "digest": job["manifestSha256"],
        "sources": data,
        "created": job["createdAtUtc"],
        "reviewers": reviewers,
    }
    writer.send(
        "WITH made AS (INSERT INTO durable_job.jobs (job_id, thread_id, record_json, manifest, manifest_sha256, sources, "
        "created_utc, reviewers, owner) VALUES (%(job)s, %(thread)s, %(record)s, %(manifest)b, %(digest)s, %(sources)b, "
        "%(created)s, %(reviewers)s, session_user) ON CONFLICT (job_id) DO NOTHING RETURNING 1) "
        "SELECT durable_job.changed_one((SELECT pg_catalog.count(*) FROM made))",
        list(row),
        list(row.values()),
    )
    # its own statement: the lock row's policy reads the job's row, which a statement's own CTE would not show it
    writer.send(
        "INSERT INTO durable_job.job_locks (job_id, thread_id) VALUES (%(job)s, %(thread)s)", ["job", "thread"], [row["job"], row["thread"]]
    )


class PgLock:
    """The job's writers' lock: its job_locks row, locked FOR UPDATE NOWAIT by a transaction left open on a
    connection of its own for the writing command's whole run.

    Only a role the policies let act on the job can lock its row (it must be able to UPDATE it), so a role
    that may not touch a job cannot hold it busy, as it could with an advisory lock's key seen in pg_locks.
    The server ends the transaction, freeing the row, when the process dies (TCP keepalives bound a lost
    host). The journal's writes, on another connection, check before each transaction that the lock's
    transaction still stands (LOCK_CHECK, first in each). A `start` of a new job locks it as soon as its row is sealed.
    """

    def __init__(self, store: PgRunStore, command: str):
        self.store, self.command = store, command
        self.conn = None
        self.seal_lsn: str | None = None  # a start's: the WAL's end after its seal's commit, on disk before the lock ends

    def __enter__(self):
        store = self.store
        try:
            conn = store.work_connection(f"durable_job {self.command} journal {os.getpid()}")
            journal = PgJournal(conn, store.job_id, store.failure, owns=False, secrets=store.secrets)  # before the writer
            store.ensure_schema(journal)
            if store.pool.principal is None:  # every connection of the pool logs in with the store's URL: one role
                store.pool.principal = journal.rows("SELECT session_user AS me")[0]["me"]
            # a start or submit takes the lock only once its own row is sealed (seal_job): one that found the job
            # sealed meanwhile and took it here would hold it from the command sealing it, then give up, and neither would run
            if self.command in ("start", "submit"):
                store.writer = store.writer_of(None)  # its job's own writer is made when its row is (seal_job)
            else:
                job = store.load_job(journal)  # refuses a job this role cannot see as one that does not exist
                store.writer = store.writer_of(job)
                self.take()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        store.locks = self
        return self

    def take(self) -> None:
        """Lock the job's row on a new connection, or refuse naming who holds it."""
        import psycopg

        store, writer = self.store, cast(PgJournal, self.store.writer)
        name = holder_name(self.command)
        self.conn = conn = store.pooled("lock", name, named=False)
        conn.prepare_threshold = None  # nothing prepared, so its ROLLBACK needs no DEALLOCATE ALL after it (a round trip)
        failure: psycopg.Error | None = None
        try:
            with conn.pipeline():  # one round trip: the holder's name, the lock, where the job's chain ends under it, the WAL's end
                try:
                    conn.execute("BEGIN")
                    if conn.info.parameter_status("application_name") != name:  # a pooled one: named for the lock's transaction
                        conn.execute("SELECT pg_catalog.set_config('application_name', %s, true)", (name,))
                    locked = conn.execute(
                        "SELECT pg_backend_pid() AS pid, pg_current_xact_id()::text AS xid8, "
                        "pg_catalog.pg_current_wal_insert_lsn()::text AS lsn FROM durable_job.job_locks "
                        "WHERE job_id = %s FOR UPDATE NOWAIT",
                        (store.job_id,),
                    )
                    newest = conn.execute(
                        "SELECT seq, link_sha256 FROM durable_job.links WHERE job_id = %s ORDER BY seq DESC LIMIT 1", (store.job_id,)
                    )
                except psycopg.Error as exc:  # an answer read as it arrived: the pipeline then ends without psycopg's
                    failure = exc  # "error ignored terminating" warning on stderr beside the one HOLD line
        except psycopg.Error as exc:
            failure = failure or exc
        try:
            if failure is not None:
                raise failure
            row, last = locked.fetchone(), newest.fetchone()
        except psycopg.errors.LockNotAvailable:
            raise BusyError(
                f"Job {store.job_id} busy: another durable_job command{holder_words(store.holder(writer))} holds it in "
                f"{store.public}; wait for it to finish, then {BusyError.AGAIN}"
            ) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StateError(
                f"Role {writer.principal} may not write job {store.job_id} in {store.public} ({clip(redact(exc, store.secrets), 120)}): "
                f"its owner, its reviewers and the store's workers may; ask the store's administrator"
            ) from None
        except psycopg.Error as exc:
            raise store.failure(exc) from None
        if row is None:
            raise StateError(
                f"Job {store.job_id} in {store.public} has no lock row; run `{command_line(store.program, 'migrate', ['--store', store.public])}`"
            )
        head = {"seq": 0, "sha256": GENESIS} if last is None else {"seq": int(last["seq"]), "sha256": last["link_sha256"]}
        writer.locked(row["pid"], row["xid8"], head, since_seal=self.command == "start")
        if head["seq"] == 1:  # a chain of its seal's link alone (a start's job): no item's result is linked yet
            writer.keep_results_linked({})
        if self.command == "start":  # a start's seal committed without waiting for the disk (seal_job): where it ends
            self.seal_lsn = row["lsn"]

    def __exit__(self, *exc_info):
        store = self.store
        if store.writer is not None:
            store.writer.unpipelined()
            if store.writer.wrote:  # a write committed after the seal, waiting for the disk: the seal is on it too
                self.seal_lsn = None
        store.writer, store.locks = None, None
        conn, self.conn = self.conn, None
        if conn is not None:
            sealing = self.seal_lsn is not None
            try:
                conn.execute("ROLLBACK")  # ending the lock's transaction frees the row (closing the session would too)
                self.flush_seal(conn)
            except Exception as exc:
                PgConnections.discard(conn)
                if sealing and not any(exc_info):  # a start that ran well, its seal perhaps not on disk: not a success
                    raise store.failure(exc) from None
                return
            store.pool.give("lock", conn)

    def flush_seal(self, conn) -> None:
        """A start's seal on disk before the command ends. It committed without waiting (seal_job), so the first
        synchronous commit of a write after it (the first call's pending row, always before its request) flushed it
        with itself (the WAL is written in order); a start whose writer committed no write since asks where the disk
        stands (one round trip), and, short of the seal, commits an empty transaction that waits for it."""
        lsn, self.seal_lsn = self.seal_lsn, None
        if lsn is None:
            return
        flushed = conn.execute("SELECT pg_catalog.pg_current_wal_flush_lsn() >= %s::pg_lsn AS done", (lsn,)).fetchone()
        if not flushed["done"]:
            with conn.transaction():
                conn.execute("SELECT pg_catalog.pg_current_xact_id()")  # an id, so its commit is written and awaited


class PgRunStore(Store):
    """A job in a shared PostgreSQL store (`--store URL --job ID`), as its run reaches it (PgStore, below the engine's
    mark, adds administration).

    Who may do what to a job is the database's to decide (store_policies): this class only says so first.

    A `jobs` row holds the sealed job record, the manifest's bytes and every
    source's bytes, so after `start` no machine needs those files; the journal
    tables hold the job's rows beside other jobs'; LangGraph's PostgresSaver
    keeps the checkpoints (thread id = the job's threadId), all in the schema
    `durable_job`. Writers hold the job's lock row (PgLock); readers never
    wait for it, and write nothing.
    """

    principal_label = "role"
    shared = True
    engine_parts = STORE_ENGINE_PARTS

    def __init__(
        self,
        url: str,
        job_id: str,
        *,
        from_env: bool = False,
        program: str | None = None,
        secrets: Secrets | None = None,
        keys: Keys | None = None,
    ):
        self.secrets = secrets or Secrets()
        self.keys = keys or Keys.given()
        self.secrets.add(address_secrets(url))  # first: whatever goes wrong from here on never shows the password
        check_store_url(url)
        self.url, self.job_id, self.from_env = url, job_id, from_env
        self.program = program or default_program()
        self.public = public_url(url)
        self.writer: PgJournal | None = None  # the locked journal while a writing command runs
        self.locks: PgLock | None = None  # and the lock it holds
        self.reader: PgJournal | None = None  # the journal that reads for status, inspect, jobs (on work_conn, or another store's)
        self.work_conn = None  # this store's connection for reads and the journal's writes, from the pool
        self.pool = PgConnections()  # shared with every store this one names (named_store)
        self.row: dict | None = None
        self.checkpoint_modes: contextlib.ExitStack | None = None  # while a checkpoint connection is out: its pipeline's exit

    def for_manifest(self, manifest: Manifest) -> Self:
        if self.job_id and self.job_id != manifest["jobId"]:
            raise UsageError(
                f"--job {self.job_id!r} is not the manifest's jobId {manifest['jobId']!r}; drop --job (start takes the manifest's)"
            )
        return self if self.job_id else self.named_store(manifest["jobId"])

    def for_job(self, job_id: str) -> Self:
        """The same store, naming another job: its reads go through this store's read connection, which
        closing this store closes (so a caller that opened one store has one thing to close)."""
        other = self.named_store(job_id)
        other.reader = self.db().for_job(job_id, cipher_of=other.cipher)
        return other

    def named_store(self, job_id: str) -> Self:
        """This store naming job `job_id`, sharing this one's idle connections (closing it gives back what it took)."""
        other = type(self)(self.url, job_id, from_env=self.from_env, program=self.program, secrets=self.secrets, keys=self.keys)
        other.pool = self.pool
        other.owns_pool = False
        return other

    def address(self) -> list:
        if self.from_env:  # DURABLE_JOB_STORE supplies the URL (and its password) on every machine
            return ["--job", self.job_id]
        return ["--store", self.public, "--job", self.job_id]

    def store_address(self) -> list:
        """The store's own flags, without a job (what `work` and `jobs` take)."""
        return [] if self.from_env else ["--store", self.public]

    def where(self) -> str:
        return f"store {self.public}"

    def receipt_location(self) -> str:
        return f"durable_job.receipts row of job {self.job_id} in {self.public}"

    def holds_path(self, path: str) -> bool:
        return False  # nothing of the job lies in a folder here

    def new_job_hint(self) -> str:
        return "a jobId names one job in the store: give this request a new jobId in its manifest"

    def sealed_manifest(self, job: Job) -> Manifest | None:
        return self.sealed_copies(job)[0]

    def sealed_copies(self, job: Job) -> tuple:
        """The store's own copies (so a page made on any machine shows the sources), or what still matches."""
        try:
            return self.stored_copies(job)
        except JobError:
            return None, {}

    def output_fields(self) -> dict:
        return {"store": self.public}

    # -- connections -----------------------------------------------------------

    def failure(self, exc) -> StateError:
        if "permission denied for schema durable_job" in str(exc):  # a role that may connect but holds no grant
            return self.ungranted()
        # a lost connection: no sqlstate (the client saw it end), class 08 (a connection error) or 57P (the server stopping)
        sqlstate = getattr(exc, "sqlstate", None)
        lost = isinstance(exc, need_psycopg().OperationalError) and (sqlstate is None or sqlstate.startswith(("08", "57P")))
        what = "cannot be reached: its connection was lost" if lost else "failed"
        return StateError(
            f"The store {self.public} {what} ({clip(redact(' '.join(str(exc).split()), self.secrets), 240)}); a lost connection "
            f"loses the job's lock and is never reopened: nothing is retried: run `{self.suggest('status')}`, "
            f"then `{self.suggest('resume')}` once the store is reachable"
        )

    def ungranted(self) -> StateError:
        """A role the store's schema is not granted to: no status or resume helps; its administrator grants it."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            role = conninfo_to_dict(self.url).get("user") or os.environ.get("PGUSER")
        except Exception:  # psycopg names what is wrong with the URL elsewhere
            role = None
        who = f"Role {role}" if role else "This role"
        return StateError(
            f"{who} may not see the schema durable_job of the store {self.public}: no role is granted it but by the store's "
            f"owner (its administrator), with `{self.program} migrate --store URL --grant {role or 'ROLE'}` "
            "(the GRANTs docs/team-store.md names); ask them"
        )

    def connect(self, name: str, *, writer: bool = False, dict_rows: bool = True, reader: bool = False):
        """A new autocommit psycopg connection with dict rows; the lock's own has TCP keepalives so a lost host frees the lock;
        a reader's has READER_OPTIONS unless the URL names options of its own."""
        psycopg = need_psycopg()
        from psycopg.conninfo import conninfo_to_dict
        from psycopg.rows import dict_row

        extra: dict = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3} if writer else {}
        if reader:
            try:
                extra.update({} if "options" in conninfo_to_dict(self.url) else {"options": READER_OPTIONS})
            except psycopg.Error:
                pass  # psycopg.connect names what is wrong with the URL
        try:
            return psycopg.connect(
                self.url,
                autocommit=True,
                row_factory=dict_row,
                prepare_threshold=0,
                application_name=name[:63],
                connect_timeout=10,
                **extra,
            )
        except psycopg.Error as exc:
            raise self.unreachable(exc) from None

    def unreachable(self, exc) -> StateError:
        said = " ".join(str(exc).split())
        return StateError(
            f"The store {self.public} cannot be reached ({clip(redact(said, self.secrets), 240)}); {connect_cause(self.url, said)}, "
            f"then run the command again"
        )

    owns_pool = True  # a store open_store made closes the pool; a store it named gives its connection back to it

    def pooled(self, kind: str, name: str, *, named: bool = True):
        """A connection of `kind` (see PgConnections) from the pool (`named`: see PgConnections.take), or a new one."""
        conn = self.pool.take(kind, name, named=named)
        return conn if conn is not None else self.connect(name, writer=kind in ("work", "lock"), reader=kind == "work")

    def work_connection(self, name: str):
        """This store's one connection for reads and the journal's writes (taken from the pool at first use, named `name`)."""
        if self.work_conn is None:
            self.work_conn = self.pooled("work", name)
        return self.work_conn

    def close(self) -> None:
        self.reader = None
        conn, self.work_conn = self.work_conn, None
        if conn is not None:
            self.pool.give("work", conn)
        if self.owns_pool:
            self.pool.close()

    def db(self) -> PgJournal:
        """The writer's journal while locked, else the read journal (on this store's work connection)."""
        if self.writer is not None:
            return self.writer
        if self.reader is None:
            conn = self.work_connection(f"durable_job read {os.getpid()}")
            self.reader = PgJournal(conn, self.job_id, self.failure, owns=False, secrets=self.secrets, cipher_of=self.cipher)
        return self.reader

    def writer_of(self, job: Job | None) -> PgJournal:
        """The journal a writing command writes through, on this store's work connection, made whole for the job it locks
        (job None: a start's, which writes only the job's row until seal_job makes the job's own)."""
        writes = Writes() if job is None else job_writes(job, lambda: self.people(job))
        conn = self.work_connection(f"durable_job journal {os.getpid()}")
        parts = {"principal": self.pool.principal or "", "secrets": self.secrets, "cipher_of": self.cipher, "writes": writes}
        return PgJournal(conn, self.job_id, self.failure, owns=False, **parts)

    def schema_state(self, db: PgJournal) -> tuple[set, int | None]:
        """(journal migrations applied, highest checkpoint migration) in the store, ({}, None) before setup."""
        row = db.rows(
            "SELECT to_regclass('durable_job._migrations') IS NOT NULL AS journal, "
            "to_regclass('durable_job.checkpoint_migrations') IS NOT NULL AS checkpoints"
        )[0]
        done = {r["name"] for r in db.rows("SELECT name FROM durable_job._migrations")} if row["journal"] else set()
        highest = db.rows("SELECT max(v) AS v FROM durable_job.checkpoint_migrations")[0]["v"] if row["checkpoints"] else None
        return done, highest

    def ready(self, db: PgJournal) -> bool:
        done, highest = self.schema_state(db)
        names = set(PG_MIGRATIONS + PG_SETUP_MIGRATIONS)
        return done >= names and highest is not None and highest >= CHECKPOINT_MIGRATION

    def ensure_schema(self, journal: PgJournal) -> None:
        """Set the schema up on first use (migrate_store); a role that may not create it is told who can."""
        if not self.pool.schema_ready and not self.ready(journal):
            migrate_store(self, journal.conn)
        self.pool.schema_ready = True

    # -- the sealed job record -------------------------------------------------

    def load_row(self, db: PgJournal | None = None) -> dict | None:
        """The job's row, or None in a store without it, or without the jobs table as this program reads it: a first
        set-up under way elsewhere adds the table (m001) and its owner and reviewers (m003) in two transactions."""
        db = db or self.db()
        made = (
            self.pool.schema_ready
            or db.rows(  # a schema found whole this process has them (ensure_schema)
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass('durable_job.jobs') "
                "AND attname = 'reviewers' AND NOT attisdropped) AS made"
            )[0]["made"]
        )
        if not made:
            return None
        return db.row(
            "SELECT record_json, manifest, manifest_sha256, owner, array_to_json(reviewers) AS reviewers, session_user AS me, "
            "array_to_json(ARRAY(SELECT encode(s, 'hex') FROM unnest(sources) s)) AS sources "
            "FROM durable_job.jobs WHERE job_id = {p.job}",
            job=self.job_id,
        )

    def has_job(self, db: PgJournal | None = None) -> bool:
        return self.load_row(db) is not None

    def load_job(self, db: PgJournal | None = None) -> Job:
        """The job record, from the row this store read already (a job's row is written once) unless db asks for a fresh read."""
        row = self.row = self.row if self.row is not None and db is None else self.load_row(db)
        if row is None:
            raise StateError(
                f"No job {self.job_id!r} in the store {self.public}; check --job (`{self.program} jobs` lists them), "
                f"or run `{self.suggest('start', '--manifest', 'MANIFEST')}` first"
            )
        try:
            job = strict_json(row["record_json"])
        except ValueError as exc:
            raise StateError(
                f"The job record of {self.job_id} in {self.public} is damaged ({clip(exc, 80)}); restore the store from a backup, or {NEW_STORE_JOB}"
            ) from None
        return cast(Job, job)

    def check_seals(self, job: Job, *, mcp: str = "sealed", program: bool = True, unread: bool = False) -> tuple[Manifest, dict[str, str]]:
        """Every seal in the contract's order; the manifest and sources are the store's copies, checked against their sha256."""
        if program:
            check_program_seals(job, NEW_STORE_JOB)
        return self.stored_copies(job, unread)

    def stored_copies(self, job: Job, unread: bool = False) -> tuple[Manifest, dict[str, str]]:
        """The manifest and source texts the job row holds, each checked against its sha256 (unread: verify without the
        job's key leaves those encrypted at rest to its `content` check)."""
        if self.row is None:
            self.load_job()  # reads the row, or refuses naming the job
        row = cast(dict, self.row)
        raw = bytes(row["manifest"])
        if is_encrypted(raw.decode("latin-1")):  # a job encrypted at rest since issue 43: its manifest holds its sources' sha256
            if unread:  # verify without the key: left to the `content` check, as its sources are
                return cast(Manifest, None), {}
            cipher = self.cipher()
            if cipher is None:
                raise EncryptedError(
                    f"job {self.job_id}'s manifest is encrypted at rest, and its data key is not kept: restore the store from a backup"
                )
            raw = cipher.decrypt(raw.decode("ascii"), "jobs", self.job_id, "manifest").encode("utf-8")
        if sha256_hex(raw) != job["manifestSha256"] or row["manifest_sha256"] != job["manifestSha256"]:
            raise SealError(
                f"Manifest bytes changed: the store's copy of job {self.job_id}'s manifest has sha256 {sha256_hex(raw)}, "
                f"the job sealed {job['manifestSha256']}; restore the store from a backup, or {NEW_STORE_JOB}"
            )
        manifest = parse_manifest(raw, f"of job {self.job_id} in the store")
        check_job_matches_manifest(job, manifest, self.cipher() if keyed_sources(job) else None)
        stored = [bytes.fromhex(h) for h in row["sources"] or []]
        if len(stored) != len(manifest["items"]):
            raise source_failure(
                manifest["items"][0]["id"],
                f"the store holds {len(stored)} sources for {len(manifest['items'])} items; restore the store from a backup",
            )
        pairs: Iterator[tuple[Item, bytes]] = zip(manifest["items"], stored)
        if unread:  # verify without the key: the sources it cannot read are left to the `content` check
            pairs = ((item, data) for item, data in pairs if not is_encrypted(bytes(data).decode("latin-1")))
        opened = [(item, opened_source(self.cipher, self.job_id, item["id"], data)) for item, data in pairs]
        texts = {item["id"]: check_source_bytes(item, data) for item, data in opened}
        return manifest, texts

    def prepare_new(self) -> None:
        need_psycopg()

    def sealing_rights(self, writer: PgJournal, job: Job) -> dict:
        """Whether writer may seal job here (a person or the administrator), with what encryption it needs to know: whether
        the id was a deleted job's, the store's encryption mark (its durable_job.sealing row) and current key, and whether this key file was rotated out."""
        kek = self.keys.kek()
        rights = writer.rows(  # the schema is whole (ensure_schema): its encryption mark (m015), its rotated-out keys (m019) with it
            "SELECT durable_job.is_kind('person') OR durable_job.is_admin() AS may, durable_job.tombstoned({p.job}) AS gone, "
            "(SELECT s.since_utc FROM durable_job.sealing s) AS encryption_since, (SELECT s.kek_id FROM durable_job.sealing s) AS current, "
            "(SELECT r.retired_utc FROM durable_job.retired_keys r WHERE r.kek_id = {p.kek}) AS retired, "
            "(SELECT r.replaced_by FROM durable_job.retired_keys r WHERE r.kek_id = {p.kek}) AS replaced_by",
            job=job["jobId"],
            kek=kek.id if kek is not None else None,
        )[0]
        if not rights["may"]:
            raise StateError(
                f"Role {writer.principal} may not seal jobs in {self.public}: only a role granted as a person does "
                f"(a worker runs jobs, nothing else); the store's administrator grants one with "
                f"`{command_line(self.program, 'migrate', ['--store', self.public, '--grant', writer.principal])}`"
            )
        return rights

    def seal_job(self, job: Job, manifest_bytes: bytes, sources: dict) -> Job:
        """Insert the job row once (manifest and source bytes with it, its reviewers, its lock row), then lock it; the
        record as kept. A job encrypted at rest keeps its manifest encrypted, as its sources, and its sources' digests keyed
        (keyed_source): nothing in clear confirms a guess of a source.

        The database makes the sealing role the job's owner. A jobId is store-wide: one another role holds
        (invisible to this one) is refused as taken, whatever the bytes.
        """
        writer = cast(PgJournal, self.writer)
        manifest = parse_manifest(manifest_bytes, job["manifestPath"])
        reviewers = manifest.get("reviewers") or []
        if writer.principal in reviewers:
            raise ManifestError(
                f"Manifest reviewers names {writer.principal}, the role sealing job {job['jobId']}: the reviewers a job names decide it, "
                f"never its owner (four eyes); name other roles, or leave reviewers out for the owner to decide"
            )
        rights = self.sealing_rights(writer, job)
        cipher, wrapped = self.start_encryption(job, rights)
        data = [encrypted_source(cipher, job["jobId"], item["id"], sources[item["id"]]) for item in manifest["items"]]
        kept = manifest_bytes
        if cipher is not None:
            job = cast(Job, {**job, "sources": kept_sources(manifest, cipher)})
            kept = cipher.encrypt(manifest_bytes.decode("utf-8"), "jobs", job["jobId"], "manifest").encode("ascii")
        if rights["gone"]:
            raise taken_error(self.job_id)  # a deleted job's id stays taken (and the database refuses its row anyway)
        writer = self.writer = self.writer_of(job)  # the job's own writer, its links and notifications: its chain begins here
        writer.pipelined()  # the seal's statements go out together, and the lock's run keeps the mode (PgLock.take)
        lock = cast(PgLock, self.locks)
        try:
            with writer.transaction():
                if lock.command == "start":  # flushed by the run's first synchronous commit, or by the lock's end (PgLock)
                    writer.send("SET LOCAL synchronous_commit TO off", [], [])
                insert_job_row(writer, job, kept, data, reviewers)  # queued: a row not new aborts what follows it
                self.cipher_found = [cipher]  # its data key (or that it has none) is known: not read again this command (nor by writer)
                if cipher is not None:  # the data key before the first link: every record of the job is encrypted
                    keep_data_key(writer, cast(Kek, self.keys.kek()), cast(str, wrapped))
                # the chain's first link, in the seal's commit, after no other: a link references its job's row (m005),
                # which this transaction inserts
                append_link(writer, "seal", "jobs", job["jobId"], job, head={"seq": 0, "sha256": GENESIS})
        except RowUnchanged:  # the job's row was there already (the COMMIT was a ROLLBACK)
            if not self.has_job(writer):
                raise taken_error(self.job_id) from None
            raise BusyError(
                f"Job {self.job_id} busy: another durable_job command (start) sealed it in {self.public} meanwhile; run `{self.suggest('resume')}`"
            ) from None
        self.row = {
            "record_json": json.dumps(job),
            "manifest": kept,
            "manifest_sha256": job["manifestSha256"],
            "sources": [d.hex() for d in data],
            "owner": writer.principal,
            "reviewers": reviewers,
            "me": writer.principal,
        }
        lock.take()
        return job

    # -- the writers' lock -----------------------------------------------------

    def lock(self, command: str) -> PgLock:
        return PgLock(self, command)

    def holder(self, db: PgJournal | None = None) -> Holder | None:
        """The writing command holding the job's lock now ({pid, command, sinceUtc, host, role}); never waits."""
        return lock_holders(db or self.db()).get(self.job_id)

    def principal(self) -> str:
        """The role this store's connections authenticated as (session_user: a SET ROLE changes nothing)."""
        if self.writer is not None:
            return self.writer.principal
        if self.row is not None and "me" in self.row:  # read with the job's row
            return self.row["me"]
        return self.db().rows("SELECT session_user AS me")[0]["me"]

    def people(self, job: Job) -> dict:
        row = self.row or self.load_row() or {}
        return {"owner": row.get("owner") or "unknown", "reviewers": list(row.get("reviewers") or [])}

    def check_own_request(self, job: Job) -> None:
        if self.people(job)["owner"] != self.principal():
            raise taken_error(self.job_id)

    def may(self, act: str, job: Job) -> bool:
        return may_by_rule(act, self.people(job), self.principal())

    def check_may(self, command: str, review: str) -> None:
        """The database refuses what a role may not do; this says so first, in words, naming who may."""
        act = COMMAND_ACTS.get(command)
        if act is None:
            return
        writer = cast(PgJournal, self.writer)
        rights = writer.rows(
            "SELECT durable_job.runs({p.job_id}) AS runs, durable_job.tends({p.job_id}) AS tends, "
            "durable_job.decides({p.job_id}) AS decides, durable_job.is_admin() AS admin"
        )[0]
        people = self.people(self.load_job())
        if rights["admin"] and act == "decides":  # the administrator may do anything, but decides by the job's rule alone
            rights["decides"] = may_by_rule("decides", people, writer.principal)
        elif rights["admin"]:
            return
        if rights[act] or (act == "runs" and review == "deciding" and rights["decides"]):
            return  # a reviewer whose decide was cut short finishes recording it with resume
        raise StateError(f"Role {writer.principal} may not {command} job {self.job_id} in {self.public}: {who_may(act, people)}")

    # -- the journal -----------------------------------------------------------

    def check_files(self) -> None:
        """A writer's journal connection must still hold the lock before anything is written."""
        if self.writer is not None:
            self.writer.alive()

    def journal(self, then=None, writes: Writes | None = None) -> PgJournal:
        """The journal on the lock's own connection: every row is written where the lock is held. It was made with its
        lock, for the job it locked (writer_of): `writes` are that job's already."""
        if self.writer is None:
            raise StateError(f"Job {self.job_id}: the journal is written only under the job's lock; run the command again")
        self.cipher(self.writer)  # read once a command, on the writer's connection, before the run's first write
        return self.writer

    def read_journal(self, unread: set | None = None) -> PgJournal:
        """The read journal; with `unread` (verify without the key), one that keeps it becomes this store's reader, so
        that every read of the command adds to it."""
        if unread is not None and self.writer is None:
            conn = self.work_connection(f"durable_job read {os.getpid()}")
            self.reader = PgJournal(conn, self.job_id, self.failure, owns=False, secrets=self.secrets, cipher_of=self.cipher, unread=unread)
        return self.db()

    cipher_found: list | None = None  # [the job's Cipher, or None when it is not encrypted at rest], once read

    def cipher(self, journal: Journal | None = None) -> Cipher | None:
        """The job's Cipher (None: not encrypted at rest), from its data_keys row, read once a command."""
        if self.cipher_found is None:
            db = cast(PgJournal, journal or self.db())
            made = self.pool.schema_ready or db.rows("SELECT to_regclass('durable_job.data_keys') IS NOT NULL AS made")[0]["made"]
            row = (
                db.row(
                    "SELECT kek_id, wrapped, created_utc, shredded_utc, shredded_by FROM durable_job.data_keys WHERE job_id = {p.job}",
                    job=self.job_id,
                )
                if made
                else None
            )
            live = row is not None and not row.get("shredded_utc")
            kek = self.keys.kek() if live else None
            cipher = Cipher.of_row(self.job_id, row, kek, self.public)
            if cipher is not None and cipher.why == "wrong-key":  # which of the two keys a rotation left behind (m019)
                retired = db.rows(
                    "SELECT kek_id, retired_utc, replaced_by FROM durable_job.retired_keys WHERE kek_id IN ({p.job_key}, {p.mine})",
                    job_key=cast(dict, row)["kek_id"],
                    mine=cast(Kek, kek).id,
                )
                rewrap = command_line(self.program, "rotate-key", [*self.store_address(), "--new-key-file", "CURRENT_KEY_FILE"])
                refusal = rotated_refusal(self.job_id, cast(dict, row)["kek_id"], cast(Kek, kek), {r["kek_id"]: r for r in retired}, rewrap)
                cipher = Cipher(self.job_id, None, str(refusal), "wrong-key")
            self.cipher_found = [cipher]
        return self.cipher_found[0]

    def start_encryption(self, job: Job, keys: dict) -> tuple[Cipher | None, str | None]:
        """A new job's Cipher and its wrapped data key when a key is given (or the store encrypts every job, since
        `encryption_since`, its `sealing` row: then refused without one), before anything of the job is written; a key
        rotated out (`retired`, m019), or other than the `current` one an encrypting store names, is refused (the database
        refuses its data key anyway: m019_current_key)."""
        kek = self.keys.kek()
        if kek is None and keys["encryption_since"] is not None:
            raise EncryptedError(f"the store {self.public} encrypts every new job at rest (since {keys['encryption_since']}): {KEY_FIX}")
        if kek is None:
            return None, None
        current = keys["current"] or keys["replaced_by"]
        if keys["retired"] is not None:
            raise EncryptedError(
                f"{kek.where} is key-encryption key {kek.id}, and this key was rotated out at {keys['retired']} in the store "
                f"{self.public}; use the current key file ({current or 'the one rotate-key took'}: the --new-key-file of the last "
                f"rotate-key) as {KEY_FILE_ENV} or --key-file; nothing of job {job['jobId']} was written"
            )
        if keys["current"] is not None and kek.id != keys["current"]:
            raise EncryptedError(
                f"{kek.where} is key-encryption key {kek.id}, not the store {self.public}'s current key {keys['current']}: a new job "
                f"is encrypted only under the current key; use the current key file as {KEY_FILE_ENV} or --key-file; nothing of job "
                f"{job['jobId']} was written"
            )
        cipher, wrapped = new_cipher(kek, job["jobId"])
        return cipher, wrapped

    # -- checkpoints -----------------------------------------------------------

    @contextlib.contextmanager
    def checkpoint_connection(self, synced: bool = True) -> Iterator:
        """From the pool, given back after: its settings are its kind's, made once when it is opened. While it is out,
        a run's saver (checkpointer) may put it in pipeline mode; it leaves that mode before it goes back."""
        kind = "checkpoints" if synced else "checkpoints unsynced"
        conn = self.pool.take(kind, f"durable_job checkpoints {os.getpid()}")
        if conn is None:
            conn = self.connect(f"durable_job checkpoints {os.getpid()}")
            conn.execute("SET search_path TO durable_job")
            if not synced:  # a run of the items: see durable_job.run_graph
                conn.execute("SET synchronous_commit = off")
        try:
            with contextlib.ExitStack() as self.checkpoint_modes:
                yield conn
        except need_psycopg().Error as exc:  # a saver's last writes, sent as its pipeline ends (checkpointer), refused
            raise self.journal().failed(exc) from None
        finally:
            self.checkpoint_modes = None
            self.pool.give(kind, conn)

    def checkpointer(self, conn, fresh: bool = False):
        """PostgresSaver (autocommit, dict rows, prepare_threshold=0) whose every write is refused once the job's lock is
        gone: on a connection in pipeline mode, the lock's check goes out first in the same implicit transaction as the
        saver's statements (one round trip; a lost lock aborts them all); else it is checked just before. `fresh`: a new
        thread's (run_graph), whose first read, LangGraph's as its run begins, finds no checkpoint without a round trip."""
        from langgraph.checkpoint.postgres import PostgresSaver

        if len(PostgresSaver.MIGRATIONS) - 1 != CHECKPOINT_MIGRATION:
            raise StateError(
                f"langgraph-checkpoint-postgres is not the pinned version (its schema reaches {len(PostgresSaver.MIGRATIONS) - 1}, "
                f"this program knows {CHECKPOINT_MIGRATION}): pip install -r {PG_REQUIREMENTS}"
            )
        store = self
        modes = self.checkpoint_modes
        pipe = modes.enter_context(conn.pipeline()) if modes is not None else None
        if modes is not None:
            modes.push(functools.partial(flush_queued, cast(Any, pipe)))  # before the pipeline ends: its last writes

        class LockedSaver(PostgresSaver):
            fencing = threading.Lock()  # a write and its check go out together, whichever thread writes
            deferring = False  # under fencing: a task's writes, queued to go out with the checkpoint that follows them
            nothing_saved = fresh  # a new thread's: LangGraph's first read finds nothing (no round trip to find it)

            def get_tuple(self, config):
                if self.nothing_saved:
                    self.nothing_saved = False
                    return None
                return super().get_tuple(config)

            def checked(self, write, *a, deferred: bool = False, **kw):
                journal = store.journal()
                if self.pipe is None:
                    journal.began()  # refused outside the lock, and once the lock's connection is gone
                    return write(*a, **kw)
                with self.fencing:
                    self.deferring = deferred
                    try:
                        conn.execute(LOCK_CHECK, journal.lock_check())
                        return write(*a, **kw)
                    except need_psycopg().Error as exc:
                        if isinstance(exc, need_psycopg().errors.PipelineAborted):  # a queued write's refusal came first
                            self.recheck(journal)
                        raise journal.failed(exc) from None
                    finally:
                        self.deferring = False

            def recheck(self, journal: PgJournal) -> None:
                """The lock's check alone, after a queued write's statement failed unseen: the lost lock named as such."""
                try:
                    conn.execute(LOCK_CHECK, journal.lock_check())
                    cast(Any, self.pipe).sync()
                except need_psycopg().Error as exc:
                    raise journal.failed(exc) from None

            @contextlib.contextmanager
            def _cursor(self, *, pipeline: bool = False):
                with super()._cursor(pipeline=pipeline and not self.deferring) as cur:
                    yield cur

            def put(self, *a, **kw):
                return self.checked(super().put, *a, **kw)

            def put_writes(self, *a, **kw):
                """Queued, not awaited: a step's writes go out with its checkpoint's put (or any read, or the pipeline's
                end), in that round trip's one implicit transaction, behind this write's own lock check."""
                return self.checked(super().put_writes, *a, deferred=True, **kw)

        return LockedSaver(conn, pipe=pipe, serde=checkpoint_serializer(self.cipher()))

    def slot_wait_since(self) -> str | None:
        if self.row is not None and "slot_wait_since" in self.row:  # read with the job's row (a listing's page)
            return self.row["slot_wait_since"]
        row = self.db().row("SELECT since_utc FROM durable_job.slot_waits WHERE job_id = {p.job_id}")
        return None if row is None else row["since_utc"]

    def pruned_record(self) -> dict | None:
        if self.row is not None and "pruned" in self.row:  # read with the job's row (a listing's page)
            return opened_pruned(self.cipher, strict_json(self.row["pruned"])) if self.row["pruned"] else None
        db = self.db()
        if db.rows("SELECT to_regclass('durable_job.prunes') IS NOT NULL AS made")[0]["made"] is False:
            return None
        row = db.row("SELECT record_json FROM durable_job.prunes WHERE job_id = {p.job_id}")
        return None if row is None else opened_pruned(self.cipher, strict_json(row["record_json"]))

    def read_checkpoint(self, job: Job) -> CheckpointState:
        db = self.db()
        if db.rows("SELECT to_regclass('durable_job.checkpoints') IS NOT NULL AS made")[0]["made"] is False:
            return read_checkpoint(None, job["threadId"])
        pruned = self.pruned_record()
        if pruned is not None:
            return pruned_checkpoint(pruned)
        return read_checkpoint(
            PgCheckpointRows(db, f"the checkpoint tables of job {self.job_id} in {self.public}", [job["threadId"]]), job["threadId"]
        )

    def checkpoints_digest(self, job: Job) -> str:
        """Each row as PostgreSQL spells it (ROW(...)::text: the same text whichever driver reads it); a pruned job's
        as prune found them, before removing them."""
        pruned = self.pruned_record()
        if pruned is not None:
            return pruned["checkpointsSha256"]
        orders = {"checkpoints": "checkpoint_ns, checkpoint_id", "checkpoint_blobs": "checkpoint_ns, channel, version"}
        orders["checkpoint_writes"] = "checkpoint_ns, checkpoint_id, task_id, idx"
        rows = [
            [table, r["row"]]
            for table, order in orders.items()
            for r in self.db().rows(
                f"SELECT ROW(t.*)::text AS row FROM durable_job.{table} t WHERE thread_id = {{p.thread}} ORDER BY {order}",
                thread=job["threadId"],
            )
        ]
        return sha256_hex(canonical(rows))

    def storage_errors(self) -> tuple:
        psycopg = sys.modules.get("psycopg")
        return (psycopg.Error,) if psycopg is not None else ()

    def run_failure(self, exc: BaseException) -> StateError:
        return self.failure(exc)

    # -- the receipt -----------------------------------------------------------

    def has_receipt(self) -> bool:
        return self.read_receipt() is not None

    def write_receipt(self, receipt: dict) -> None:
        text = json.dumps(receipt, indent=2, sort_keys=True) + "\n"
        self.journal().change(
            "INSERT INTO durable_job.receipts (job_id, receipt_json, written_utc, principal) "
            "VALUES ({p.job_id}, {p.receipt}, {p.stamp}, {p.principal}) ON CONFLICT (job_id) DO NOTHING",  # written once, never over
            receipt=encrypted_document(self.cipher(), receipt, text, "receipts"),
            stamp=now_utc(),
        )

    def read_receipt(self) -> bytes | None:
        db = self.db()
        if db.rows("SELECT to_regclass('durable_job.receipts') IS NOT NULL AS made")[0]["made"] is False:
            return None
        row = db.row("SELECT receipt_json FROM durable_job.receipts WHERE job_id = {p.job_id}")
        return None if row is None else opened_document(self.cipher, row["receipt_json"].encode("utf-8"), "receipts")


def refuse_while_held(store: PgRunStore, db: PgJournal) -> None:
    """An upgrade's migrations wait for a drained store: a job held now is being run or decided by the program before it."""
    if db.rows("SELECT to_regclass('durable_job.job_locks') IS NOT NULL AS made")[0]["made"] is False:
        return  # a store set up for the first time holds no job
    holders = lock_holders(db)
    if holders:
        job_id, h = min(holders.items())
        more = f" (and {len(holders) - 1} more)" if len(holders) > 1 else ""
        raise BusyError(
            f"The store {store.public} has migrations to apply, but job {job_id}{more} is held by {h.get('command')} "
            f"(pid {h.get('pid')} on {h.get('host') or 'an unnamed host'}, role {h.get('role')}, since {h.get('sinceUtc')}): "
            f"drain first (let its workers finish and its reviewers decide), then {BusyError.AGAIN}"
        )


@contextlib.contextmanager
def migration_lock(store: PgRunStore, refused) -> Iterator[None]:
    """Hold the store's migration lock: an EXCLUSIVE lock on durable_job.migrate_lock, in a transaction of a connection
    that runs nothing else, polled with NOWAIT.

    LOCK TABLE needs a privilege on the table, so a role without grants cannot take it (the advisory lock key of
    old was in pg_locks for anyone to hold, and migrate waited on it); a granted role may at most read the table
    (ACCESS SHARE), which EXCLUSIVE does not wait for. The holding transaction runs nothing but its LOCK, which takes
    no snapshot: setup's CREATE INDEX CONCURRENTLY waits for every transaction with one (a SELECT in it would make
    migrate wait for itself for ever). The empty table is made here, before any lock, by the first migrate (a
    concurrent first one may make it at the same moment: both go on).
    """
    import psycopg

    lock = store.connect(f"durable_job migrate lock {os.getpid()}")
    try:
        for statement in ("CREATE SCHEMA IF NOT EXISTS durable_job", "CREATE TABLE IF NOT EXISTS durable_job.migrate_lock ()"):
            try:  # each on its own: a schema another first migrate made at the same moment still needs its table
                lock.execute(statement)
            except (
                psycopg.errors.UniqueViolation,
                psycopg.errors.DuplicateTable,
                psycopg.errors.DuplicateSchema,
                psycopg.errors.DuplicateObject,
            ):
                pass  # the other made it first (its table's row type can be the name that collides: "type … already exists")
            except psycopg.Error as exc:
                raise refused(exc) from None
        deadline = time.monotonic() + SETUP_WAIT_SECONDS
        while True:
            lock.execute("BEGIN")
            try:
                lock.execute("LOCK TABLE durable_job.migrate_lock IN EXCLUSIVE MODE NOWAIT")
                break
            except psycopg.errors.LockNotAvailable:
                lock.execute("ROLLBACK")
            except psycopg.Error as exc:
                raise refused(exc) from None
            if time.monotonic() > deadline:
                raise BusyError(
                    f"The store {store.public} is being set up by another process for over {SETUP_WAIT_SECONDS:.0f} s; {BusyError.AGAIN}"
                )
            time.sleep(0.05)
        yield
    finally:
        lock.close()  # ends the transaction, and with it the lock


def migrate_store(store: PgRunStore, conn) -> dict:
    """Create or bring up to date the store's schema: the journal migrations, then PostgresSaver.setup().

    A store already current is answered before any lock; otherwise the work runs under migration_lock. A role
    without CREATE privilege is told that an administrator runs `migrate` once.
    """
    import psycopg

    migrate = command_line(store.program, "migrate", ["--store", store.public])

    def refused(exc) -> StateError:
        """A role that may not create the schema is told who can; any other database error is the store's failure."""
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return StateError(
                f"The store {store.public} is not set up and this role may not create its schema ({clip(redact(exc, store.secrets), 120)}): "
                f"an administrator runs `{migrate}` once (as the database owner), and grants this role use of schema durable_job"
            )
        return store.failure(exc)

    db = PgJournal(conn, "", refused, owns=False, secrets=store.secrets)
    if store.ready(db):
        done, highest = store.schema_state(db)
        return {"journalMigrations": len(done), "checkpointMigration": highest, "changed": False}
    with migration_lock(store, refused):
        if store.ready(db):  # another process finished it while this one waited
            done, highest = store.schema_state(db)
            return {"journalMigrations": len(done), "checkpointMigration": highest, "changed": False}
        refuse_while_held(store, db)
        apply_migrations(db, store_migrations(PG_MIGRATIONS), "durable_job._migrations")
        from langgraph.checkpoint.postgres import PostgresSaver

        try:
            with store.checkpoint_connection() as cp:
                PostgresSaver(cp).setup()
        except psycopg.Error as exc:
            raise refused(exc) from None
        apply_migrations(db, store_migrations(PG_SETUP_MIGRATIONS), "durable_job._migrations")
        done, highest = store.schema_state(db)
        return {"journalMigrations": len(done), "checkpointMigration": highest, "changed": True}


# ---- the engine ends here


###############################################################################
# 5. Administration: grants, migrate, shred and rotate-key
###############################################################################

from durable_job import AdminStore, Snapshot, make_snapshot  # noqa: E402  (outside the engine: its names)
from durable_job_team.cli import job_row, keeps, shred_key  # noqa: E402  (the team's commands' own)


class PgStore(PgRunStore, AdminStore):
    """A job in a shared PostgreSQL store, administration included: retention (the administrator's: the database
    refuses it to every other role), the scrub after a shred or a rotation, the passkey registry, verify's files check."""

    def mark_pruned(self, record: dict) -> None:
        self.journal().change(
            "INSERT INTO durable_job.prunes (job_id, record_json) VALUES ({p.job_id}, {p.record}) "
            "ON CONFLICT (job_id) DO UPDATE SET record_json = EXCLUDED.record_json",
            record=json.dumps(encrypted_pruned(self.cipher(), record), sort_keys=True),
        )

    def drop_checkpoints(self, job: Job) -> None:
        """LangGraph's checkpoint history of the job's thread, through the saver's own delete_thread."""
        from langgraph.checkpoint.postgres import PostgresSaver

        with self.checkpoint_connection() as conn:
            PostgresSaver(conn, serde=checkpoint_serializer()).delete_thread(job["threadId"])

    def checkpoint_bytes(self, job: Job) -> int:
        tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        return sum(
            int(
                self.db().rows(
                    f"SELECT coalesce(sum(pg_column_size(t.*)), 0) AS size FROM durable_job.{t} t WHERE thread_id = {{p.thread}}",
                    thread=job["threadId"],
                )[0]["size"]
            )
            for t in tables
        )

    def scrub_freed(self) -> None:
        """The old wrapped keys' dead rows vacuumed away (the write-ahead log and backups keep them: rotate the key)."""
        conn = self.connect(f"durable_job vacuum {os.getpid()}")
        try:
            conn.execute("VACUUM durable_job.data_keys")
        except Exception:  # only the table's owner vacuums it: the rows are unreadable without the old key all the same
            pass
        finally:
            conn.close()

    def passkey_rows(self) -> list[dict]:
        return self.db().rows(passkey_select("durable_job.passkeys"))

    def add_passkey(self, row: dict) -> None:
        """The row as the person's own role (the database stamps the principal: no role registers another's key)."""
        names = [*PASSKEY_COLUMNS, "createdUtc"]
        columns = [*PASSKEY_COLUMNS.values(), "created_utc"]
        values = {**checked_passkey_row({**row, "principal": row.get("principal") or self.principal()}), "createdUtc": now_utc()}
        values.pop("principal", None)
        names.remove("principal")
        columns.remove("principal")
        self.db().change(
            f"INSERT INTO durable_job.passkeys ({', '.join(columns)}) VALUES ({', '.join(f'{{p.{n}}}' for n in names)})", **values
        )

    def count_passkey(self, credential_id: str, count: int) -> bool:
        """One UPDATE whose WHERE says the counter grows (the row's lock orders two at once: one of them changes nothing);
        the store's policy and trigger let a role raise only its own passkey's sign_count (m022_passkey_origin)."""
        return bool(
            self.db().change(
                "UPDATE durable_job.passkeys SET sign_count = {p.count} WHERE credential_id = {p.credential} AND sign_count < {p.count}",
                count=count,
                credential=credential_id,
            )
        )

    def check_whole(self, unread: bool = False) -> str:
        db = self.db()
        if not self.ready(db):
            raise StateError(
                f"The store {self.public} is not set up to this program's schema: run `{command_line(self.program, 'migrate', ['--store', self.public])}`"
            )
        self.check_seals(self.load_job(db), mcp="skip", program=False, unread=unread)  # another program's job all the same
        return "store schema current; the job row's manifest and source bytes match their sha256"


# What a granted role may touch, beside what the policies let it see: every row readable (its own jobs' only),
# rows added, and only the UPDATEs and DELETEs history allows (a pending call's outcome, LangGraph's upserts,
# the lock row). No CREATE, nothing on the migration tables but reading them.
STORE_GRANTS = (
    "GRANT USAGE ON SCHEMA durable_job TO {role}",
    "GRANT SELECT ON ALL TABLES IN SCHEMA durable_job TO {role}",
    "GRANT INSERT ON durable_job.jobs, durable_job.job_locks, durable_job.calls, durable_job.call_events, durable_job.drafts, "
    "durable_job.outcomes, durable_job.decisions, durable_job.receipts, durable_job.links, durable_job.checkpoints, durable_job.checkpoint_blobs, "
    "durable_job.checkpoint_writes, durable_job.passkeys TO {role}",
    "GRANT UPDATE ON durable_job.calls, durable_job.job_locks, durable_job.checkpoints, durable_job.checkpoint_writes TO {role}",
    "GRANT DELETE ON durable_job.calls TO {role}",
    "GRANT INSERT, UPDATE, DELETE ON durable_job.holds TO {role}",  # a run's refusal on its job (m013_holds)
    "GRANT INSERT, UPDATE ON durable_job.outbox TO {role}",  # notifications; a sender marks them delivered (m014_outbox)
    "GRANT INSERT ON durable_job.data_keys TO {role}",  # an encrypted job's data key, added as the job is sealed (m015_sealed)
    "GRANT UPDATE (sign_count) ON durable_job.passkeys TO {role}",  # its own passkey's counter, upward (m022_passkey_origin)
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA durable_job TO {role}",
    "GRANT EXECUTE ON FUNCTION durable_job.tombstoned(text) TO {role}",
    "GRANT EXECUTE ON FUNCTION durable_job.lock_stands(text) TO {role}",  # a writer's check of its lock (m016_floor)
    "GRANT EXECUTE ON FUNCTION durable_job.changed_one(bigint) TO {role}",  # a pipelined answer's check (m017_changed_one)
    "GRANT EXECUTE ON FUNCTION durable_job.take_slot(text, text, bigint, text) TO {role}",  # a call's slot (m025_limits)
    "GRANT CONNECT ON DATABASE {database} TO {role}",  # so the database's CONNECT may be revoked from PUBLIC
)


def grant_store(store: PgStore, db: PgJournal, role: str, kind: str) -> None:
    """Let role use the store as a person (owns, reviews, decides its jobs) or a worker (runs any runnable job, nothing else).

    Every earlier right on the store's tables is revoked first, so a store granted before the policies
    existed (SELECT, INSERT, UPDATE, DELETE on everything) is brought down to exactly these.
    """
    from psycopg import sql

    who = sql.Identifier(role).as_string(db.conn)
    database = sql.Identifier(db.rows("SELECT current_database() AS name")[0]["name"]).as_string(db.conn)
    statements = [
        "REVOKE ALL ON ALL TABLES IN SCHEMA durable_job FROM {role}",
        "REVOKE ALL ON ALL SEQUENCES IN SCHEMA durable_job FROM {role}",
        *STORE_GRANTS,
    ]
    with db.transaction():
        for statement in statements:
            db.execute(statement.format(role=who, database=database), [], [])
        db.change(
            "INSERT INTO durable_job.roles (role, kind) VALUES ({p.role}, {p.kind}) ON CONFLICT (role) DO UPDATE SET kind = EXCLUDED.kind",
            role=role,
            kind=kind,
        )


# A role's rights on the store, as the catalogs hold them: the schema's, each table's, sequence's, column's and
# function's in it, the database's, and the kind the store records it as. migrate compares them before and after its
# grants, so that a rerun says which role it changed, and never that it granted what each role already had.
ROLE_RIGHTS_SQL = """
WITH r AS (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = {p.role}),
     s AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'durable_job')
SELECT 'schema ' || a.privilege_type AS r FROM pg_catalog.pg_namespace n, aclexplode(n.nspacl) a
  WHERE n.oid = (SELECT oid FROM s) AND a.grantee = (SELECT oid FROM r)
UNION ALL SELECT c.relname || ' ' || a.privilege_type FROM pg_catalog.pg_class c, aclexplode(c.relacl) a
  WHERE c.relnamespace = (SELECT oid FROM s) AND a.grantee = (SELECT oid FROM r)
UNION ALL SELECT c.relname || '.' || t.attname || ' ' || a.privilege_type
  FROM pg_catalog.pg_attribute t JOIN pg_catalog.pg_class c ON c.oid = t.attrelid, aclexplode(t.attacl) a
  WHERE c.relnamespace = (SELECT oid FROM s) AND a.grantee = (SELECT oid FROM r)
UNION ALL SELECT p.proname || ' ' || a.privilege_type FROM pg_catalog.pg_proc p, aclexplode(p.proacl) a
  WHERE p.pronamespace = (SELECT oid FROM s) AND a.grantee = (SELECT oid FROM r)
UNION ALL SELECT 'database ' || a.privilege_type FROM pg_catalog.pg_database d, aclexplode(d.datacl) a
  WHERE d.datname = current_database() AND a.grantee = (SELECT oid FROM r)
UNION ALL SELECT 'kind ' || kind FROM durable_job.roles WHERE role = {p.role}
"""


def role_rights(db: PgJournal, role: str) -> list:
    return sorted(row["r"] for row in db.rows(ROLE_RIGHTS_SQL, role=role))


def granted_roles(store: PgStore, db: PgJournal, roles, kind: str) -> tuple[list, list]:
    """Grant each role its kind's rights (grant_store): (the roles whose rights that changed, those that had them already)."""
    changed: list[str] = []
    already: list[str] = []
    for role in roles:
        before = role_rights(db, role)
        grant_store(store, db, role, kind)
        (already if role_rights(db, role) == before else changed).append(role)
    return changed, already


def set_up_refusal(store: PgStore, exc: JobError) -> JobError:
    """What a role is told on a store not yet set up, which it may not set up itself: that is the administrator's
    (migrate, with the administrator's own address), so the reader is told to ask for it, named by its role and never
    by its URL. `exc` is returned as it is when the store turns out set up, or cannot be reached to tell."""
    if not isinstance(exc, StateError) or store.pool.schema_ready or "not set up" not in str(exc):
        return exc  # the engine's refusal of a store not set up says so; any other is asked nothing more (no second connect)
    from psycopg.conninfo import conninfo_to_dict

    try:
        conn = store.connect(f"durable_job set-up check {os.getpid()}")
        try:
            db = PgJournal(conn, "", store.failure, owns=False, secrets=store.secrets)
            if store.ready(db):
                return exc
            found = db.rows("SELECT session_user AS me, current_database() AS db")[0]
        finally:
            conn.close()
        host = conninfo_to_dict(store.url).get("host") or "the local server"
    except (JobError, need_psycopg().Error):  # the store cannot be asked now: the refusal it met says what it can
        return exc
    migrate = command_line(store.program, "migrate", ["--store", "URL", "--grant", found["me"]])
    return StateError(
        f"The store (database {found['db']} on {host}) is not set up yet, and role {found['me']} may not set it up: that is its "
        f"administrator's, the owner of the database: ask them to run `{migrate}` once with their own URL (it sets the "
        "schema up and grants this role use of it), then run this command again"
    )


def migrate_schema(
    store: str,
    *,
    grant=(),
    grant_worker=(),
    owner: str | None = None,
    program: str | None = None,
    from_env: bool = False,
    keys: Keys | None = None,
) -> dict:
    """Create or update a store's schema and grant roles (run by the store's administrator, the schema's owner).

    `grant`: roles of people (they own, review and decide jobs); `grant_worker`: roles that run jobs; `owner`:
    the role that owns the jobs of a store made before jobs had owners (they are the administrator's until then).
    """
    target = PgStore(store, "", from_env=from_env, program=program, keys=keys)
    conn = target.connect(f"durable_job migrate {os.getpid()} {now_utc()[:19]}Z")
    try:
        result = migrate_store(target, conn)
        db = PgJournal(conn, "", target.failure, owns=False, secrets=target.secrets)
        if (grant or grant_worker or owner) and not db.rows("SELECT durable_job.is_admin() AS admin")[0]["admin"]:
            raise StateError(
                f"migrate --grant, --grant-worker and --owner are the store's administrator's (the owner of schema durable_job "
                f"in {target.public}); run them as that role"
            )
        granted, already = granted_roles(target, db, grant, "person")
        granted_workers, already_workers = granted_roles(target, db, grant_worker, "worker")
        latest = db.rows("SELECT max(name) AS name FROM durable_job._migrations")[0]["name"]
        encryption = mark_encryption(target, db)
        adopted = 0
        if owner:
            with db.transaction():
                adopted = db.change("UPDATE durable_job.jobs SET owner = {p.owner} WHERE owner = session_user::text", owner=owner)
        database, public = public_database_rights(db)
    finally:
        conn.close()
    return {
        "store": target.public,
        "schema": STORE_SCHEMA,
        **result,
        "latestMigration": latest,
        "granted": granted,
        "grantedWorkers": granted_workers,
        "alreadyGranted": already,
        "alreadyGrantedWorkers": already_workers,
        "adopted": adopted,
        **({"owner": owner} if owner else {}),
        **encryption,
        "database": database,
        "publicMay": public,
    }


def mark_encryption(store: PgStore, db: PgJournal) -> dict:
    """A migrate run with a key-encryption key: the store encrypts every new job from now on (its mark: the key's id, never
    the key); without one, what the store says of itself."""
    kek, turned_on = store.keys.kek(), 0
    if kek is not None:
        if not db.rows("SELECT durable_job.is_admin() AS admin")[0]["admin"]:
            raise StateError(
                f"turning encryption at rest on is the store's administrator's (the owner of schema durable_job in {store.public})"
            )
        with db.transaction():
            turned_on = db.change(
                "INSERT INTO durable_job.sealing (kek_id, since_utc) VALUES ({p.kek}, {p.at}) ON CONFLICT (one) DO NOTHING",
                kek=kek.id,
                at=now_utc(),
            )
    marked = db.row("SELECT kek_id, since_utc FROM durable_job.sealing")
    return {
        "encryptedAtRest": None if marked is None else {"kekId": marked["kek_id"], "since": marked["since_utc"]},
        "encryptionTurnedOn": bool(turned_on),
    }


def need_admin(store: PgStore, db: PgJournal, command: str) -> None:
    """A friendly refusal first; the database refuses the write itself to any other role (no grant, no policy)."""
    if not db.rows("SELECT durable_job.is_admin() AS admin")[0]["admin"]:
        raise StateError(
            f"{command} is the store's administrator's (the owner of schema durable_job in {store.public}); "
            f"{f'role {db.principal}' if db.principal else 'this role'} may not: ask the administrator"
        )


def store_limits(
    url: str,
    *,
    endpoint: str | None,
    model: str | None,
    requests_per_minute: int | None,
    tokens_per_minute: int | None,
    clear: bool,
    program: str | None,
    from_env: bool,
) -> dict:
    """`limits`: set (or clear) the limit on an endpoint and model, the administrator's act; then every limit the store
    keeps, and the jobs that wait for a slot under one (m025_limits)."""
    target = PgStore(url, "", from_env=from_env, program=program)
    try:
        db = target.db()
        if not db.rows("SELECT to_regclass('durable_job.limits') IS NOT NULL AS made")[0]["made"]:
            raise StateError(f"store {target.public} keeps no limits yet: its administrator runs `durable-job migrate --store URL` first")
        changed = 0
        if requests_per_minute is not None or clear:
            db = db.for_job("", principal=target.principal())  # named in the refusal
            need_admin(target, db, "setting or clearing a limit")
            with db.transaction():
                if clear:
                    changed = db.change(
                        "DELETE FROM durable_job.limits WHERE endpoint = {p.endpoint} AND model = {p.model}", endpoint=endpoint, model=model
                    )
                else:
                    changed = db.change(
                        "INSERT INTO durable_job.limits (endpoint, model, requests_per_minute, tokens_per_minute, set_by, set_utc) "
                        "VALUES ({p.endpoint}, {p.model}, {p.rpm}, {p.tpm}, session_user, {p.at}) ON CONFLICT (endpoint, model) DO UPDATE "
                        "SET requests_per_minute = excluded.requests_per_minute, tokens_per_minute = excluded.tokens_per_minute, "
                        "set_by = excluded.set_by, set_utc = excluded.set_utc",
                        endpoint=endpoint,
                        model=model,
                        rpm=requests_per_minute,
                        tpm=tokens_per_minute,
                        at=now_utc(),
                    )
        rows = db.rows(
            "SELECT endpoint, model, requests_per_minute, tokens_per_minute, set_by, set_utc FROM durable_job.limits ORDER BY endpoint, model"
        )
        waits = db.rows("SELECT job_id, endpoint, model, since_utc FROM durable_job.slot_waits ORDER BY since_utc, job_id")
    finally:
        target.close()
    return {
        "store": target.public,
        "changed": changed,
        "limits": [
            {
                "endpoint": r["endpoint"],
                "model": r["model"],
                "requestsPerMinute": r["requests_per_minute"],
                "tokensPerMinute": r["tokens_per_minute"],
                "setBy": r["set_by"],
                "setAt": r["set_utc"],
            }
            for r in rows
        ],
        "waiting": [{"jobId": w["job_id"], "endpoint": w["endpoint"], "model": w["model"], "since": w["since_utc"]} for w in waits],
    }


def shred_job(store: PgStore) -> dict:
    """shred in a store: the job's data key destroyed and its tombstone chained, in one transaction, by the administrator."""
    need_admin(store, store.db(), "shred")
    job = store.load_job()
    with store.lock("shred"):
        tombstone = shred_key(store, store.journal(), job, store.principal())
    crash_point("after-shred", job)
    store.scrub_freed()
    return {"jobId": job["jobId"], "shredded": tombstone}


def rotate_keys(store: PgStore, old: Kek, new: Kek) -> dict:
    """rotate-key in a store: every live job's data key rewrapped under the new key, in one transaction (the administrator's)."""
    db = store.db()
    need_admin(store, db, "rotate-key")
    counts = {"rewrapped": 0, "shredded": 0, "already": 0}
    with db.transaction():
        # no job is sealed meanwhile (a seal's INSERT waits for the rotation, then finds its key rotated out: m019)
        db.execute("LOCK TABLE durable_job.data_keys IN EXCLUSIVE MODE", [], [])
        for row in db.rows("SELECT job_id, kek_id, wrapped, shredded_utc FROM durable_job.data_keys ORDER BY job_id FOR UPDATE"):
            job_id = row["job_id"]
            if row["shredded_utc"] or row["kek_id"] == new.id:
                counts["shredded" if row["shredded_utc"] else "already"] += 1
                continue
            if row["kek_id"] != old.id:
                raise rotated_refusal(job_id, row["kek_id"], old)
            wrapped = new.wrap(old.unwrap(row["wrapped"], job_id), job_id)
            db.change(
                "UPDATE durable_job.data_keys SET kek_id = {p.kek}, wrapped = {p.wrapped} WHERE job_id = {p.job}",
                kek=new.id,
                wrapped=wrapped,
                job=job_id,
            )
            counts["rewrapped"] += 1
        db.change("UPDATE durable_job.sealing SET kek_id = {p.kek}", kek=new.id)
        if old.id != new.id:  # the old key encrypts no new job from now on (m019_current_key); a key rotated back in is current again
            db.change("DELETE FROM durable_job.retired_keys WHERE kek_id = {p.kek}", kek=new.id)
            db.change(
                "INSERT INTO durable_job.retired_keys (kek_id, retired_utc, replaced_by) VALUES ({p.kek}, {p.at}, {p.new}) "
                "ON CONFLICT (kek_id) DO NOTHING",
                kek=old.id,
                at=now_utc(),
                new=new.id,
            )
        db.change("UPDATE durable_job.retired_keys SET replaced_by = {p.kek}", kek=new.id)  # every old key's current one
    store.scrub_freed()
    return {
        "jobId": "",
        "rotated": "1 job's data key rewrapped" if counts["rewrapped"] == 1 else f"{counts['rewrapped']} jobs' data keys rewrapped",
        "jobs": counts,
        "kekId": new.id,
        "next": f"from now on {KEY_FILE_ENV} must name the new key file",
    }


def public_database_rights(db: PgJournal) -> tuple[str, list]:
    """What every role, granted or not, may still do in the store's database: CONNECT (then hold a snapshot that a first
    set-up's CREATE INDEX CONCURRENTLY waits for) and TEMPORARY (then make objects named as the catalog). The README's
    set-up revokes both from PUBLIC; migrate names any left."""
    row = db.rows(
        "SELECT has_database_privilege('public', current_database(), 'CONNECT') AS connect, "
        "has_database_privilege('public', current_database(), 'TEMPORARY') AS temporary, current_database() AS name"
    )[0]
    return row["name"], [right for right in ("CONNECT", "TEMPORARY") if row[right.lower()]]


###############################################################################
# 6. Listing: a page of jobs in one statement, usage, delete
###############################################################################


# One page of a store's jobs in one statement: the page's rows chosen first (`page`: the filters, the order, the
# limit), then beside each everything read_snapshot reads for it
# (its calls, cancel, receipt, latest draft, decision, lock holder, and its latest checkpoint with the blobs and the
# saved writes read_checkpoint looks at), so a listing costs one round trip a page whatever the number of jobs.
# Row-level security scopes every table to the jobs the connecting role may see, the subqueries' tables included.
# The filters are fixed fragments (PAGE_FILTERS) chosen by name; every value they compare is a bound parameter.
STORE_PAGE_SQL = """
WITH page AS (SELECT j.* FROM durable_job.jobs j WHERE true{filters} ORDER BY j.created_utc, j.job_id LIMIT {p.limit})
SELECT j.job_id, j.thread_id, j.record_json, j.manifest, j.manifest_sha256, j.owner, array_to_json(j.reviewers) AS reviewers,
  session_user AS me, array_to_json(ARRAY(SELECT encode(s, 'hex') FROM unnest(j.sources) s)) AS sources, j.created_utc,
  (SELECT json_agg(c ORDER BY c.created_utc, c.seq) FROM durable_job.calls c WHERE c.job_id = j.job_id) AS calls,
  (SELECT o.record_json FROM durable_job.outcomes o WHERE o.job_id = j.job_id AND o.kind = 'cancel') AS cancel,
  EXISTS (SELECT 1 FROM durable_job.receipts r WHERE r.job_id = j.job_id) AS receipt,
  j.finished_at IS NOT NULL AS finished,
  (SELECT p.record_json FROM durable_job.prunes p WHERE p.job_id = j.job_id) AS pruned,
  (SELECT json_build_object('version', d.version, 'results', d.results_json) FROM durable_job.drafts d
    WHERE d.job_id = j.job_id ORDER BY d.version DESC LIMIT 1) AS draft,
  (SELECT json_build_object('record', x.record_json, 'principal', x.principal) FROM durable_job.decisions x
    WHERE x.job_id = j.job_id AND x.kind = 'decision') AS decision,
  (SELECT json_build_object('by', h.principal, 'at', h.at_utc, 'message', h.message, 'fix', h.fix, 'program', h.program)
    FROM durable_job.holds h WHERE h.job_id = j.job_id) AS hold,
  (SELECT w.since_utc FROM durable_job.slot_waits w WHERE w.job_id = j.job_id) AS slot_wait_since,
  (SELECT json_build_object('role', a.usename, 'name', a.application_name) FROM durable_job.job_locks k
    JOIN pg_catalog.pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = k.xmax AND l.mode = 'ExclusiveLock' AND l.granted
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid WHERE k.job_id = j.job_id LIMIT 1) AS holder,
  cp.checkpoint_id, cp.checkpoint,
  (SELECT json_agg(json_build_object('channel', b.channel, 'type', b.type, 'blob', encode(b.blob, 'hex')))
    FROM durable_job.checkpoint_blobs b
    JOIN jsonb_each_text(cp.checkpoint -> 'channel_versions') v(channel, version) ON b.channel = v.channel AND b.version = v.version
    WHERE b.thread_id = j.thread_id AND b.checkpoint_ns = {p.ns} AND b.channel = ANY({p.keys})
      AND (j.finished_at IS NULL OR b.channel = 'results')
      AND NOT ((cp.checkpoint -> 'channel_values') ? b.channel)) AS blobs,
  (SELECT json_agg(json_build_object('channel', w.channel, 'type', w.type, 'blob', encode(w.blob, 'hex'))
                   ORDER BY w.channel = 'final' DESC, w.task_id DESC)
    FROM durable_job.checkpoint_writes w
    WHERE w.thread_id = j.thread_id AND w.checkpoint_ns = {p.ns} AND w.checkpoint_id = cp.checkpoint_id
      AND w.channel = ANY({p.channels}) AND j.finished_at IS NULL) AS writes
FROM page j
LEFT JOIN LATERAL (SELECT k.checkpoint_id, k.checkpoint FROM durable_job.checkpoints k
                   WHERE k.thread_id = j.thread_id AND k.checkpoint_ns = {p.ns}
                   ORDER BY k.checkpoint_id DESC LIMIT 1) cp ON true
ORDER BY j.created_utc, j.job_id
"""
NOT_CANCELLED = "NOT EXISTS (SELECT 1 FROM durable_job.outcomes o WHERE o.job_id = j.job_id AND o.kind = 'cancel')"
PAGE_FILTERS = {
    "owner": "j.owner = {p.owner}",
    "mine": "j.owner = session_user::text",
    "since": "j.created_utc >= {p.since}",
    # names me as a reviewer, or names none and is mine (what --to-review asks beside the phase)
    "reviews": "CASE WHEN cardinality(j.reviewers) > 0 THEN session_user::text = ANY(j.reviewers) ELSE j.owner = session_user::text END",
    "cancelled": NOT_CANCELLED.replace("NOT EXISTS", "EXISTS"),
    "not-cancelled": NOT_CANCELLED,
    "held": "EXISTS (SELECT 1 FROM durable_job.holds h WHERE h.job_id = j.job_id)",
    "after": "(j.created_utc, j.job_id) > ({p.after_at}, {p.after_id})",
}


class LoadedCheckpointRows(CheckpointRows):
    """One thread's latest checkpoint as a listing's statement read it, as read_checkpoint asks for it (no more reads)."""

    def __init__(self, where: str, row: dict, cipher_of=None):
        self.where, self.found = where, None
        if row["checkpoint_id"] is None:
            return
        checkpoint = row["checkpoint"] if isinstance(row["checkpoint"], dict) else json.loads(row["checkpoint"])
        inline = LangGraphRows.inline_values(checkpoint)
        values = {key: inline[key] for key in STATE_KEYS if key in inline}
        for blob in row["blobs"] or []:
            if LangGraphRows.holds_value(blob):
                value = decode_checkpoint(*opened_checkpoint(cipher_of, blob["type"], bytes.fromhex(blob["blob"])), where)
                values[blob["channel"]] = plain_value(value, blob["channel"], where)
        self.found = (row["checkpoint_id"], values)
        self.saved = [
            (w["channel"], *opened_checkpoint(cipher_of, w["type"], None if w["blob"] is None else bytes.fromhex(w["blob"])))
            for w in row["writes"] or []
        ]

    def latest(self, thread_id: str) -> tuple[str, dict] | None:
        return self.found

    def writes(self, thread_id: str, checkpoint_id: str) -> list[tuple[str, str, bytes | None]]:
        return self.saved if self.found else []


def listed_checkpoint(row: dict, where: str, job: Job, decision: dict | None, cipher_of=None) -> CheckpointState:
    """A listed job's checkpoint: a finished one's is its decision row and the results it decided (its FIGURES are
    counted from them, as before the decision: issue 45), never a receipt's JSON nor the rest of its checkpoint (the
    statement reads only its results channel: not reading every finished job's whole checkpoint took a 10,000-job
    listing from 2.8 s to 1.8 s); a pruned one's, what prune kept; any other's, its latest checkpoint as read."""
    if row["pruned"]:
        return pruned_checkpoint(opened_pruned(cipher_of, strict_json(row["pruned"])))
    if row["finished"]:
        latest = LoadedCheckpointRows(where, row, cipher_of).latest(job["threadId"])
        values = {"results": latest[1].get("results") or []} if latest else {}
        return {"values": {**values, **({"final": decision} if decision else {})}, "waiting": False, "savedDecision": None}
    return read_checkpoint(LoadedCheckpointRows(where, row, cipher_of), job["threadId"])


def store_page(
    lister: PgStore, filters=(), params: dict | None = None, limit: int | None = None
) -> list[tuple[tuple, PgStore, Snapshot | StateError]]:
    """One page of a store's jobs, oldest first, from one statement: (its key (createdAtUtc, jobId), its store, its
    Snapshot as read_snapshot reads it, or the StateError that made it unreadable). `filters` names PAGE_FILTERS,
    whose values `params` holds; `limit` None: every job. The caller closes the lister's connection."""
    db = lister.db().for_job(lister.job_id, opens=False)  # each row's encrypted values are its own job's: opened below, with that job's key
    where = "".join(f" AND {PAGE_FILTERS[name]}" for name in filters)
    try:
        rows = db.rows(
            STORE_PAGE_SQL.replace("{filters}", where),
            ns=LangGraphRows.namespace,
            keys=list(STATE_KEYS),
            channels=list(LangGraphRows.saved_channels),
            limit=limit,
            **(params or {}),
        )
    except StateError:  # asked only after a failure, so that a page is one statement
        if db.rows("SELECT to_regclass('durable_job.checkpoint_writes') IS NOT NULL AS made")[0]["made"] is False:
            return []  # not set up (migrate makes the journal tables, then LangGraph's): no job yet
        raise
    page: list[tuple[tuple, PgStore, Snapshot | StateError]] = []
    for found in rows:
        store = lister.for_job(found["job_id"])
        store.row = row = found
        try:
            row = opened_row(found, store)
            job = store.load_job()
            where_kept = f"the checkpoint tables of job {row['job_id']} in {lister.public}"
            decision = row["decision"] and {**json.loads(row["decision"]["record"]), "principal": row["decision"]["principal"]}
            draft = row["draft"] and (row["draft"]["version"], json.loads(row["draft"]["results"]))
            holder = row["holder"] and {**parse_holder_name(row["holder"]["name"]), "role": row["holder"]["role"] or "unknown"}
            snapshot: Snapshot | StateError = make_snapshot(
                store,
                job,
                store.db(),
                with_decision(listed_checkpoint(row, where_kept, job, decision or None, store.cipher), decision or None),
                row["calls"] or [],
                json.loads(row["cancel"]) if row["cancel"] else None,
                draft or None,
                cast("Holder | None", holder or None),
                row["receipt"],
                row["hold"],
            )
        except StateError as exc:
            snapshot = exc
        except EncryptedError as exc:  # listed all the same, by its ids, with why its content is not shown
            snapshot = StateError(str(exc))
        page.append(((row["created_utc"], row["job_id"]), store, snapshot))
    return page


def opened_row(row: dict, store: PgStore) -> dict:
    """A listing's row with its job's encrypted values opened with that job's key (a job not encrypted: the row as it is)."""

    def opened(value, table: str, key: str, column: str):
        if not is_encrypted(value):
            return value
        cipher = store.cipher()
        if cipher is None:
            raise EncryptedError(f"job {store.job_id} holds encrypted values but no data key: restore the store from a backup")
        return cipher.decrypt(value, table, key, column)

    row = dict(row)
    row["cancel"] = opened(row["cancel"], "outcomes", "cancel", "record_json")
    if row["draft"]:
        row["draft"] = {**row["draft"], "results": opened(row["draft"]["results"], "drafts", str(row["draft"]["version"]), "results_json")}
    if row["decision"]:
        row["decision"] = {**row["decision"], "record": opened(row["decision"]["record"], "decisions", "decision", "record_json")}
    if row["hold"]:
        hold = row["hold"]
        row["hold"] = {
            **hold,
            "message": opened(hold["message"], "holds", "hold", "message"),
            "fix": opened(hold["fix"], "holds", "hold", "fix"),
        }
    row["calls"] = [
        {**c, **{k: opened(c.get(k), "calls", c["operation_key"], k) for k in ("output_text", "reconciliation_json") if k in c}}
        for c in row["calls"] or []
    ]
    return row


# `usage` on a store: every job this role may see, with the usage of each of its calls made since the cutoff, in one
# statement (the record's model is read here, not in SQL: a damaged record must not fail the whole sum).
STORE_USAGE_SQL = """
SELECT j.job_id, j.owner, j.record_json,
  (SELECT json_agg(json_build_object('at', c.created_utc, 'usage', c.usage_json) ORDER BY c.created_utc, c.seq)
    FROM durable_job.calls c WHERE c.job_id = j.job_id AND c.usage_json IS NOT NULL AND c.created_utc >= {p.since}) AS calls
FROM durable_job.jobs j ORDER BY j.created_utc, j.job_id
"""


def store_usage(lister: PgStore, cutoff: str) -> list[dict]:
    """[{jobId, owner, model, calls: [{at, usage}]}] of every job of the store this role may see."""
    db = lister.db()
    if db.rows("SELECT to_regclass('durable_job.calls') IS NOT NULL AS made")[0]["made"] is False:
        return []
    spent = []
    for row in db.rows(STORE_USAGE_SQL, since=cutoff):
        try:
            model = strict_json(row["record_json"]).get("model")
        except (ValueError, AttributeError):
            model = None
        spent.append({"jobId": row["job_id"], "owner": row["owner"], "model": model, "calls": row["calls"] or []})
    return spent


def fork_children(lister: PgStore) -> dict:
    """Each job's forks among the jobs this role may read: old job id → the ids of the jobs forked from it, oldest first."""
    rows = lister.db().rows(
        "SELECT j.job_id, (j.record_json::jsonb -> 'forkedFrom' ->> 'jobId') AS parent FROM durable_job.jobs j "
        "WHERE j.record_json::jsonb ? 'forkedFrom' ORDER BY j.created_utc, j.job_id"
    )
    children: dict = {}
    for row in rows:
        children.setdefault(row["parent"], []).append(row["job_id"])
    return children


def store_job_rows(lister: PgStore, filters: dict, after: list | None, limit: int | None, prices: dict | None) -> tuple[list, list | None]:
    """One page of a store's jobs, oldest first, and the key of its last row when more remain (else None).

    The owner, mine, since and the reviewer half of to_review are the statement's WHERE (store_page). The phase is not:
    it is the program's reading of each job's checkpoint, calls, decision and lock together (job_phase), which SQL
    could only copy, and a copy would drift from it. Only whether a job was cancelled is a fact of one table, so the
    statement leaves out cancelled jobs when no phase asked for takes them; every other phase is kept or dropped here,
    after the statement, and a page that dropped rows reads the next batch until it is full. Without a phase filter
    (and without --to-review) a page is exactly one statement.
    """
    names, params = [], {}
    if filters["owner"] is not None:
        names.append("owner")
        params["owner"] = filters["owner"]
    if filters["mine"]:
        names.append("mine")
    if filters["since"]:
        names.append("since")
        params["since"] = filters["since"].rstrip("Z")
    if filters["to_review"]:
        names.append("reviews")
    if filters.get("held"):
        names.append("held")
    phases = set(filters["phases"])
    if phases and phases <= {"cancelled"}:
        names.append("cancelled")
    elif (phases or filters["to_review"]) and not phases & {"cancelled", "unreadable"}:
        names.append("not-cancelled")
    sifted = bool(phases - {"cancelled"}) or filters["to_review"]  # rows the statement returns may still be dropped
    batch = None if limit is None else limit + 1 if not sifted else max(limit + 1, 200)
    found: list[tuple[tuple, dict]] = []
    while True:
        page = store_page(
            lister,
            names + (["after"] if after else []),
            {**params, **({"after_at": after[0], "after_id": after[1]} if after else {})},
            batch,
        )
        for key, store, snap in page:
            row = job_row(store, snap, prices)
            if keeps(row, filters, row.get("me") or ""):
                found.append((key, row))
        if batch is None or len(found) > cast(int, limit) or len(page) < batch:
            break
        after = list(page[-1][0])
    for _, row in found:
        row.pop("me", None)
    if limit is not None and len(found) > limit:
        return [row for _, row in found[:limit]], list(found[limit - 1][0])
    return [row for _, row in found], None


DELETED_TABLES = (
    "data_keys",
    "outbox",
    "holds",
    "links",
    "decisions",
    "outcomes",
    "drafts",
    "call_events",
    "calls",
    "receipts",
    "prunes",
    "job_locks",
)


def delete_job(store: PgStore) -> dict:
    """Remove a job from a store entirely, leaving a tombstone (who, when, its receipt's sha256) that keeps its jobId
    taken: the store's administrator's alone, refused while anyone holds the job (durable_job.delete checks the rest)."""
    conn = store.connect(f"durable_job delete {os.getpid()} {now_utc()[:19]}Z")
    db = PgJournal(conn, store.job_id, store.failure, owns=False, secrets=store.secrets)
    try:
        if not db.rows("SELECT durable_job.is_admin() AS admin")[0]["admin"]:
            raise StateError(
                f"prune and delete are the store's administrator's (the owner of schema durable_job in {store.public}); run them as that role"
            )
        job = db.row("SELECT thread_id FROM durable_job.jobs WHERE job_id = {p.job_id}")
        if job is None:
            raise StateError(
                f"No job {store.job_id} in {store.public}; list the store's jobs with `{store.program} jobs --store {store.public}`"
            )
        receipt = db.row("SELECT receipt_json FROM durable_job.receipts WHERE job_id = {p.job_id}")
        digest = sha256_hex(canonical(strict_json(receipt["receipt_json"]))) if receipt else None
        with db.transaction():
            free = db.rows("SELECT job_id FROM durable_job.job_locks WHERE job_id = {p.job_id} FOR UPDATE SKIP LOCKED")
            if not free and db.rows("SELECT 1 AS held FROM durable_job.job_locks WHERE job_id = {p.job_id}"):  # held by a run
                raise BusyError(f"Job {store.job_id} is held by a running command; let it finish, then {BusyError.AGAIN}")
            db.change("INSERT INTO durable_job.tombstones (job_id, receipt_sha256) VALUES ({p.job_id}, {p.digest})", digest=digest)
            for table in DELETED_TABLES:
                db.change(f"DELETE FROM durable_job.{table} WHERE job_id = {{p.job_id}}")
            for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
                db.change(f"DELETE FROM durable_job.{table} WHERE thread_id = {{p.thread}}", thread=job["thread_id"])
            db.change("DELETE FROM durable_job.jobs WHERE job_id = {p.job_id}")
        stone = cast(dict, db.row("SELECT principal, deleted_at::text AS deleted_at FROM durable_job.tombstones WHERE job_id = {p.job_id}"))
    finally:
        conn.close()
    return {
        "jobId": store.job_id,
        "deleted": True,
        "tombstone": {"principal": stone["principal"], "deletedAt": stone["deleted_at"], "receiptSha256": digest},
    }

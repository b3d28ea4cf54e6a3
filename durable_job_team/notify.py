"""Notifications: the sender that delivers the outbox's events at least once (issue 35).

An extension of durable_job.py, imported only by a command that delivers (`notify`, and `work` and `serve` when a
notification config is named): a job's acts write their outbox rows themselves, in their own transactions
(durable_job.add_notice), whether or not any sender runs. Not sealed into any job: delivering changes nothing a job
records but a row's delivery fields.

The config (DURABLE_JOB_NOTIFY or --notify FILE), written by the store's administrator or the state directory's owner:

    {"webUrl": "https://review.example",                               (optional: each event's `link`)
     "webhooks": [{"url": "https://hooks.example/dj", "events": ["held"], "secretFile": "/etc/dj/hook.secret"}],
     "commands": [{"argv": ["/usr/local/bin/page-me"], "events": ["awaiting-review", "uncertain-call"]}]}

A webhook gets the event as a JSON POST, never following a redirect (a 3xx is a failed try); with `secretFile`, its
header X-Durable-Job-Signature is `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + the body's bytes, keyed by the
file's bytes (a trailing newline dropped)>`, so a receiver refuses a replay outside its tolerance; the secret file is
refused when its group or others may open it, read when the config is, kept in memory, never written anywhere. A
command gets the event's JSON on its standard input (exit 0: taken). Each event goes with a stable `id` (also the header
X-Durable-Job-Delivery) a receiver de-duplicates on: an event is marked delivered only once every target subscribed to
it took it, so a sender killed in between, or a target that failed while another took it, sends it again.

What an event says is rebuilt when it is sent, from what the store stamped on its row (its job, id, event, principal and
recorded_at, m020_outbox_stamped) and the job's own rows (its owner and reviewers, its decision, its cancel, its calls),
never from the free text a role wrote in the row's payload: a row whose payload disagrees with them, or that cannot be
read, is set aside (its `set_aside` says why; counted and said) and the others are delivered. A store's rows go in the
order the server stamped them (recorded_at), a state directory's in the order they were inserted.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from durable_job import (
    EFFECTS_FILE,
    NOTICE_EVENTS,
    NOTIFY_ENV,
    SqliteJournal,
    StateDirStore,
    StateError,
    UsageError,
    clip,
    connect_sqlite,
    job_path,
    load_job_file,
    migrate,
    now_utc,
    os_account,
    strict_json,
)
from durable_job_team.cli import JOB_PHASES

DELIVERY_TIMEOUT = 10.0  # seconds a webhook or a command may take
LEASE_SECONDS = 15.0  # an event taken by a sender is left to it this long (longer than one delivery may take)
BACKOFF_MAX = 30.0  # the longest wait between two tries of an event while its receiver is down
FOLLOW_POLL = 1.0  # how often `notify --follow` (and a work or serve sender) looks for due events
SIGNATURE_HEADER = "X-Durable-Job-Signature"
DELIVERY_HEADER = "X-Durable-Job-Delivery"
EVENT_HEADER = "X-Durable-Job-Event"


###############################################################################
# 1. The config
###############################################################################


def config_path(given: str | None) -> str | None:
    """The config a command names (--notify FILE), else DURABLE_JOB_NOTIFY's, else None (nothing is delivered)."""
    return given or os.environ.get(NOTIFY_ENV) or None


def read_config(path: str) -> dict:
    """The targets of a config file, checked: {webUrl, webhooks: [{url, events, secret}], commands: [{argv, events}]}."""

    def bad(why: str) -> UsageError:
        return UsageError(f"The notification config {path} {why}; see docs/CONTRACT.md (Notifications)")

    try:
        with open(path, "rb") as fh:
            data = strict_json(fh.read(1 << 20).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise bad(f"cannot be read ({clip(exc, 120)})") from None
    if not isinstance(data, dict) or set(data) - {"webUrl", "webhooks", "commands"}:
        raise bad('is not {"webUrl"?, "webhooks"?, "commands"?}')
    hooks, commands = data.get("webhooks") or [], data.get("commands") or []
    if not isinstance(hooks, list) or not isinstance(commands, list) or not hooks + commands:
        raise bad("names no target: give webhooks or commands")
    out: dict = {"webUrl": str(data.get("webUrl") or "").rstrip("/"), "webhooks": [], "commands": []}
    for hook in hooks:
        if (
            not isinstance(hook, dict)
            or set(hook) - {"url", "events", "secretFile"}
            or not str(hook.get("url", "")).startswith(("http://", "https://"))
        ):
            raise bad('has a webhook that is not {"url": "http(s)://…", "events"?, "secretFile"?}')
        out["webhooks"].append({"url": hook["url"], "events": target_events(hook, bad), "secret": read_secret(hook.get("secretFile"), bad)})
    for command in commands:
        argv = command.get("argv") if isinstance(command, dict) else None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv) or set(command) - {"argv", "events"}:
            raise bad('has a command that is not {"argv": ["program", …], "events"?}')
        out["commands"].append({"argv": argv, "events": target_events(command, bad)})
    return out


def target_events(target: dict, bad) -> tuple:
    events = target.get("events", list(NOTICE_EVENTS))
    if not isinstance(events, list) or not events or set(events) - set(NOTICE_EVENTS):
        raise bad(f"has a target whose events are not a list of {', '.join(NOTICE_EVENTS)}")
    return tuple(events)


def read_secret(path, bad) -> bytes | None:
    if path is None:
        return None
    try:
        with open(str(path), "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode & 0o777
            secret = fh.read(4096).rstrip(b"\r\n")
    except OSError as exc:
        raise bad(f"names a secretFile that cannot be read ({exc.strerror})") from None
    if mode & 0o077:  # as ssh refuses a private key others may open: anyone reading it signs events
        raise bad(f"names a secretFile its group or others may open (mode {mode:04o}): `chmod 600 {path}`, then run this again")
    if not secret:
        raise bad("names an empty secretFile")
    return secret


###############################################################################
# 2. Delivering one event
###############################################################################


class SetAside(ValueError):
    """A notification its sender cannot rebuild from its job's own rows (why): set aside, the others delivered."""


def event_document(box: Outbox, row: dict, config: dict) -> dict:
    """The event as sent, rebuilt from the row's stamped columns and its job's own rows: the payload a role wrote only
    has to agree with them (its id, event and job), and gives nothing but a held job's phase and an uncertain call's
    key, each checked against the job (a known phase, a call the job has); SetAside when it cannot be rebuilt."""
    event = row["event"]
    if event not in NOTICE_EVENTS:
        raise SetAside(f"its event {clip(json.dumps(str(event)), 60)} is not one the program notifies")
    try:
        payload = json.loads(row["payload_json"])
    except (TypeError, ValueError, RecursionError):
        raise SetAside("its payload is not JSON") from None
    if not isinstance(payload, dict):
        raise SetAside("its payload is not a JSON object")
    job_id = box.job_id(row)
    if (payload.get("id"), payload.get("event"), payload.get("jobId")) != (row["id"], event, job_id):
        raise SetAside("its payload names another notification (its id, event or job is not the row's)")
    people = box.people(row)
    document = {
        "id": row["id"],
        "event": event,
        "jobId": job_id,
        "phase": event,
        "at": box.at(row),
        "principal": box.principal(row),
        "owner": people["owner"],
        "reviewers": people["reviewers"],
    }
    if event == "held":
        if payload.get("phase") not in JOB_PHASES:
            raise SetAside("its payload's phase is not one a job has")
        document["phase"] = payload["phase"]
    elif event == "awaiting-review":
        document["to"] = people["reviewers"] or [people["owner"]]
    elif event == "decided":
        document["decision"] = box.decision(row)
        if document["decision"] is None:
            raise SetAside("its job records no decision")
    elif event == "cancelled" and not box.cancelled(row):
        raise SetAside("its job is not cancelled")
    elif event == "uncertain-call":
        key = payload.get("operationKey")
        if not isinstance(key, str) or not box.has_call(row, key):
            raise SetAside("its payload's operationKey is not a call of its job")
        document["operationKey"] = key
    if config["webUrl"]:
        document["link"] = f"{config['webUrl']}/jobs/{urllib.parse.quote(job_id, safe='')}"
    return document


def signature(secret: bytes, body: bytes, at: int) -> str:
    """X-Durable-Job-Signature: the send time and the HMAC-SHA256 of "<t>." + body (a receiver refuses an old t)."""
    return f"t={at},v1=" + hmac.new(secret, f"{at}.".encode("ascii") + body, hashlib.sha256).hexdigest()


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook's 3xx is its answer (a failed try), never followed: the signature goes only to the URL configured."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def post(hook: dict, event: dict, body: bytes) -> str | None:
    """POST the event to a webhook; None when it took it (2xx), else why not (never the URL's query: it may hold a token)."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "durable-job-notify",
        DELIVERY_HEADER: event["id"],
        EVENT_HEADER: event["event"],
    }
    if hook["secret"] is not None:
        headers[SIGNATURE_HEADER] = signature(hook["secret"], body, int(time.time()))
    where = urllib.parse.urlsplit(hook["url"])
    name = f"webhook {where.scheme}://{where.netloc.rpartition('@')[2]}{where.path}"
    opener = urllib.request.build_opener(NoRedirects())
    try:
        with opener.open(urllib.request.Request(hook["url"], data=body, headers=headers, method="POST"), timeout=DELIVERY_TIMEOUT):
            return None
    except urllib.error.HTTPError as exc:
        return f"{name}: HTTP {exc.code}" + (" (a redirect: not followed)" if 300 <= exc.code < 400 else "")
    except (OSError, ValueError) as exc:
        return f"{name}: {type(exc).__name__}"


def run_command(command: dict, body: bytes) -> str | None:
    """Give the event to a command on its standard input; None when it exits 0."""
    try:
        done = subprocess.run(command["argv"], input=body, capture_output=True, timeout=DELIVERY_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"command {command['argv'][0]}: {type(exc).__name__}"
    return None if done.returncode == 0 else f"command {command['argv'][0]}: exit {done.returncode}"


def deliver(event: dict, config: dict) -> str | None:
    """Every target subscribed to the event, each once; None when all took it, else what failed."""
    body = json.dumps(event, sort_keys=True, ensure_ascii=False).encode("utf-8")
    failed = [post(h, event, body) for h in config["webhooks"] if event["event"] in h["events"]]
    failed += [run_command(c, body) for c in config["commands"] if event["event"] in c["events"]]
    errors = [f for f in failed if f]
    return "; ".join(errors) if errors else None


###############################################################################
# 3. Outboxes: a store's (all the jobs its role may see), a state directory's
###############################################################################


def later(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + seconds)) + ".000000Z"


class Outbox:
    """One journal's outbox as a sender reads and marks it: `table` (a state directory's, or every job's of a store
    this role may see), `key`, the column naming each row's job, and `order`, the columns it is delivered in (never one
    the row's writer chose); the facts an event is rebuilt from (event_document) are each kind's own."""

    def __init__(self, journal, table: str, key: str, order: str):
        self.journal, self.table, self.key, self.order = journal, table, key, order

    def due(self, limit: int = 50) -> list:
        return self.journal.rows(
            f"SELECT {self.key} AS job, * FROM {self.table} WHERE delivered_utc IS NULL AND set_aside IS NULL "
            "AND (next_try_utc IS NULL OR next_try_utc <= {p.now}) " + f"ORDER BY {self.order} LIMIT {{p.limit}}",
            now=now_utc(),
            limit=limit,
        )

    def set_aside_count(self) -> int:
        return int(self.journal.rows(f"SELECT count(*) AS n FROM {self.table} WHERE set_aside IS NOT NULL")[0]["n"])

    def mark(self, row: dict, sets: str, condition: str = "", **values) -> int:
        """Change one row's delivery fields, in a transaction of its own (the sender's, never a job's)."""
        with self.journal.transaction():
            return self.journal.change(
                f"UPDATE {self.table} SET {sets} WHERE {self.key} = {{p.job}} AND id = {{p.id}}{condition}",
                job=row["job"],
                id=row["id"],
                **values,
            )

    def lease(self, row: dict) -> bool:
        """Take the event for LEASE_SECONDS (another sender leaves it meanwhile); False when another took it first."""
        taken = self.mark(
            row,
            "next_try_utc = {p.until}",
            " AND delivered_utc IS NULL AND (next_try_utc IS NULL OR next_try_utc <= {p.now})",
            until=later(LEASE_SECONDS),
            now=now_utc(),
        )
        return taken == 1

    # the facts an event is rebuilt from, each kind's own
    def job_id(self, row: dict) -> str:
        raise NotImplementedError

    def people(self, row: dict) -> dict:
        raise NotImplementedError

    def principal(self, row: dict) -> str:
        raise NotImplementedError

    def at(self, row: dict) -> str:
        raise NotImplementedError

    def decision(self, row: dict) -> str | None:
        raise NotImplementedError

    def cancelled(self, row: dict) -> bool:
        raise NotImplementedError

    def has_call(self, row: dict, key: str) -> bool:
        raise NotImplementedError

    def one(self, statement: str, **values):
        found = self.journal.rows(statement, **values)
        return next(iter(found[0].values())) if found else None

    def close(self) -> None:
        self.journal.close()


class StoreOutbox(Outbox):
    """Every job's outbox of a store (its administrator's or a worker role's connection): the principal and recorded_at
    the database stamped on the row (m014_outbox, m020_outbox_stamped), the job's people from its jobs row."""

    def __init__(self, journal):
        super().__init__(journal, "durable_job.outbox", "job_id", "recorded_at, job_id, id")

    def job_id(self, row: dict) -> str:
        return row["job_id"]

    def people(self, row: dict) -> dict:
        job = self.journal.row("SELECT owner, reviewers FROM durable_job.jobs WHERE job_id = {p.job}", job=row["job_id"])
        if job is None or not isinstance(job["owner"], str):
            raise SetAside("its job cannot be read")
        return {"owner": job["owner"], "reviewers": list(job["reviewers"] or [])}

    def principal(self, row: dict) -> str:
        return row["principal"]

    def at(self, row: dict) -> str:
        return row["recorded_at"].astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def decision(self, row: dict) -> str | None:
        return self.one("SELECT decision FROM durable_job.decisions WHERE job_id = {p.job} AND kind = 'decision'", job=row["job_id"])

    def cancelled(self, row: dict) -> bool:
        return bool(self.one("SELECT count(*) FROM durable_job.outcomes WHERE job_id = {p.job} AND kind = 'cancel'", job=row["job_id"]))

    def has_call(self, row: dict, key: str) -> bool:
        return bool(
            self.one(
                "SELECT count(*) FROM durable_job.calls WHERE job_id = {p.job} AND operation_key = {p.key}", job=row["job_id"], key=key
            )
        )


class StateDirOutbox(Outbox):
    """A state directory's outbox (its owner's): its job from job.json, its people as the job record names them, its
    principal the account owning the journal (a state directory is its account's alone), in the order rows were added."""

    def __init__(self, journal, root: str):
        super().__init__(journal, "outbox", "'dir'", "rowid")
        self.root = root

    def job(self) -> dict:
        try:
            return dict(load_job_file(self.root, StateError(f"{self.root} holds no job")))
        except StateError as exc:
            raise SetAside(f"its job cannot be read ({clip(exc, 80)})") from None

    def job_id(self, row: dict) -> str:
        return str(self.job()["jobId"])

    def people(self, row: dict) -> dict:
        found = StateDirStore(self.root).people(self.job())  # type: ignore[arg-type]
        return {"owner": found["owner"], "reviewers": list(found["reviewers"])}

    def principal(self, row: dict) -> str:
        return os_account(os.stat(job_path(self.root, EFFECTS_FILE)).st_uid)

    def at(self, row: dict) -> str:
        return str(row["created_utc"])

    def decision(self, row: dict) -> str | None:
        return self.one("SELECT decision FROM decisions WHERE kind = 'decision'") if self.journal.has_table("decisions") else None

    def cancelled(self, row: dict) -> bool:
        return bool(self.one("SELECT count(*) FROM outcomes WHERE kind = 'cancel'"))

    def has_call(self, row: dict, key: str) -> bool:
        return bool(self.one("SELECT count(*) FROM calls WHERE operation_key = {p.key}", key=key))


def state_dir_outbox(root: str) -> Outbox | None:
    """A state directory's outbox (None before its journal, or one made by a program without it); its journal brought
    to this program's schema first (its owner's sender: an outbox without set_aside gains it)."""
    path = job_path(root, EFFECTS_FILE)
    if not os.path.exists(path):
        return None
    conn = connect_sqlite(path)
    journal = SqliteJournal(conn)
    if not journal.has_table("outbox"):
        journal.close()
        return None
    migrate(conn)
    return StateDirOutbox(journal, root)


def store_outbox(store) -> Outbox:
    """A store's outbox, on a connection of the sender's own; the administrator or a worker role only."""
    from durable_job_team.store import PgJournal

    conn = store.connect(f"durable_job notify {os.getpid()}")
    journal = PgJournal(conn, "", store.failure, secrets=store.secrets)
    store.ensure_schema(journal)
    may = journal.rows("SELECT durable_job.is_admin() OR durable_job.is_kind('worker') AS may, session_user AS me")[0]
    if not may["may"]:
        journal.close()
        raise StateError(
            f"Role {may['me']} may not deliver {store.public}'s notifications: its administrator or a worker role does "
            "(`migrate --grant-worker ROLE`)"
        )
    return StoreOutbox(journal)


###############################################################################
# 4. The sender
###############################################################################


class Sender:
    """Delivers every due event of its outboxes, at least once: an event is taken (a lease), rebuilt from its job's
    rows, delivered, and only then marked delivered; a failure waits min(2^tries, 30) s before its next try; a row that
    cannot be rebuilt is set aside (marked, counted, said) and the pass goes on."""

    def __init__(self, config: dict, outboxes, say=None):
        self.config, self.outboxes = config, outboxes  # outboxes: a function giving the current list
        self.say = say or (lambda text: None)
        self.delivered = 0
        self.failed = 0
        self.set_aside = 0

    def once(self) -> int:
        """One pass over every due event; how many were delivered."""
        done = 0
        for box in self.outboxes():
            for row in box.due():
                if not box.lease(row):
                    continue
                named = f"{shown(row['event'])} {shown(row['id'])} (job {shown(row['job'])})"
                try:
                    event = event_document(box, row, self.config)
                except (SetAside, TypeError, KeyError, AttributeError) as exc:  # a row no program of ours wrote
                    why = str(exc) if isinstance(exc, SetAside) else f"it cannot be read ({type(exc).__name__})"
                    box.mark(row, "set_aside = {p.why}, next_try_utc = NULL", why=clip(why, 300))
                    self.set_aside += 1
                    self.say(f"set aside {named}: {why}; the others go on")
                    continue
                try:
                    error = deliver(event, self.config)
                except Exception as exc:  # a target's failure never ends the pass: tried again later
                    error = f"{type(exc).__name__}"
                if error is None:
                    box.mark(row, "delivered_utc = {p.now}, tries = tries + 1, last_error = NULL", now=now_utc())
                    done += 1
                    self.say(f"delivered {named}")
                else:
                    tries = (row["tries"] if isinstance(row["tries"], int) else 0) + 1
                    box.mark(
                        row,
                        "tries = {p.tries}, next_try_utc = {p.next}, last_error = {p.error}",
                        tries=tries,
                        next=later(min(2.0**tries, BACKOFF_MAX)),
                        error=clip(error, 300),
                    )
                    self.failed += 1
                    self.say(f"not delivered {named}: {error}; try {tries + 1} in {min(2**tries, BACKOFF_MAX):g} s")
        self.delivered += done
        return done

    def set_aside_rows(self) -> int:
        """How many rows of its outboxes are set aside (by this sender or an earlier one), each for a person to look at."""
        return sum(box.set_aside_count() for box in self.outboxes())

    def follow(self, stop: threading.Event) -> None:
        """Deliver until stopped, looking for due events every FOLLOW_POLL seconds."""
        while not stop.is_set():
            try:
                self.once()
            except Exception as exc:  # a store that went away: said, tried again
                self.say(f"notify: {clip(exc, 200)}; trying again")
            stop.wait(FOLLOW_POLL)


def shown(value) -> str:
    """A row's value in a line: as it is when it is a plain name, else quoted and clipped (a row anyone may have written)."""
    text = str(value)
    return text if re.fullmatch(r"[\w.:@-]{1,80}", text) else clip(json.dumps(text), 60)


def say_line(text: str) -> None:
    print(f"{now_utc()[:19]}Z notify {os.getpid()} {text}", file=sys.stderr, flush=True)


def store_sender(store, config: dict, say=say_line) -> tuple[Sender, list]:
    """A sender over a store's outbox; the list holds its outbox (close it after)."""
    boxes = [store_outbox(store)]
    return Sender(config, lambda: boxes, say), boxes


def dirs_sender(roots: list, config: dict, say=say_line) -> Sender:
    """A sender over every state directory under the folders (read afresh each pass: new jobs join)."""
    import durable_job
    from durable_job_team.cli import state_dirs_under

    def outboxes():
        found = []
        for root in roots:
            dirs = [root] if os.path.exists(job_path(root, durable_job.JOB_FILE)) else [s.root for s in state_dirs_under([root])]
            for d in dirs:
                box = state_dir_outbox(d)
                if box is not None:
                    found.append(box)
        return ClosingList(found)

    return Sender(config, outboxes, say)


class ClosingList(list):
    """The outboxes of one pass, closed once the pass has gone over them."""

    def __iter__(self):
        try:
            yield from super().__iter__()
        finally:
            for box in list.__iter__(self):
                box.close()


def background(sender: Sender) -> tuple[threading.Event, threading.Thread]:
    """Run a sender in a daemon thread (work, serve) until the event is set."""
    stop = threading.Event()
    thread = threading.Thread(target=sender.follow, args=(stop,), name="notify", daemon=True)
    thread.start()
    return stop, thread

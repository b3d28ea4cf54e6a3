"""Web app: `durable-job serve`, the live review pages and their JSON API.

The web app is a front end of durable_job's command API (section 16) and nothing more. Every read is
read_snapshot/inspect_document or jobs(), every act is decide/revise/retry/cancel, run as the signed-in person:
on a store, with that person's own role and password (their connections, so row-level security and the recorded
principal are exactly the CLI's); in a --root, as the account running serve. A password lives only in this
process's memory (the WebPerson's address and Secrets), for the session's life; durable_job.redact() is given it, so it reaches
no page, log or output. The framework (Starlette, uvicorn, sse-starlette, jinja2) is imported only
here, and this module only by the `serve` command.

Live status: one watcher thread learns that something changed (on a store: LISTEN on NOTIFY_CHANNEL, plus one
light poll of the lock holders, whose taking and losing notify nothing; in a --root: one poll of the state
directories' files) and bumps a generation. Every open event stream then wakes, and re-reads its job under its
own person's policies, once per person, job and generation however many pages show it.

The pages are Jinja2 templates (templates/, autoescaped); their CSS and script are static/app.css and
static/app.js, inlined into each page under the response's Content-Security-Policy nonce. None of these files
is sealed into a job: only durable_job.py is.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import durable_job
from durable_job_team import cli
from durable_job_team import store as team_store

WEB_REQUIREMENTS = "requirements-web.txt"

try:
    import jinja2
    import markupsafe
    import sse_starlette.sse
    import uvicorn
    from sse_starlette.sse import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.middleware import Middleware
    from starlette.middleware.sessions import SessionMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
    from starlette.routing import Route
except ImportError:
    raise durable_job.UsageError(
        f"serve needs the web app's libraries, which are not installed: pip install -r {WEB_REQUIREMENTS}"
    ) from None

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "templates")
STATIC = os.path.join(HERE, "static")

WEB_IDLE_MINUTES = cli.WEB_IDLE_MINUTES  # a session unused this long is signed out (--idle-minutes)
WEB_PASSKEY_SECONDS = cli.WEB_PASSKEY_SECONDS  # the page waits this long for a passkey to answer (--passkey-seconds)
WEB_PASSKEY_MOST_SECONDS = 600  # the longest --passkey-seconds: ten minutes
WEB_UNSIGNED_ACTS = True  # a decision or cancel posted without a passkey's answer is recorded unsigned (verify --strict fails it)
WEB_POLL_SECONDS = 1.0  # the watcher's light poll, and the longest a notification waits to be read
WEB_BUSY_SECONDS = 10.0  # an act finding the job locked (a second tap, a worker's last write) waits this long for it
WEB_PAGE_JOBS = 50  # the list page shows the jobs waiting for me, then this many others a page
WEB_PING_SECONDS = 15  # an idle event stream's keep-alive comment
WEB_SESSION_COOKIE = "durable_job_session"
WEB_IDLE_LEAST_MINUTES = 0.5  # the shortest --idle-minutes: thirty seconds (the watcher checks once a second)
WEB_REFRESH_HEADER = "x-durable-job-refresh"  # the page's script marks its own refreshes with it: they are not a use
WEB_REREAD_SECONDS = 1 / 3  # the least time between two re-reads of the open pages, however many notifications come
WEB_SIGN_IN_FREE = 3  # failed sign-ins of one role before each further try must wait (a person mistypes)
WEB_SIGN_IN_FREE_ADDRESS = 10  # ... from one client address (several people may share one)
WEB_SIGN_IN_CAP_SECONDS = 30  # the longest wait, doubling from 1 s: once guessing stops, the right password works within it
WEB_SIGN_IN_AT_ONCE = 2  # sign-ins of one role, or from one address, checked at the same time
WEB_SIGN_IN_FORGET_SECONDS = 15 * 60  # failures older than this are forgotten
WEB_LOOPBACK = ("127.0.0.1", "::1", "localhost")
WEB_DECIDED = types.MappingProxyType({"accept": "accepted", "reject": "rejected", "hold": "held"})
WEB_ACTS = ("decide", "revise", "retry", "cancel", "reconcile", "resume")  # what a page may do: the CLI's own commands, durable_job.<act>


class WebRefusal(durable_job.JobError):
    """A request the web app answers with an HTTP error: its status code, and a message that says the way on."""

    def __init__(self, status_code: int, message: str, extra: dict | None = None):
        super().__init__(message)
        self.status_code, self.extra = status_code, extra or {}


PAGE_WAYS = (  # a refusal's way on as the command line words it, and as the page offers it (its section's title)
    (re.compile(r"reconcile(?: it)? with --response-file"), 'paste its answer under "Paste the provider\'s answer"'),
    (re.compile(r"run the same command again later"), "try again later"),
)


def page_words(text: str) -> str:
    """A refusal in the page's words: a way on the command line names (a flag) becomes the control the page offers."""
    for cli_way, page_way in PAGE_WAYS:
        text = cli_way.sub(page_way, text)
    return text


class PasskeyRefusal(WebRefusal):
    """A form's passkey signature refused before its act (signed_by_passkey): 409 its challenge not asked for here or
    used already, 400 not an answer, 403 a passkey not the person's."""


def act_refusal(exc: durable_job.JobError) -> WebRefusal:
    """An act's refusal as the web answers it: 409 stale (with the current resultsSha256), 403 not this role's, 409 else;
    in the page's words."""
    if isinstance(exc, WebRefusal):
        return exc
    text = page_words(str(exc))
    if text.startswith("stale: "):
        current = re.search(r"now ([0-9a-f]{64})", text)
        return WebRefusal(409, text, {"stale": True, "resultsSha256": current.group(1) if current else None})
    if isinstance(exc, durable_job.StateError) and re.search(r"^Role \S+ may not ", text):
        return WebRefusal(403, text)
    if isinstance(exc, durable_job.UsageError):
        return WebRefusal(400, text)
    return WebRefusal(409, text)


def live_status(snap: durable_job.Snapshot, out: dict) -> dict:
    """The one status line a page shows for a job, from its saved state: what `GET …/events` sends.

    "Generating" only while a run holds the job, "Awaiting review" only from a saved draft at the review
    interrupt, "Saved" only once the receipt is written.
    """
    phase, store = out["phase"], snap.store
    detail, cls = "", "wait"
    if phase == "running":
        calls = out["running"].get("calls") or []
        label = "Generating" + (f": item {calls[0]['itemId']}" if calls else "")
        detail = f"{out['running'].get('command')} holds the job since {out['running'].get('sinceUtc')}"
    elif phase == "awaiting-review":
        failed = [r["itemId"] for r in snap.results if r.get("status") != "validated"]
        label = f"Awaiting review: draft {snap.draft}"
        detail = f"item {', '.join(failed)} failed: retry or revise it, or decide reject or hold" if failed else "every item validated"
    elif phase == "uncertain-call":
        label, cls = "Needs a person: a call with no known outcome", "bad"
        detail = "nothing sends it again until the owner or a reviewer settles it (below)"
    elif phase == "decided" and snap.has_receipt:
        final = cast(dict, snap.final)
        decision = str(final.get("decision"))
        label, cls = f"Saved: {WEB_DECIDED.get(decision, decision)} by {durable_job.by_whom(final, store)}", "ok"
        detail = f"at {final.get('decidedAtUtc')}, receipt written"
    elif phase in ("decided", "deciding"):
        label, detail = "Deciding: the decision is saved, its receipt not yet", out["next"]
    elif phase == "cancelled":
        label, cls = f"Cancelled by {durable_job.by_whom(snap.cancel, store)}", "bad"
        detail = f"at {(snap.cancel or {}).get('cancelledAtUtc')}: nothing more runs"
    elif out.get("hold"):  # a run's refusal recorded on the job: the workers leave it until someone acts
        label, cls = f"Held by {out['hold']['by']}: needs a person", "bad"
        detail = f"{out['hold']['message']} (at {out['hold']['at']}); {out['hold']['fix']}"
    else:
        label, detail = "Not running", out["next"]
    if out.get("sealBroken"):
        detail = f"read-only here: {out['sealBroken']}"
    return {
        "jobId": snap.job["jobId"],
        "phase": phase,
        "resultsSha256": out["resultsSha256"],
        "draftVersion": snap.draft,
        "status": label,
        "detail": detail,
        "cls": cls,
    }


# -- people and sessions ---------------------------------------------------------------------------------------------


class WebPerson:
    """A signed-in person: who (the principal), how to reach their jobs (their store address, with their password,
    in memory only; or the --root folders), their read connection, and their session's last use."""

    def __init__(self, site: WebSite, principal: str, url: str | None):
        self.site, self.principal, self.url = site, principal, url
        self.secrets = durable_job.Secrets(site.secrets.words)  # the site's, and (once a store is opened) this password
        self.lock = threading.Lock()  # one read connection: one read at a time
        self.reader: team_store.PgStore | None = None
        self.views: dict = {}  # job id (or "" for the list) → (generation, view), shared by this person's pages
        self.flash: dict = {}  # job id → the message of the last act, shown once
        self.prepared: dict = {}  # a passkey challenge → the act's record it signs (durable_job.passkey_request), and where
        self.registering: dict = {}  # a registration's challenge → the relying party and origin it was asked for
        self.drafts: dict = {}  # job id → what the person typed for an act that was not recorded (shown filled in, once)
        self.last_seen = time.monotonic()
        self.signed_out = False

    def read_store(self, job_id: str) -> durable_job.AdminStore:
        """The job, read on this person's one read connection (opened again after the database came back)."""
        if not self.site.store:
            return durable_job.StateDirStore(self.site.job_dir(job_id), self.site.program, self.secrets)
        if self.url is None:
            raise WebRefusal(401, "Signed out: sign in again")
        if self.reader is None:
            self.reader = team_store.PgStore(self.url, "", program=self.site.program, secrets=self.secrets)
        return self.reader.for_job(job_id)

    def act_store(self, job_id: str) -> durable_job.AdminStore:
        """The job for one act: its own connections, closed after it, as a CLI command's."""
        if not self.site.store:
            return durable_job.StateDirStore(self.site.job_dir(job_id), self.site.program, self.secrets)
        if self.url is None:
            raise WebRefusal(401, "Signed out: sign in again")
        return team_store.PgStore(self.url, job_id, program=self.site.program, secrets=self.secrets)

    def reset(self) -> None:
        """Drop the read connection (after an error, at sign-out): the next read opens another."""
        reader, self.reader = self.reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception:
                pass

    def read(self, key: str, generation: int, fn):
        """fn() under this person's read lock, once per generation for each key (a job, or the list)."""
        with self.lock:
            seen = self.views.get(key)
            if seen is not None and seen[0] == generation:
                return seen[1]
            try:
                view = fn()
            except durable_job.JobError:
                self.reset()
                raise
            self.views[key] = (generation, view)
            return view


class SignInThrottle:
    """Failed sign-ins, per role (as typed, known or not) and per client address. After a few, each further try
    waits twice as long as the one before, up to WEB_SIGN_IN_CAP_SECONDS, and only WEB_SIGN_IN_AT_ONCE tries of a
    role or an address are checked at a time. A try it refuses is answered at once without asking the store, so
    guessing in parallel gains nothing; an unknown role is throttled exactly as a known one, so the answers never
    say which roles exist. Used on the server's event loop only (no lock)."""

    def __init__(self):
        self.failures: dict = {}  # ("role" | "address", value) → (failures in a row, the last one's monotonic time)
        self.checking: dict = {}  # the same keys → tries being checked now

    @staticmethod
    def keys(role: str, address: str) -> tuple:
        return (("role", role), ("address", address))

    def wait(self, role: str, address: str) -> int:
        """Whole seconds before a sign-in of role from address may be checked; 0: now."""
        now, longest = time.monotonic(), 0.0
        for key in self.keys(role, address):
            if self.checking.get(key, 0) >= WEB_SIGN_IN_AT_ONCE:
                longest = max(longest, 1.0)
            count, last = self.failures.get(key, (0, 0.0))
            free = WEB_SIGN_IN_FREE if key[0] == "role" else WEB_SIGN_IN_FREE_ADDRESS
            if count >= free:
                longest = max(longest, last + min(WEB_SIGN_IN_CAP_SECONDS, 2 ** min(count - free, 16)) - now)
        return max(1, int(-(-longest // 1))) if longest > 0 else 0

    def begin(self, role: str, address: str) -> None:
        for key in self.keys(role, address):
            self.checking[key] = self.checking.get(key, 0) + 1

    def end(self, role: str, address: str, failed: bool) -> None:
        """A checked try is over; a failure (the store refused the role and password) counts against both keys."""
        now = time.monotonic()
        for key in self.keys(role, address):
            left = self.checking.pop(key, 1) - 1
            if left:
                self.checking[key] = left
            if failed:
                count, last = self.failures.get(key, (0, now))
                self.failures[key] = (1 if now - last > WEB_SIGN_IN_FORGET_SECONDS else count + 1, now)
        for key, (_, last) in list(self.failures.items()) if failed else ():
            if now - last > WEB_SIGN_IN_FORGET_SECONDS:
                del self.failures[key]

    def signed_in(self, role: str) -> None:
        """The role's own password: its failures are forgotten (the address's are not: it may be guessing others)."""
        self.failures.pop(("role", role), None)


class WebSite:
    """What one `serve` holds: its store or folders, its sessions (in memory), the change generation, the watcher,
    and its pages."""

    def __init__(self, *, store: str | None, roots: list, program: str, idle_seconds: float, passkey_seconds: int, secure: bool, say):
        self.store, self.roots, self.program = store, roots, program
        self.secrets = durable_job.Secrets(team_store.address_secrets(store) if store else ())  # serve's own address's
        self.idle_seconds, self.secure, self.say = idle_seconds, secure, say
        self.passkey_ms = passkey_seconds * 1000  # WebAuthn's timeout: the page's deadline for a passkey's answer
        self.sessions: dict[str, WebPerson] = {}
        self.throttle = SignInThrottle()
        self.token = secrets.token_urlsafe(32) if roots else None  # --root: the one-time sign-in token
        self.generation = 0
        self.down: str | None = None  # why the store cannot be read, since when
        self.stopping = threading.Event()
        self.act_locks: dict = {}
        self.locks_lock = threading.Lock()
        self.loop: Any = None  # the server's event loop, once it runs
        self.changed: Any = None  # the asyncio.Event of the current generation (made on the server's loop)
        self.base_address = ""  # the address to open, once serve listens
        self.label = "role" if store else "account"  # how a page names a principal
        self.pages = Pages(self.label)

    def where(self) -> str:
        return f"store {team_store.public_url(self.store)}" if self.store else f"the state directories under {', '.join(self.roots)}"

    # -- sessions ----------------------------------------------------------------

    def person(self, sid: str | None, touch: bool = True) -> WebPerson | None:
        """The session's person, unless it was idle too long (then signed out: its password forgotten).
        A person's own request is a use (touch); an event stream and the page's own refreshes are not, so an open tab
        alone keeps no one signed in, however busy the store."""
        person = self.sessions.get(sid or "")
        if person is None:
            return None
        if time.monotonic() - person.last_seen > self.idle_seconds:
            self.sign_out(cast(str, sid))
            return None
        if touch:
            person.last_seen = time.monotonic()
        return person

    def new_session(self, person: WebPerson) -> str:
        sid = secrets.token_urlsafe(32)
        self.sessions[sid] = person
        return sid

    def sign_out(self, sid: str) -> None:
        person = self.sessions.pop(sid, None)
        if person is not None:
            person.signed_out = True
            person.reset()
            person.url, person.secrets = None, durable_job.Secrets()  # the password is forgotten with the session
            team_store.address_secrets.cache_clear()  # this program's last copy of it (the others' are parsed again)

    def expire_idle(self) -> None:
        for sid, person in list(self.sessions.items()):
            if time.monotonic() - person.last_seen > self.idle_seconds:
                self.sign_out(sid)

    def sign_in(self, role: str, password: str) -> WebPerson:
        """A person signing in to a store with their role and password: the store itself checks them."""
        if not role or not password or len(role) > 63 or len(password) > 1000:
            raise WebRefusal(401, "Sign-in refused: give your store role and its password")
        parts = urlsplit(cast(str, self.store))
        host = parts.netloc.rpartition("@")[2]
        url = urlunsplit((parts.scheme, f"{quote(role, safe='')}:{quote(password, safe='')}@{host}", parts.path, parts.query, ""))
        person = WebPerson(self, role, url)
        try:
            person.read_store("")  # the person's read connection: the server checks the password as it opens
            person.principal = cast(team_store.PgStore, person.reader).principal()
        except durable_job.JobError as exc:
            person.reset()
            if re.search(r"password|authentication|role .* does not exist|no pg_hba", str(exc), re.I):
                raise WebRefusal(401, "Sign-in refused: the store did not accept that role and password") from None
            raise WebRefusal(
                503,
                f"The store cannot be reached now ({durable_job.clip(durable_job.redact(exc, person.secrets), 200)}); try again shortly",
            ) from None
        return person

    def root_person(self) -> WebPerson:
        return WebPerson(self, durable_job.os_account(os.geteuid()), None)

    def spend_token(self, token: str) -> WebPerson | None:
        """--root: the printed one-time token, exchanged once for a session; the next one is printed for another device."""
        if not self.token or not hmac.compare_digest(token.encode(), self.token.encode()):
            return None
        self.token = secrets.token_urlsafe(32)
        self.say(f"another device or browser can sign in once at: {self.address_with_token()}")
        return self.root_person()

    # -- reading ---------------------------------------------------------------

    def job_dir(self, job_id: str) -> str:
        """--root: the state directory holding jobId (the first, in path order)."""
        for found in cli.state_dirs_under(self.roots, self.program):
            try:
                if found.load_job()["jobId"] == job_id:
                    return found.root
            except durable_job.JobError:
                continue
        raise WebRefusal(404, f"No job {job_id!r} here: see the list of jobs")

    def open_snapshot(self, person: WebPerson, job_id: str) -> durable_job.Snapshot:
        store = person.read_store(job_id)
        if not store.has_job():  # unknown and invisible alike: the database shows a role no other role's job
            raise WebRefusal(404, f"No job {job_id!r} here: see the list of jobs")
        return durable_job.read_snapshot(store)

    def job_view(self, person: WebPerson, job_id: str, render=None) -> dict:
        """The job as its page and the API show it: inspect's document, the live status, and (render) the page's parts."""

        def read():
            snap = self.open_snapshot(person, job_id)
            try:
                out = durable_job.inspect_document(snap)
                view = {"out": out, "live": live_status(snap, out)}
                if render is not None:
                    view["page"] = render(snap, out)
                return view
            finally:
                snap.close()

        if render is not None:  # a page is rendered for one request: not shared
            with person.lock:
                try:
                    return read()
                except durable_job.JobError:
                    person.reset()
                    raise
        return person.read(job_id, self.generation, read)

    def listing(self, person: WebPerson, **filters) -> dict:
        """`jobs` as this person may see it (the API's, with its filters and pages)."""
        where = {"store": person.url} if self.store else {"roots": self.roots}
        return cli.jobs(**where, program=self.program, **filters)

    def list_view(self, person: WebPerson, after: str | None = None) -> dict:
        """The list page: every job waiting for me, then a page of the rest I may see (WEB_PAGE_JOBS, oldest
        first, `after` the page before); read once a generation, however many pages show it."""

        def read():
            waiting = self.listing(person, to_review=True)["jobs"]
            page = self.listing(person, limit=WEB_PAGE_JOBS, after=after)
            shown = {r["jobId"] for r in waiting}
            return {"waiting": waiting, "rest": [r for r in page["jobs"] if r["jobId"] not in shown], "nextCursor": page.get("nextCursor")}

        return person.read(f"list {after or ''}", self.generation, read)

    # -- acting ----------------------------------------------------------------

    def act(self, person: WebPerson, job_id: str, command: str, fields: dict, signed: Callable[[], dict] | None = None) -> dict:
        """One act through the command API, as the person; a second tap of it waits for the first (the job's lock).
        signed: the act's passkey fields, taken under that lock (its challenge used once): a second tap of a signed act
        finds the challenge used only after the first tap's act has ended, recorded or refused."""
        if command not in WEB_ACTS:
            raise WebRefusal(400, f"no act {command!r} here")
        with self.locks_lock:
            lock = self.act_locks.setdefault(job_id, threading.Lock())
        deadline = time.monotonic() + WEB_BUSY_SECONDS
        with lock:
            fields = {**fields, **(signed() if signed is not None else {})}
            while True:
                store = person.act_store(job_id)
                try:
                    if not store.has_job():
                        raise WebRefusal(404, f"No job {job_id!r} here: see the list of jobs")
                    act: Any = getattr(durable_job, command)
                    out = act(store, **fields)
                    self.bump_soon()  # the person's next page shows their act, before the store's notification is read
                    return out
                except durable_job.BusyError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
                finally:
                    store.close()

    # -- passkeys --------------------------------------------------------------

    def passkeys_of(self, person: WebPerson) -> list:
        """The passkeys registered for the person's principal (a store's table; a --root's state directories)."""
        if self.store:
            with person.lock:
                rows = person.read_store("").passkey_rows()
        else:
            rows = cli.registered_passkeys(roots=self.roots, program=self.program)["passkeys"]
        return [r for r in rows if r["principal"] == person.principal]

    def add_passkey(self, person: WebPerson, job_id: str, row: dict) -> None:
        """Register a passkey as the person: a store's own role (its policies stamp the principal), or, under --root,
        in the journal of the job whose page registered it."""
        store = person.act_store("") if self.store else durable_job.StateDirStore(self.job_dir(job_id), self.program, person.secrets)
        try:
            store.add_passkey(row)
        finally:
            store.close()

    def count_passkey(self, person: WebPerson, credential_id: str, count: int) -> bool:
        """Claim a new sign counter for the person's passkey where it is kept (False: it did not grow there)."""
        if self.store:
            store = person.act_store("")
            try:
                return store.count_passkey(credential_id, count)
            finally:
                store.close()
        for state in cli.state_dirs_under(list(self.roots), self.program):
            if any(r["credentialId"] == credential_id for r in state.passkey_rows()):
                kept = durable_job.StateDirStore(state.root, self.program, person.secrets)
                try:
                    return kept.count_passkey(credential_id, count)
                finally:
                    kept.close()
        return False

    # -- change ----------------------------------------------------------------

    def bump(self) -> None:
        """Something may have changed: every open stream re-reads (on the server's loop). The store's watcher bumps at
        most once every WEB_REREAD_SECONDS, however many notifications arrive (any role may NOTIFY the channel), and
        a change within that time is read at its end: each person's pages re-read at most three times a second."""
        self.generation += 1
        changed, self.changed = self.changed, asyncio.Event()
        if changed is not None:
            changed.set()

    def bump_soon(self) -> None:
        """bump(), from the watcher's thread."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.bump)

    def watch(self) -> None:
        """The watcher thread: learns of changes and bumps; expires idle sessions."""
        while not self.stopping.is_set():
            try:
                self.watch_store() if self.store else self.watch_roots()
            except Exception as exc:  # the store went away: every page shows it, and the watcher tries again
                down = (
                    f"the store cannot be reached since {durable_job.now_utc()[11:19]} UTC "
                    f"({durable_job.clip(durable_job.redact(exc, self.secrets), 160)}); reconnecting"
                )
                if self.down is None:
                    self.down = down
                    self.bump_soon()
                self.stopping.wait(WEB_POLL_SECONDS)

    def watch_roots(self) -> None:
        """--root: one poll of every state directory's files (size and time) and lock, for all pages."""
        seen = None
        while not self.stopping.is_set():
            self.expire_idle()
            mark: list = []
            for store in cli.state_dirs_under(self.roots, self.program):
                for name in sorted(os.listdir(store.root)):
                    st = os.stat(os.path.join(store.root, name))
                    mark.append((store.root, name, st.st_size, st.st_mtime_ns))
                mark.append((store.root, "holder", str(store.holder())))
            if mark != seen:
                seen = mark
                self.bump_soon()
            self.stopping.wait(WEB_POLL_SECONDS)

    def listener_url(self) -> str | None:
        """LISTEN needs a login but no privilege: the connection of any signed-in person serves, read nothing with."""
        return next((p.url for p in list(self.sessions.values()) if p.url), None)

    def watch_store(self) -> None:
        """A store: LISTEN on NOTIFY_CHANNEL, and between notifications one light poll of who holds a job's lock."""
        url = self.listener_url()
        if url is None:
            self.expire_idle()
            self.stopping.wait(WEB_POLL_SECONDS)
            return
        psycopg = team_store.need_psycopg()
        holders = (
            "SELECT coalesce(string_agg(application_name || ' ' || pid, '|' ORDER BY pid), '') AS mark FROM pg_catalog.pg_stat_activity "
            "WHERE application_name LIKE 'durable_job %' AND application_name NOT LIKE 'durable_job read %' "
            "AND application_name NOT LIKE 'durable_job serve %'"
        )
        with psycopg.connect(url, autocommit=True, application_name=f"durable_job serve {os.getpid()}", connect_timeout=5) as conn:
            conn.execute(f"LISTEN {team_store.NOTIFY_CHANNEL}")
            if self.down is not None:
                self.down = None
            self.bump_soon()  # (re)connected: every page reads its saved status again
            seen, poll_at, bumped, pending = None, 0.0, time.monotonic(), False
            while not self.stopping.is_set() and url in {p.url for p in list(self.sessions.values())}:
                self.expire_idle()
                now = time.monotonic()
                if now >= poll_at:
                    mark, poll_at = conn.execute(holders).fetchone()[0], now + WEB_POLL_SECONDS
                    pending = pending or mark != seen
                    seen = mark
                if pending and now >= bumped + WEB_REREAD_SECONDS:
                    pending, bumped = False, now
                    self.bump_soon()
                due = min(poll_at, bumped + WEB_REREAD_SECONDS) if pending else poll_at
                for _ in conn.notifies(timeout=max(0.0, due - time.monotonic()), stop_after=None if pending else 1):
                    pending = True  # a flood of notifications is read here, and makes one re-read at the interval's end

    # -- addresses ---------------------------------------------------------------

    def address(self) -> str:
        return self.base_address

    def address_with_token(self) -> str:
        return f"{self.base_address}?token={self.token}"


# -- pages -----------------------------------------------------------------------------------------------------------


def read_static(name: str) -> str:
    with open(os.path.join(STATIC, name), encoding="utf-8") as fh:
        return fh.read()


class Pages:
    """The templates (autoescaped), the page's CSS and its one script (read once, as serve starts), and how a page
    or a refusal is answered: every page inlines them under a fresh nonce its Content-Security-Policy names."""

    def __init__(self, label: str):
        self.label = label
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
        # the review page's look (durable_job.py section 14), then the web app's own: files of this package, not a person's input
        self.css = markupsafe.Markup(durable_job.PAGE_CSS + read_static("app.css"))
        self.script = markupsafe.Markup(read_static("app.js"))

    def page(self, request: Request, name: str, status_code: int = 200, **values) -> HTMLResponse:
        nonce = secrets.token_urlsafe(16)
        person = values.pop("person", None)
        html = self.env.get_template(name).render(
            css=self.css, nonce=nonce, person=person, label=self.label, csrftoken=request.scope["csrftoken"](), **values
        )
        response = HTMLResponse(html, status_code=status_code)
        response.headers["Content-Security-Policy"] = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        )
        return response

    def refused(self, request: Request, exc: WebRefusal, person=None, api: bool = False) -> Response:
        hidden = person.secrets if person is not None else durable_job.Secrets()
        if api:
            return JSONResponse({"error": durable_job.redact(str(exc), hidden), **exc.extra}, status_code=exc.status_code)
        heading = {404: "No such job", 403: "Not yours to do", 401: "Sign in"}.get(exc.status_code, "Refused")
        message = durable_job.redact(str(exc), hidden)
        return self.page(request, "error.html", exc.status_code, person=person, title=heading, heading=heading, message=message)


def web_item_acts(site: WebSite, person: WebPerson, here: str, csrftoken: str, snap: durable_job.Snapshot, out: dict):
    """forms(item_id, result) for item_sections: a failed or edited item's retry and revise forms, at review only."""
    ways = {f["itemId"]: f for f in out.get("failedItems") or []}

    def forms(item_id: str, result: dict) -> markupsafe.Markup:
        if out.get("phase") != "awaiting-review" or out.get("sealBroken") or not snap.store.may("tends", snap.job):
            return markupsafe.Markup("")
        cites = result.get("citations") or []
        html = site.pages.env.get_template("item_acts.html").render(
            item_id=item_id,
            here=here,
            csrftoken=csrftoken,
            person=person,
            results=out["resultsSha256"],
            retry="retryCommand" in ways.get(item_id, {}),
            summary=result.get("summary") or "",
            citations=json.dumps(cites, ensure_ascii=False, indent=1) if cites else "",
        )
        return markupsafe.Markup(html)

    return forms


def web_claim_checks(site: WebSite, snap: durable_job.Snapshot, out: dict, forms):
    """forms(item_id, result) with, for a person who may decide, each validated claim's check (claim_checks.html):
    ticked after reading its quote, sent with the decision as its `checked` claims."""

    def with_checks(item_id: str, result: dict) -> durable_job.Html:
        acts = forms(item_id, result)
        if (
            result.get("status") != "validated"
            or not out.get("decideCommand")
            or out.get("sealBroken")
            or not snap.store.may("decides", snap.job)
        ):
            return acts
        claims = [
            {
                "id": f"{item_id}.{n}",
                "quote": cite.get("quote"),
                "claim": cite.get("claim"),
                "figures": [
                    {**f, "cls": durable_job.FIGURE_CLASS.get(str(f.get("where")), "bad")}
                    for f in durable_job.stated_in(result, str(cite.get("claim")))
                ],
            }
            for n, cite in enumerate(result.get("citations") or [], 1)
        ]
        html = site.pages.env.get_template("claim_checks.html").render(item_id=item_id, claims=claims)
        return durable_job.hjoin([acts, markupsafe.Markup(html)])

    return with_checks


def row_status(row: dict, label: str) -> tuple[str, str]:
    """A `jobs` row's status as the list shows it (the job page's live status, in short), and its colour."""
    phase = row["phase"]
    if phase == "running":
        return "Generating", "wait"
    if phase == "awaiting-review":
        return "Awaiting review", "wait"
    if phase == "uncertain-call":
        return "Needs a person: a call with no known outcome", "bad"
    if phase == "decided":
        by = row.get("decidedBy") or {}
        decision = str(row.get("next") or "").removeprefix("decided: ").split(";")[0]
        return f"Saved: {WEB_DECIDED.get(decision, decision)} by {by.get('reviewer')} ({label} {by.get('principal')})", "ok"
    if phase == "cancelled":
        return "Cancelled", "bad"
    if row.get("hold"):
        return f"Held by {row['hold']['by']}: needs a person", "bad"
    return phase.replace("-", " ").capitalize(), "wait"


def age_text(created) -> str:
    """How long ago a job was sealed, as a person says it (3 min ago), from its createdAtUtc; nothing for a job not read."""
    if created is None:  # an unreadable row (its record not read): the pill says so
        return ""
    try:
        then = datetime.datetime.fromisoformat(str(created).rstrip("Z")).replace(tzinfo=datetime.UTC)
    except ValueError:
        return "created at an unknown time"
    seconds = max(0, int((datetime.datetime.now(datetime.UTC) - then).total_seconds()))
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            n = seconds // size
            return f"sealed {n} {unit}{'s' if unit == 'day' and n > 1 else ''} ago"
    return "sealed just now"


def list_rows(rows: list, label: str) -> list:
    """The list page's rows: each `jobs` row with its status, colour and age, for the template to escape."""
    shown = []
    for r in rows:
        status, cls = row_status(r, label)
        shown.append(
            {
                "r": r,
                "status": status,
                "cls": cls,
                "age": age_text(r.get("createdAtUtc")),
                "figures": cli.figures_words(r.get("figures")),
            }
        )
    return shown


def local_path(value) -> str:
    """Where a sign-in returns: the list or one job's page of this app, nothing else (no //host, no /\\host)."""
    value = str(value or "/")
    return value if re.fullmatch(r"/(jobs/[A-Za-z0-9._~%-]+)?", value) else "/"


def quote_path(job_id: str) -> str:
    return quote(job_id, safe="")


def act_said(command: str, out: dict, label: str) -> str:
    """The line a page shows after an act the command API recorded (or found already recorded)."""
    if command == "decide":
        final = out.get("final") or {}
        said = f"{final.get('decision')} by {final.get('reviewer')} ({label} {final.get('principal')}) at {final.get('decidedAtUtc')}"
        if out.get("existing"):
            return f"Already recorded: {said}. Nothing new was recorded."
        checked = f" {durable_job.checked_words(final['checked']).capitalize()}." if "checked" in final else ""
        return f"Recorded: {said} ({durable_job.signed_words(final)}).{checked}"
    if command in ("revise", "retry"):
        what = "the draft answer" if out.get("itemId") == durable_job.WRITER_ID else f"item {out.get('itemId')}"
        return f"Recorded: draft {out.get('draftVersion')} of {what} (results {out.get('resultsSha256')})."
    if command == "resume":
        return f"Resumed: the job is now {'awaiting review' if out.get('interrupt') else 'where its run stopped'}."
    if command == "reconcile":
        rec = out.get("reconciliation") or {}
        said = f"the call of item {out.get('itemId')} {out.get('status')} by {rec.get('reviewer')} ({label} {rec.get('principal')})"
        if out.get("existing"):
            return f"Already recorded: {said} at {rec.get('reconciledAtUtc')}. Nothing new was recorded."
        return f"Recorded: {said} ({durable_job.signed_words(rec)}). The job goes on."
    cancelled = out.get("cancelled") or {}
    who = f"{cancelled.get('reviewer')} ({label} {cancelled.get('principal')})"
    return f"Recorded: the job is cancelled by {who} ({durable_job.signed_words(cancelled)})."


# -- who asks: sessions, the --root token, refusals ------------------------------------------------------------------


def person_of(site: WebSite, request: Request, use: bool = True) -> WebPerson | None:
    """The request's signed-in person. Only a person's own request is a use of the session: the page's script marks
    its background refreshes (WEB_REFRESH_HEADER), and an event stream is never one, so a page kept busy by
    changes in the store keeps no one signed in."""
    own = use and request.headers.get(WEB_REFRESH_HEADER) != "1"
    return site.person(request.session.get("sid"), touch=own)


def sign_in_first(site: WebSite, request: Request, api: bool) -> Response:
    if api:
        return JSONResponse({"error": "not signed in: POST /login first", "signedOut": True}, status_code=401)
    if site.roots:
        exc = WebRefusal(401, "Open the address serve printed in its terminal (a one-time token), or ask its runner for a new one")
        return site.pages.refused(request, exc)
    return RedirectResponse(f"/login?next={request.url.path}", status_code=303)


async def guarded(site: WebSite, handler, request: Request, api: bool, use: bool) -> Response:
    """A route for signed-in people only (use: a request to it is a use of the session, unless marked a refresh);
    a --root token in the query string signs the browser in. A refusal is answered as a page or, for the API, JSON."""
    token = request.query_params.get("token")
    if token and site.roots:
        person = site.spend_token(token)
        if person is not None:
            request.session["sid"] = site.new_session(person)
            return RedirectResponse(request.url.path, status_code=303)
    person = person_of(site, request, use)
    if person is None and request.method == "POST" and not api:  # a form sent without a session: keep what was typed
        return stranded(site, request, "Your session has ended (the server restarted, or you were away too long)")
    if person is None:
        return sign_in_first(site, request, api)
    try:
        return await handler(site, request, person)
    except WebRefusal as exc:
        return site.pages.refused(request, exc, person, api)
    except durable_job.JobError as exc:
        if site.down:  # the store went away: say so, not what a read of it happened to raise
            return site.pages.refused(request, WebRefusal(503, site.down[0].upper() + site.down[1:]), person, api)
        return site.pages.refused(request, act_refusal(exc), person, api)


# -- a reviewer is never stranded: an act that could not be recorded keeps what they typed ---------------------------

WEB_KEPT_FORMS = re.compile(r"/jobs/([A-Za-z0-9._~%-]+)/(decision|cancel|reconcile)")  # the acts whose typed fields a sign-in keeps
WEB_KEPT_RECONCILE = ("operationKey", "action", "outputText", "responseId", "requestId")  # a reconcile form's own, beside its reason
WEB_KEPT_FIELDS = ("decision", "reason", "reviewer", *WEB_KEPT_RECONCILE)
WEB_KEPT_KEYS = ("act", "decision", "reason", *WEB_KEPT_RECONCILE)  # what a sign-in carries back (keep_NAME) to fill in
WEB_KEPT_BYTES = 64 * 1024


def typed_fields(request: Request) -> dict:
    """What the person typed into a decision, cancel or reconcile form (KeepTyped kept it): {} for any other request."""
    return dict(request.scope.get("durable_job.typed") or {})


def stranded(site: WebSite, request: Request, why: str, status_code: int = 401) -> Response:
    """The styled page of an act that was not recorded for want of a valid session: what happened, what the person
    typed (kept), and a sign-in that returns to the same job with it filled in. Nothing is recorded from here."""
    typed = typed_fields(request)
    found = WEB_KEPT_FORMS.fullmatch(request.url.path)
    job_id = unquote(found.group(1)) if found else ""
    act = {"cancel": "cancel", "reconcile": "reconcile"}.get(found.group(2) if found else "", "decide")
    keep = {"act": act, "decision": typed.get("decision", "") if typed.get("decision") in durable_job.DECISIONS else ""}
    keep["reason"] = typed.get("reason", "")
    settle = next((form for form in SETTLE_FORMS if act == "reconcile" and form[0] == typed.get("action")), None)
    if settle is not None:  # a reconcile's way to settle the call, and what was pasted for it
        keep.update({k: typed.get(k, "") for k in WEB_KEPT_RECONCILE})
    return site.pages.page(
        request,
        "stranded.html",
        status_code,
        title="Sign in again",
        why=why,
        store=bool(site.store),
        next=local_path(f"/jobs/{quote_path(job_id)}" if job_id else "/"),
        act=act,
        decision=keep["decision"],
        reason=keep["reason"],
        keep=keep,
        settle=dict(zip(("action", "title", "words", "button"), settle, strict=True)) if settle else None,
        job_id=job_id,
    )


class KeepTyped:
    """Before the CSRF check (SameOrigin): a decision, cancel or reconcile form's fields are read (and replayed to the app), so that a request
    the check refuses (a restarted server, a stale token) can still show the person what they typed."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        content_type = dict(scope.get("headers") or []).get(b"content-type", b"").split(b";")[0]
        if scope["type"] != "http" or scope["method"] != "POST" or not WEB_KEPT_FORMS.fullmatch(scope["path"]):
            return await self.app(scope, receive, send)
        if content_type != b"application/x-www-form-urlencoded":
            return await self.app(scope, receive, send)
        messages, size, more = [], 0, True
        while more:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            more = message.get("more_body", False) and size <= WEB_KEPT_BYTES
        if size <= WEB_KEPT_BYTES:
            from urllib.parse import parse_qs

            body = b"".join(m.get("body", b"") for m in messages).decode("utf-8", "replace")
            fields = parse_qs(body, keep_blank_values=True)
            scope = {**scope, "durable_job.typed": {k: fields[k][0] for k in WEB_KEPT_FIELDS if k in fields}}
        replay = list(messages)

        async def replayed():
            return replay.pop(0) if replay else await receive()

        await self.app(scope, replayed, send)


WEB_BODY_BYTES = 1024 * 1024  # the most any request may send: a form, a sign-in, a JSON call (BodyLimit)
WEB_BODY_SECONDS = 10.0  # the longest a request's body may take to arrive, all of it (BodyLimit)
WEB_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class BodyLimit:
    """The outermost layer: a request whose Content-Length is over WEB_BODY_BYTES is answered 413 before a byte of its
    body is read, and one sent without a length (chunked) is read here, counting, and answered 413 once it is over.
    So no route, signed in or not (POST /login first of all), holds more than that in memory for one request. A body
    that has not all arrived WEB_BODY_SECONDS after it began (a client trickling bytes to keep serve waiting) is
    answered 408: the largest form a phone sends is a few KiB."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > WEB_BODY_BYTES:
            return await self.refuse(scope, send, 413, f"A request body is limited to {WEB_BODY_BYTES} bytes")
        messages, size, more = [], 0, True
        deadline = asyncio.get_running_loop().time() + WEB_BODY_SECONDS
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - asyncio.get_running_loop().time()))
            except TimeoutError:
                return await self.refuse(scope, send, 408, f"A request body must arrive within {WEB_BODY_SECONDS:g} s")
            messages.append(message)
            size += len(message.get("body", b""))
            if size > WEB_BODY_BYTES:
                return await self.refuse(scope, send, 413, f"A request body is limited to {WEB_BODY_BYTES} bytes")
            more = message.get("type") == "http.request" and message.get("more_body", False)

        async def replayed():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replayed, send)

    @staticmethod
    async def refuse(scope, send, status: int, why: str):
        response = Response(why + "\n", status, media_type="text/plain")
        response.headers["Connection"] = "close"

        async def nothing():
            return {"type": "http.disconnect"}

        await response(scope, nothing, send)


class SameOrigin:
    """The CSRF check, inside the session layer: every request but GET, HEAD and OPTIONS must come from serve's own
    page, and carry the token kept in the person's own session.

    Why not a double-submit cookie (asgi-csrf, before): its token is any one serve ever signed, bound to no session,
    and anyone gets one from GET /login. Cookies ignore the port, so a page on localhost:OTHER can overwrite the
    token cookie, and a request from another port of the same host is same-site, so even a SameSite=Strict session
    cookie goes with it: that page could record a decision as the person. So, two checks, each enough against it:

    - the Origin header must be serve's own (scheme://host[:port], from this request's scheme and Host header); a
      request without Origin must say Sec-Fetch-Site: same-origin; one with neither is refused. A browser sets both
      headers itself, and a page cannot forge them.
    - the form field `csrftoken` (or the `x-csrftoken` header, as the page's script sends with its JSON calls) must
      equal the token kept in the signed session cookie (secrets.token_urlsafe(32), made once a session, anonymous
      ones included, so the sign-in form has one too; a sign-in keeps the session, and so its token), compared with
      hmac.compare_digest. A cookie tossed in from another port carries another session, whose token the forged
      form cannot know (the cookie is HttpOnly).

    A refusal is 403: the stranded page (with what the person typed, see KeepTyped), or JSON for /api/. Templates
    read the session's token through request.scope["csrftoken"](), a callable set here for every request."""

    def __init__(self, app, site: WebSite):
        self.app, self.site = app, site

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        session = scope["session"]

        def token() -> str:
            if not isinstance(session.get("csrftoken"), str):
                session["csrftoken"] = secrets.token_urlsafe(32)
            return session["csrftoken"]

        scope["csrftoken"] = token
        if scope["method"] in WEB_SAFE_METHODS:
            return await self.app(scope, receive, send)
        messages, more = [], True
        while more:  # bounded: BodyLimit, outside, has let no more than WEB_BODY_BYTES through
            message = await receive()
            messages.append(message)
            more = message.get("type") == "http.request" and message.get("more_body", False)
        replay = list(messages)

        async def replayed():
            return replay.pop(0) if replay else await receive()

        headers = Request(scope).headers
        sent = headers.get("x-csrftoken", "")
        if not sent and not scope["path"].startswith("/api/"):
            with contextlib.suppress(Exception):  # a body that is no form has no token: refused below
                sent = str((await Request(scope, replayed).form()).get("csrftoken") or "")
            replay = list(messages)
        kept = session.get("csrftoken")
        if not same_origin(scope, headers):
            return await self.refuse(scope, send, "This form was sent from another page than serve's own")
        if not (isinstance(kept, str) and sent and hmac.compare_digest(sent.encode(), kept.encode())):
            why = "This page's form token is no longer valid (the server restarted, or the page is old)"
            return await self.refuse(scope, send, why)
        await self.app(scope, replayed, send)

    async def refuse(self, scope, send, why: str):
        """The stranded page, or JSON that tells the page's script to send the form as it is (which lands there too)."""
        if scope["path"].startswith("/api/"):
            response: Response = JSONResponse({"error": f"{why}: sign in again", "signedOut": True}, status_code=403)
        else:
            response = stranded(self.site, Request(scope), why, 403)

        async def nothing():
            return {"type": "http.disconnect"}

        await response(scope, nothing, send)


def same_origin(scope, headers) -> bool:
    """Whether a request's Origin is serve's own (this request's scheme and Host), or, with no Origin or an opaque one
    (`null`: Chromium sends that with a form posted from a page whose referrer policy is no-referrer, as serve's pages
    are), whether the browser says Sec-Fetch-Site: same-origin. Neither: refused (a browser sends at least one with any
    POST, and a page cannot set either)."""
    origin = headers.get("origin")
    if origin is None or origin == "null":
        return headers.get("sec-fetch-site") == "same-origin"
    own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}".lower()
    return hmac.compare_digest(origin.lower().encode(), own.encode())


# -- pages and forms -------------------------------------------------------------------------------------------------


async def list_page(site: WebSite, request: Request, person: WebPerson) -> Response:
    after = request.query_params.get("after")
    view = await run_in_threadpool(site.list_view, person, after)
    more = f"/?after={quote_path(view['nextCursor'])}" if view.get("nextCursor") else None
    return site.pages.page(
        request,
        "list.html",
        person=person,
        title="Jobs",
        waiting=list_rows(view["waiting"], site.label),
        rest=list_rows(view["rest"], site.label),
        more=more,
        down=site.down,
        script=site.pages.script,
        events=f"/api/events?after={quote_path(after)}" if after else "/api/events",
    )


def web_answer_checks(site: WebSite, snap: durable_job.Snapshot, out: dict) -> str:
    """For a person who may decide a job that asks a question, each sentence of its draft answer (draft.N) and each
    asked fact (fact.NAME) to tick after reading its evidence (answer_checks.html), sent with the decision."""
    answer = out.get("answer")
    if not answer or not out.get("decideCommand") or out.get("sealBroken") or not snap.store.may("decides", snap.job):
        return ""
    sentences = (answer.get("draft") or {}).get("sentences") if (answer.get("draft") or {}).get("status") == "validated" else []
    checks = [{"id": f"draft.{n}", "text": s.get("text")} for n, s in enumerate(sentences or [], 1)]
    for fact in answer.get("facts") or []:
        said = ", ".join(f"{s.get('value')} (“{s.get('quote')}”)" for s in fact.get("statedBy") or []) or "not stated"
        checks.append({"id": f"fact.{fact['name']}", "text": said})
    names = set(durable_job.sentence_ids(snap.written)) | set(durable_job.fact_ids(snap.results))
    checks = [c for c in checks if c["id"] in names]  # only what decide --checked takes
    return site.pages.env.get_template("answer_checks.html").render(checks=checks) if checks else ""


def web_draft_retry(site: WebSite, person: WebPerson, here: str, csrftoken: str, snap: durable_job.Snapshot, out: dict, manifest) -> str:
    """A failed draft answer's retry form (draft_acts.html), at review, when the bounds leave the writer a call and the
    person may tend the job: it posts the command API's retry of the writer, as an item's retry form posts its item's."""
    if out.get("phase") != "awaiting-review" or out.get("sealBroken"):
        return ""
    if not durable_job.draft_retry_command(snap.store, snap.calls, manifest, snap.job, snap.written):
        return ""
    return site.pages.env.get_template("draft_acts.html").render(
        item_id=durable_job.WRITER_ID, here=here, csrftoken=csrftoken, person=person, results=out["resultsSha256"]
    )


def job_parts(site: WebSite, person: WebPerson, here: str, csrftoken: str, snap: durable_job.Snapshot, out: dict) -> dict:
    """A job page's parts: the items (with their acts), history, journal and decision as the review page renders
    them (durable_job.py section 14, every value escaped there), and which acts this person may take."""
    manifest, sources = snap.store.sealed_copies(snap.job)
    acts = web_claim_checks(site, snap, out, web_item_acts(site, person, here, csrftoken, snap, out))
    reviewable = out.get("phase") == "awaiting-review" and not out.get("sealBroken")
    order = durable_job.item_order(manifest or {}, snap.results)
    uncertain = uncertain_call(snap, out)
    return {
        "answer": durable_job.hjoin(
            [
                durable_job.answer_section(out.get("answer"), order, snap.results),
                markupsafe.Markup(web_draft_retry(site, person, here, csrftoken, snap, out, manifest)),
                markupsafe.Markup(web_answer_checks(site, snap, out)),
            ]
        ),
        "items": durable_job.hjoin(durable_job.item_sections(snap, manifest or {}, sources, acts)),
        "history": durable_job.history_section(snap.store, out.get("drafts") or []),
        "journal": durable_job.journal_section(snap, journal_pending(site, uncertain)),
        "decision": durable_job.decision_section(snap, out) if snap.final or snap.cancel else "",
        "decide": list(durable_job.DECISIONS) if reviewable and snap.store.may("decides", snap.job) else [],
        "cancel": out["phase"] not in ("decided", "cancelled", "deciding")
        and not out.get("sealBroken")
        and snap.store.may("tends", snap.job),
        "uncertain": uncertain,
        # under --root, a job a settled call left ready: the account runs it on from here (a store's: a worker takes it)
        "resume": not snap.store.shared and out["phase"] in ("ready", "not-started") and not out.get("sealBroken"),
        "figures": cli.figures_words(cli.job_figures(snap)),  # as `jobs` prints them
    }


SETTLE_FORMS = (  # the ways a person settles an uncertain call on the page: (action, its title, what it does, its button)
    (
        "lookup",
        "Look it up at the provider",
        "The provider kept this call's record: take the answer it holds, if it holds one.",
        "Look it up",
    ),
    (
        "complete",
        "Paste the provider's answer",
        "Paste the answer as the provider's record holds it: it is checked as a job's answer is.",
        "Complete it",
    ),
    ("abandon", "Abandon it", "It counts as an attempt; the job's next run makes the call again, if its attempts allow.", "Abandon it"),
)
SETTLE_ACTIONS = tuple(form[0] for form in SETTLE_FORMS)


def uncertain_call(snap: durable_job.Snapshot, out: dict) -> dict | None:
    """The uncertain call of a job, in the words of the page (item, since when, where it was sent, the request id the
    provider logs, tokens unknown), the ways to settle it (the provider's record first when it was kept), who may."""
    pending = [r for r in snap.calls if r["status"] == "pending"]
    if out["phase"] != "uncertain-call" or not pending or out.get("sealBroken"):
        return None
    row = ([r for r in pending if not r["response_id"]] or pending)[0]  # a kept call submitted is not the uncertain one
    kept = snap.job.get("providerKeepsRecord") and (row["response_id"] or snap.job.get("api"))
    actions = ("lookup", "complete", "abandon") if kept else ("complete", "abandon")
    reviewers, owner = ", ".join(out.get("reviewers") or []), out.get("owner") or ""
    goes_on = "a worker takes it" if snap.store.shared else f"{snap.store.suggest('resume')} runs it"
    return {
        "key": row["operation_key"],
        "item": durable_job.WRITER_LABEL if row["item_id"] == durable_job.WRITER_ID else row["item_id"],
        "since": str(row["created_utc"])[:19].replace("T", " ") + " UTC",
        "endpoint": re.sub(r"^https?://", "", durable_job.call_endpoints(snap.journal).get(row["operation_key"]) or "unknown"),
        "request_id": durable_job.long_id(row["operation_key"], keep=8),  # sent as X-Client-Request-Id
        "may": snap.store.may("tends", snap.job),
        "who": f"its owner {owner}" + (f" or its reviewers ({reviewers})" if reviewers else ""),
        "then": goes_on,
        "forms": [dict(zip(("action", "title", "words", "button"), form, strict=True)) for form in SETTLE_FORMS if form[0] in actions],
    }


def journal_pending(site: WebSite, uncertain: dict | None):
    """What the page's journal says of a pending call, in a few words (journal_pending.html; the terminal's review page
    gives the reconcile command, whose 64-hex key a phone need not show): the call the box above explains is settled there."""
    said = site.pages.env.get_template("journal_pending.html")
    return lambda row: markupsafe.Markup(said.render(boxed=uncertain is not None and row["operation_key"] == uncertain["key"]))


async def job_page(site: WebSite, request: Request, person: WebPerson) -> Response:
    job_id = request.path_params["job_id"]
    here = f"/jobs/{quote_path(job_id)}"
    csrftoken = request.scope["csrftoken"]()

    def render(snap: durable_job.Snapshot, out: dict) -> dict:
        return job_parts(site, person, here, csrftoken, snap, out)

    view = await run_in_threadpool(site.job_view, person, job_id, render)
    # the page's own live refresh (app.js swap) is not the person's next page: what their act said and what they typed
    # for an act not recorded stay for that page (a refresh from the page they just left can come between the two)
    refresh = request.headers.get("x-durable-job-refresh") == "1"
    flash = None if refresh else person.flash.pop(job_id, None)
    kept = None if refresh else person.drafts.pop(job_id, None)  # what the person typed for an act not recorded: filled in again
    try:
        (rp_id, origin), passkey_note = relying_party(request), ""
        passkeys = [k for k in await run_in_threadpool(site.passkeys_of, person) if (k["rpId"], k["origin"]) == (rp_id, origin)]
    except WebRefusal as exc:
        rp_id, passkey_note, passkeys = "", str(exc), []
    return site.pages.page(
        request,
        "job.html",
        person=person,
        title=job_id,
        job_id=job_id,
        here=here,
        events=f"/api{here}/events",
        out=view["out"],
        live=view["live"],
        flash=flash,
        script=site.pages.script,
        tokens=durable_job.tokens_words(view["out"]["tokens"]) if view["out"].get("tokens") else "",
        rp_id=rp_id,
        passkeys=passkeys,
        passkey_note=passkey_note,
        address=f"{request.url.scheme}://{request.url.netloc}{here}",  # the job's page, for another device (no --root token)
        kept=kept or {},
        results_hash=durable_job.long_id(view["out"]["resultsSha256"]),
        **view["page"],
    )


async def form_fields(request: Request, names: tuple) -> dict:
    form = await request.form()
    return {n: str(form.get(n) or "") for n in names}


async def act_and_return(
    site: WebSite, request: Request, person: WebPerson, command: str, fields: dict, signed: Callable[[], dict] | None = None
) -> Response:
    """A form's act, then back to the job's page, which shows what was recorded or why it was refused (signed: see
    WebSite.act; its refusal is raised to the caller, as a refused signature is before any act)."""
    job_id = request.path_params["job_id"]
    here = f"/jobs/{quote_path(job_id)}"
    try:
        out = await run_in_threadpool(site.act, person, job_id, command, fields, signed)
        person.flash[job_id] = {"text": act_said(command, out, site.label), "cls": ""}
    except PasskeyRefusal:
        raise
    except durable_job.JobError as exc:
        refusal = act_refusal(exc)
        if refusal.status_code == 404:
            return site.pages.refused(request, refusal, person)
        text = f"Refused: {durable_job.redact(str(refusal), person.secrets)}"
        if refusal.extra.get("stale"):  # in words, not the CLI's: what changed, and that what was typed is kept
            text = await run_in_threadpool(stale_words, site, person, job_id, str(fields.get("results_sha256") or ""), command)
        person.flash[job_id] = {"text": text, "cls": "bad"}
        if command in ("decide", "cancel"):  # what they typed stays filled in
            person.drafts[job_id] = {"act": command, "decision": fields.get("decision") or "", "reason": fields.get("reason") or ""}
        if command == "reconcile":  # the pasted answer too
            person.drafts[job_id] = reconcile_typed(fields)
    return RedirectResponse(here, status_code=303)


def stale_words(site: WebSite, person: WebPerson, job_id: str, shown: str, command: str) -> str:
    """A stale act's refusal as a person reads it: the job changed since the page was shown, and how (each draft since)."""
    out = site.job_view(person, job_id)["out"]
    drafts = out.get("drafts") or []
    since = next((n for n, d in enumerate(drafts) if d.get("previousResultsSha256") == shown), None)
    later = drafts[since:] if since is not None else drafts[-1:]
    changes = [
        f"draft {d.get('version')}: item {d.get('itemId')} changed by {d.get('reviewer')} ({site.label} {d.get('principal')}), "
        f"“{durable_job.clip(d.get('reason') or '', 80)}”"
        for d in later
    ]
    what = "; ".join(changes) if changes else f"it is now at draft {out.get('draftVersion')}"
    kept = ", with your reason kept below" if command in ("decide", "cancel") else ""
    return f"Not recorded: the job changed since you opened it ({what}). The page now shows the current version{kept}: review the change, then act again."


async def decision_form(site: WebSite, request: Request, person: WebPerson) -> Response:
    f = await form_fields(request, ("decision", "reviewer", "reason", "resultsSha256", "challenge", "passkey", "claims"))
    if f["decision"] not in durable_job.DECISIONS:
        raise WebRefusal(400, "choose accept, reject or hold")
    fields = {"decision": f["decision"], "reviewer": f["reviewer"], "reason": f["reason"], "results_sha256": f["resultsSha256"]}
    if f["claims"]:  # the page offered each claim's check: the ticked ones are what the person checked (none, too)
        fields["checked"] = [str(c) for c in (await request.form()).getlist("checked")]
    return await act_and_return(site, request, person, "decide", {**fields, **signed_by_passkey(site, request, person, "decide", f)})


async def revise_form(site: WebSite, request: Request, person: WebPerson) -> Response:
    f = await form_fields(request, ("item", "summary", "citations", "reviewer", "reason", "resultsSha256"))
    try:
        citations = durable_job.strict_json(f["citations"]) if f["citations"].strip() else None
    except ValueError as exc:
        person.flash[request.path_params["job_id"]] = {
            "text": f'Refused: the citations are not valid JSON ({durable_job.clip(exc, 80)}); write a list of {{"quote", "claim"}} objects',
            "cls": "bad",
        }
        return RedirectResponse(f"/jobs/{quote_path(request.path_params['job_id'])}", status_code=303)
    fields = {
        "item": f["item"],
        "summary": f["summary"],
        "citations": citations,
        "reviewer": f["reviewer"],
        "reason": f["reason"],
        "results_sha256": f["resultsSha256"],
    }
    return await act_and_return(site, request, person, "revise", fields)


async def retry_form(site: WebSite, request: Request, person: WebPerson) -> Response:
    f = await form_fields(request, ("item", "reviewer", "reason", "resultsSha256"))
    fields = {"item": f["item"], "reviewer": f["reviewer"], "reason": f["reason"], "results_sha256": f["resultsSha256"]}
    return await act_and_return(site, request, person, "retry", fields)


async def cancel_form(site: WebSite, request: Request, person: WebPerson) -> Response:
    f = await form_fields(request, ("reviewer", "reason", "challenge", "passkey"))
    fields = {"reviewer": f["reviewer"], "reason": f["reason"]}
    return await act_and_return(site, request, person, "cancel", {**fields, **signed_by_passkey(site, request, person, "cancel", f)})


RECONCILE_FIELDS = ("operationKey", "action", "reviewer", "reason", "outputText", "responseId", "requestId")


def reconcile_fields(f: dict) -> dict:
    """The page's reconcile (its form, or the fields its script asks a passkey to sign) as reconcile's arguments: look it
    up at the provider, complete it from the pasted answer (a textarea's line ends as typed: CR LF is LF), or abandon it."""
    action = str(f.get("action") or "")
    if action not in SETTLE_ACTIONS:
        raise WebRefusal(400, "choose lookup, complete or abandon")
    fields: dict = {"operation_key": str(f.get("operationKey") or ""), "reviewer": str(f.get("reviewer") or "")}
    fields.update(reason=str(f.get("reason") or ""), action="complete" if action == "lookup" else action)
    if action == "lookup":
        fields["from_provider"] = True
    if action == "complete":
        response = {
            "outputText": str(f.get("outputText") or "").replace("\r\n", "\n"),
            "responseId": str(f.get("responseId") or "").strip(),
        }
        if str(f.get("requestId") or "").strip():
            response["requestId"] = str(f["requestId"]).strip()
        fields["response"] = response
    return fields


def reconcile_typed(fields: dict) -> dict:
    """What the person typed into a reconcile form (reconcile_fields' arguments), as the page fills it in again."""
    response = fields.get("response") or {}
    typed = {"act": "reconcile", "operationKey": fields.get("operation_key") or "", "reason": fields.get("reason") or ""}
    typed["action"] = "lookup" if fields.get("from_provider") else fields.get("action") or ""
    return typed | {k: str(response.get(k) or "") for k in ("outputText", "responseId", "requestId")}


async def resume_form(site: WebSite, request: Request, person: WebPerson) -> Response:
    """Under --root: run the job on (resume), as its account would at a terminal; the page then shows where it stands."""
    if site.store:
        raise WebRefusal(400, "a store's workers run its jobs: there is nothing to resume from this page")
    return await act_and_return(site, request, person, "resume", {})


async def reconcile_form(site: WebSite, request: Request, person: WebPerson) -> Response:
    """Settle an uncertain call from the page, signed with the person's passkey when the page's script signed it. The
    same signed form sent twice (a second tap) is answered by the first record, as the command answers a repeat: the
    second finds the challenge used only once the first tap's act has ended (WebSite.act takes it under the job's lock)."""
    f = await form_fields(request, (*RECONCILE_FIELDS, "challenge", "passkey"))
    fields = reconcile_fields(f)
    try:
        return await act_and_return(
            site, request, person, "reconcile", fields, signed=lambda: signed_by_passkey(site, request, person, "reconcile", f)
        )
    except PasskeyRefusal as used:
        if used.status_code != 409:
            raise
        job_id = request.path_params["job_id"]
        out = await run_in_threadpool(site.act, person, job_id, "reconcile", {**fields, "prepare": True})
        if not out.get("existing"):  # the first tap's act recorded nothing (or there was none): this one is refused
            raise
        person.flash[job_id] = {"text": act_said("reconcile", out, site.label), "cls": ""}
        return RedirectResponse(f"/jobs/{quote_path(job_id)}", status_code=303)


# -- passkeys: a person registers this device's, and it signs their decision or cancel -------------------------------


def relying_party(request: Request) -> tuple[str, str]:
    """(the relying-party id, the origin) of the page as the browser reached it: the host name it used."""
    url = request.url
    host = url.hostname or ""
    if not host or re.fullmatch(r"[0-9.]+|.*:.*", host):
        raise WebRefusal(
            400,
            f"passkeys need a host name, not the address {host}: open http://localhost:{url.port}{url.path} on this machine "
            "(or serve this app under its name)",
        )
    return host, f"{url.scheme}://{url.netloc}"


def signed_by_passkey(site: WebSite, request: Request, person: WebPerson, command: str, f: dict) -> dict:
    """A form's passkey assertion (from the page's script), as decide's or cancel's passkey argument; {} without one."""
    if not f.get("challenge") and not f.get("passkey"):
        return {}
    job_id = request.path_params["job_id"]
    prepared = person.prepared.pop(f.get("challenge") or "", None)
    if prepared is None or prepared["jobId"] != job_id or prepared["command"] != command:
        raise PasskeyRefusal(409, "This passkey signature was not asked for here, or was already used: nothing was recorded; tap again")
    try:
        assertion = durable_job.strict_json(f.get("passkey") or "")
    except ValueError:
        raise PasskeyRefusal(400, "the passkey's answer is not JSON: nothing was recorded; tap again") from None
    if not isinstance(assertion, dict):
        raise PasskeyRefusal(400, "the passkey's answer is not an object: nothing was recorded; tap again")
    key = next((k for k in prepared["keys"] if k["credentialId"] == assertion.get("credentialId")), None)
    if key is None:
        raise PasskeyRefusal(403, f"That passkey is not registered for {person.principal}: nothing was recorded")

    def count(credential_id: str, n: int) -> bool:  # the new sign counter, claimed where the key is kept (page_signature)
        return site.count_passkey(person, credential_id, n)

    passkey = {"prepared": prepared["out"], "assertion": assertion, "key": key, "rpId": prepared["rpId"], "origin": prepared["origin"]}
    return {"passkey": {**passkey, "count": count}}


async def json_body(request: Request) -> dict:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise WebRefusal(415, "the JSON API takes Content-Type: application/json")
    try:
        body = durable_job.strict_json((await request.body()).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise WebRefusal(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise WebRefusal(400, "the body is not a JSON object")
    return body


async def api_sign(site: WebSite, request: Request, person: WebPerson) -> Response:
    """What the person's passkey signs for a decision or cancel they are about to make: the act's record, made now
    (nothing recorded), and its challenge. {"recorded": ...} when there is nothing to sign (the same decision is recorded)."""
    body = await json_body(request)
    job_id = request.path_params["job_id"]
    rp_id, origin = relying_party(request)
    keys = [k for k in await run_in_threadpool(site.passkeys_of, person) if (k["rpId"], k["origin"]) == (rp_id, origin)]
    if not keys:
        raise WebRefusal(409, f"No passkey of {person.principal} is registered for {origin}: register one first")
    command = body.get("command")
    if command == "decide":
        if body.get("decision") not in durable_job.DECISIONS:
            raise WebRefusal(400, "choose accept, reject or hold")
        fields: dict = {k: str(body.get(k) or "") for k in ("decision", "reviewer", "reason")}
        fields["results_sha256"] = str(body.get("resultsSha256") or "")
        if isinstance(body.get("checked"), list):  # the claims ticked on the page: signed with the decision
            fields["checked"] = [str(c) for c in body["checked"]]
    elif command == "cancel":
        fields = {k: str(body.get(k) or "") for k in ("reviewer", "reason")}
    elif command == "reconcile":
        fields = reconcile_fields(body)
    else:
        raise WebRefusal(400, "sign a decide, a cancel or a reconcile")
    out = await run_in_threadpool(site.act, person, job_id, command, {**fields, "prepare": True})
    if "challenge" not in out:
        return JSONResponse({"recorded": True})
    person.prepared[out["challenge"]] = {"jobId": job_id, "command": command, "out": out, "keys": keys, "rpId": rp_id, "origin": origin}
    return JSONResponse(
        {
            "challenge": out["challenge"],
            "rpId": rp_id,
            "credentials": [k["credentialId"] for k in keys],
            "record": out["record"],
            "timeout": site.passkey_ms,  # the page's deadline: then it says no passkey answered, and offers the ways on
            "unsigned": WEB_UNSIGNED_ACTS,  # the page may offer to record it unsigned instead
        }
    )


async def api_passkey_options(site: WebSite, request: Request, person: WebPerson) -> Response:
    """The options of navigator.credentials.create() for registering this device's passkey for the person's principal."""
    webauthn = durable_job.need_webauthn()
    from webauthn.helpers.structs import AuthenticatorSelectionCriteria, ResidentKeyRequirement, UserVerificationRequirement

    body = await json_body(request)
    rp_id, origin = relying_party(request)
    if not site.store:
        site.job_dir(str(body.get("jobId") or ""))  # --root: registered in this job's state directory
    options = webauthn.generate_registration_options(
        rp_id=rp_id,
        rp_name="durable_job",
        user_name=person.principal,
        user_id=hashlib.sha256(person.principal.encode()).digest()[:16],
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED, user_verification=UserVerificationRequirement.REQUIRED
        ),
        timeout=site.passkey_ms,
    )
    challenge = durable_job.b64url(options.challenge)
    person.registering[challenge] = {"rpId": rp_id, "origin": origin, "jobId": str(body.get("jobId") or "")}
    return JSONResponse(json.loads(webauthn.options_to_json(options)))


async def api_passkey_register(site: WebSite, request: Request, person: WebPerson) -> Response:
    """The browser's new credential, verified for the challenge, relying party and origin asked for, then registered."""
    webauthn = durable_job.need_webauthn()
    body = await json_body(request)
    asked = person.registering.pop(str(body.get("challenge") or ""), None)
    if asked is None:
        raise WebRefusal(409, "This registration was not asked for here, or was already used: tap the passkey button again")
    try:
        made = webauthn.verify_registration_response(
            credential=body.get("credential"),
            expected_challenge=durable_job.b64url_bytes(str(body.get("challenge"))),
            expected_rp_id=asked["rpId"],
            expected_origin=asked["origin"],
            require_user_verification=True,
        )
    except Exception as exc:
        raise WebRefusal(400, f"The passkey was not registered: {durable_job.clip(exc, 160)}") from None
    row = {
        "principal": person.principal,
        "credentialId": durable_job.b64url(made.credential_id),
        "rpId": asked["rpId"],
        "origin": asked["origin"],
        "validAfterUtc": durable_job.now_utc(),
        "validBeforeUtc": None,
        "publicKey": durable_job.b64url(made.credential_public_key),
        "signCount": int(made.sign_count),
    }
    await run_in_threadpool(site.add_passkey, person, asked["jobId"], row)
    return JSONResponse({"registered": row["credentialId"], "principal": person.principal, "rpId": row["rpId"]})


# -- the JSON API and the event streams ------------------------------------------------------------------------------


async def api_jobs(site: WebSite, request: Request, person: WebPerson) -> Response:
    q = request.query_params
    filters: dict[str, Any] = {
        "phases": q.getlist("phase"),
        "owner": q.get("owner"),
        "mine": q.get("mine") in ("1", "true"),
        "to_review": q.get("toReview") in ("1", "true"),
        "held": q.get("held") in ("1", "true"),
        "since": q.get("since"),
        "after": q.get("after"),
    }
    if q.get("limit"):
        if not q["limit"].isdigit() or not 0 < int(q["limit"]) <= 10000:
            raise WebRefusal(400, "limit: give a number of jobs from 1 to 10000")
        filters["limit"] = int(q["limit"])
    filters = {k: v for k, v in filters.items() if v}
    return JSONResponse(await run_in_threadpool(lambda: site.listing(person, **filters)))


async def api_job(site: WebSite, request: Request, person: WebPerson) -> Response:
    view = await run_in_threadpool(site.job_view, person, request.path_params["job_id"])
    return JSONResponse(view["out"])


async def api_decision(site: WebSite, request: Request, person: WebPerson) -> Response:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise WebRefusal(415, "the JSON API takes Content-Type: application/json")
    try:
        body = durable_job.strict_json((await request.body()).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise WebRefusal(400, 'the body is not JSON: send {"decision", "reason", "resultsSha256", "reviewer"}') from None
    if (
        not isinstance(body, dict)
        or body.get("decision") not in durable_job.DECISIONS
        or not durable_job.is_sha256_hex(body.get("resultsSha256"))
    ):
        raise WebRefusal(400, 'send {"decision": accept|reject|hold, "reason", "resultsSha256" (from GET /api/jobs/ID), "reviewer"}')
    fields = {
        "decision": body["decision"],
        "reviewer": str(body.get("reviewer") or person.principal),
        "reason": str(body.get("reason") or ""),
        "results_sha256": body["resultsSha256"],
    }
    if "checked" in body:  # the claims checked, ["ITEM.N", …] (or "all"), recorded with the decision
        if not (body["checked"] == "all" or (isinstance(body["checked"], list) and all(isinstance(c, str) for c in body["checked"]))):
            raise WebRefusal(
                400,
                'checked: send a list of claims ["ITEM.N", …] (N counts the item\'s citations from 1, with draft.N and fact.NAME), or "all"',
            )
        fields["checked"] = body["checked"]
    out = await run_in_threadpool(site.act, person, request.path_params["job_id"], "decide", fields)
    return JSONResponse(out)


async def stream_events(site: WebSite, request: Request, person: WebPerson, read):
    """An event stream's events: the saved status at once, then again after each change, until the client or serve goes."""
    sent = None
    seen = -1
    while not site.stopping.is_set():
        if person.signed_out or site.person(request.session.get("sid"), touch=False) is not person:
            yield {"event": "signed-out", "data": "{}"}
            return
        if site.generation != seen:
            seen = site.generation
            try:
                data = await run_in_threadpool(read, seen)
            except WebRefusal as exc:
                yield {"event": "refused", "data": json.dumps({"error": str(exc), "status": exc.status_code})}
                return
            except durable_job.JobError as exc:
                detail = site.down or durable_job.redact(durable_job.clip(exc, 200), person.secrets)
                data = {"phase": None, "status": "Status unknown", "cls": "unknown", "detail": detail}
            if data != sent:
                sent = data
                yield {"data": json.dumps(data, ensure_ascii=False), "retry": 1000}
        changed = site.changed
        if changed is not None and site.generation == seen:
            try:
                await asyncio.wait_for(changed.wait(), WEB_POLL_SECONDS * 5)
            except TimeoutError:
                pass


def stream(site: WebSite, request: Request, person: WebPerson, read) -> Response:
    return EventSourceResponse(stream_events(site, request, person, read), ping=WEB_PING_SECONDS, headers={"Cache-Control": "no-store"})


async def api_events(site: WebSite, request: Request, person: WebPerson) -> Response:
    job_id = request.path_params["job_id"]
    await run_in_threadpool(site.job_view, person, job_id)  # 404 before the stream opens
    return stream(site, request, person, lambda _seen: site.job_view(person, job_id)["live"])


async def api_list_events(site: WebSite, request: Request, person: WebPerson) -> Response:
    after = request.query_params.get("after")

    def read(_seen):
        view = site.list_view(person, after)
        return {"list": True, "jobs": [[r["jobId"], r["phase"]] for r in view["waiting"] + view["rest"]], "detail": site.down or ""}

    return stream(site, request, person, read)


# -- signing in and out ----------------------------------------------------------------------------------------------


async def login_page(site: WebSite, request: Request) -> Response:
    nxt = local_path(request.query_params.get("next"))
    return site.pages.page(request, "login.html", title="Sign in", store=bool(site.store), next=nxt)


def too_many_sign_ins(site: WebSite, request: Request, role: str, nxt: str, seconds: int, api: bool, kept: dict) -> Response:
    """429 with Retry-After: the sign-in form again (the role kept) or JSON, saying when to try again."""
    at = time.strftime("%H:%M:%S", time.gmtime(time.time() + seconds))
    exc = WebRefusal(
        429,
        f"Too many sign-in attempts for this role or from this address: try again in {seconds} s (at {at} UTC)",
        {"retryAfterSeconds": seconds},
    )
    if api:
        response = site.pages.refused(request, exc, api=True)
    else:
        response = site.pages.page(
            request, "login.html", 429, title="Sign in", store=True, next=nxt, role=role, message=str(exc), kept=kept
        )
    response.headers["Retry-After"] = str(seconds)
    return response


async def login_fields(request: Request) -> tuple[bool, dict]:
    """Whether the sign-in came as JSON (the API) or as the form, and its fields."""
    if not request.headers.get("content-type", "").startswith("application/json"):
        return False, dict(await request.form())
    try:
        body = durable_job.strict_json((await request.body()).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return True, {}
    return True, body if isinstance(body, dict) else {}


async def login(site: WebSite, request: Request) -> Response:
    json_body, body = await login_fields(request)
    role, password = str(body.get("role") or ""), str(body.get("password") or "")
    nxt = local_path(body.get("next"))
    kept = {k: str(body.get(f"keep_{k}") or "") for k in WEB_KEPT_KEYS if k in ("act", "decision", "reason") or body.get(f"keep_{k}")}
    if not site.store:
        return site.pages.refused(
            request, WebRefusal(400, "this serve holds state directories: open the address it printed"), api=json_body
        )
    address = request.client.host if request.client else ""
    wait = site.throttle.wait(role, address)
    if wait:  # refused before the store is asked: no password is checked
        return too_many_sign_ins(site, request, role, nxt, wait, json_body, kept)
    site.throttle.begin(role, address)
    failed = False
    try:
        person = await run_in_threadpool(site.sign_in, role, password)
    except WebRefusal as exc:
        failed = exc.status_code == 401  # an unknown role and a wrong password alike
        if json_body:
            return site.pages.refused(request, exc, api=True)
        return site.pages.page(
            request, "login.html", exc.status_code, title="Sign in", store=True, next=nxt, role=role, message=str(exc), kept=kept
        )
    finally:
        site.throttle.end(role, address, failed)
    site.throttle.signed_in(role)
    request.session["sid"] = site.new_session(person)
    if nxt.startswith("/jobs/") and any(v for k, v in kept.items() if k != "act"):  # filled in on the job's page, recorded only by a tap
        person.drafts[unquote(nxt.removeprefix("/jobs/"))] = kept
    if json_body:
        return JSONResponse({"signedIn": person.principal})
    return RedirectResponse(nxt, status_code=303)


async def logout(site: WebSite, request: Request) -> Response:
    sid = request.session.pop("sid", None)
    if sid:
        site.sign_out(sid)
    return RedirectResponse("/login" if site.store else "/signed-out", status_code=303)


async def signed_out(site: WebSite, request: Request) -> Response:
    return site.pages.page(
        request, "error.html", title="Signed out", heading="Signed out", message="Open a new address from serve to sign in again."
    )


# -- the application -------------------------------------------------------------------------------------------------

PAGE, API, STREAM, OPEN = "page", "api", "stream", "open"  # who may ask: signed in (a page, the API, an event stream: no use), anyone

ROUTES = (  # (path, methods, handler, who may ask)
    ("/", ("GET",), list_page, PAGE),
    ("/login", ("GET",), login_page, OPEN),
    ("/login", ("POST",), login, OPEN),
    ("/logout", ("POST",), logout, OPEN),
    ("/signed-out", ("GET",), signed_out, OPEN),
    ("/jobs/{job_id:str}", ("GET",), job_page, PAGE),
    ("/jobs/{job_id:str}/decision", ("POST",), decision_form, PAGE),
    ("/jobs/{job_id:str}/revise", ("POST",), revise_form, PAGE),
    ("/jobs/{job_id:str}/retry", ("POST",), retry_form, PAGE),
    ("/jobs/{job_id:str}/cancel", ("POST",), cancel_form, PAGE),
    ("/jobs/{job_id:str}/reconcile", ("POST",), reconcile_form, PAGE),
    ("/jobs/{job_id:str}/resume", ("POST",), resume_form, PAGE),
    ("/api/jobs", ("GET",), api_jobs, API),
    ("/api/events", ("GET",), api_list_events, STREAM),
    ("/api/jobs/{job_id:str}", ("GET",), api_job, API),
    ("/api/jobs/{job_id:str}/events", ("GET",), api_events, STREAM),
    ("/api/jobs/{job_id:str}/decision", ("POST",), api_decision, API),
    ("/api/jobs/{job_id:str}/sign", ("POST",), api_sign, API),
    ("/api/passkeys/options", ("POST",), api_passkey_options, API),
    ("/api/passkeys", ("POST",), api_passkey_register, API),
)


def endpoint(site: WebSite, handler, who: str):
    """A Starlette endpoint for a route of ROUTES: the handler, given the site, behind its sign-in check."""

    async def route(request: Request) -> Response:
        if who == OPEN:
            return await handler(site, request)
        return await guarded(site, handler, request, api=who != PAGE, use=who != STREAM)

    return route


@contextlib.asynccontextmanager
async def lifespan(site: WebSite):
    """While the app runs: the watcher thread; at its end, every stream stopped and every session signed out."""
    site.loop = asyncio.get_running_loop()
    site.bump()
    watcher = threading.Thread(target=site.watch, name="durable_job serve watcher", daemon=True)
    watcher.start()
    yield
    site.stopping.set()
    site.bump()
    watcher.join(timeout=WEB_POLL_SECONDS * 3)
    for sid in list(site.sessions):
        site.sign_out(sid)


class NoStore:
    """Every answer: not cached, not sniffed, sent to no referrer (the pages show sensitive documents)."""

    HEADERS = ((b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"))

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *self.HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def web_app(site: WebSite):
    """The Starlette application: pages, forms, the JSON API and the event streams, behind sessions and CSRF checks."""
    routes = [Route(path, endpoint(site, handler, who), methods=list(methods)) for path, methods, handler, who in ROUTES]
    middleware = [
        Middleware(
            SessionMiddleware,
            secret_key=secrets.token_urlsafe(32),  # in memory: a restarted serve knows no session, nor any password
            session_cookie=WEB_SESSION_COOKIE,
            max_age=None,
            same_site="strict",
            https_only=site.secure,
        ),
        Middleware(SameOrigin, site=site),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lambda _app: lifespan(site))
    return BodyLimit(KeepTyped(NoStore(app)))


# -- serve -----------------------------------------------------------------------------------------------------------


def check_serve_address(host: str, certfile: str | None, keyfile: str | None, behind_proxy: str | None) -> bool:
    """Refuse what would expose sessions and passwords; whether cookies must be Secure (TLS here or at the proxy)."""
    if bool(certfile) != bool(keyfile):
        raise durable_job.UsageError("--certfile and --keyfile go together: give both (the certificate and its private key), or neither")
    for flag_name, path in (("--certfile", certfile), ("--keyfile", keyfile)):
        if path and not os.path.isfile(path):
            raise durable_job.UsageError(f"{flag_name} {path} is not a file; name the PEM file")
    if host not in WEB_LOOPBACK and not certfile and not behind_proxy:
        raise durable_job.UsageError(
            f"--host {host} is not a loopback address: passwords and sessions would cross the network unencrypted; give "
            "--certfile and --keyfile, or --behind-proxy ADDRESS when a proxy in front of serve terminates TLS"
        )
    return bool(certfile or behind_proxy)


def check_serve_args(store: str | None, roots, port: int, idle_minutes: float, passkey_seconds: int) -> None:
    """Refuse a serve of nothing, of both, of a folder that is not there, or with a port, idle time or passkey wait out
    of range."""
    if bool(store) == bool(roots):
        raise durable_job.UsageError(
            f"serve needs --store URL (a team's store, or set {durable_job.STORE_ENV}) or --root DIR (your state directories), one"
        )
    if store:
        team_store.check_store_url(store)
        team_store.need_psycopg()
    for root in roots:
        if not os.path.isdir(root):
            raise durable_job.UsageError(f"--root {root} is not a folder; name the folder that holds your state directories")
    if not WEB_IDLE_LEAST_MINUTES <= idle_minutes <= 24 * 60:
        raise durable_job.UsageError(
            f"--idle-minutes {idle_minutes:g}: give a number of minutes from {WEB_IDLE_LEAST_MINUTES:g} (thirty seconds) to 1440 "
            f"(default {WEB_IDLE_MINUTES:g})"
        )
    if not 0 <= port <= 65535:
        raise durable_job.UsageError(f"--port {port}: give a port from 1 to 65535 (0: any free one)")
    if not 1 <= passkey_seconds <= WEB_PASSKEY_MOST_SECONDS:
        raise durable_job.UsageError(
            f"--passkey-seconds {passkey_seconds}: give a whole number of seconds from 1 to {WEB_PASSKEY_MOST_SECONDS} "
            f"(default {WEB_PASSKEY_SECONDS}) for the page to wait for a passkey's answer"
        )


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the address is printed: a browser's connection waits in its queue."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise durable_job.UsageError(
            f"serve cannot listen on {host}:{port} ({exc.strerror}); give another --port (0: any free one)"
        ) from None
    sock.listen(128)  # from now on a browser's connection waits in the queue, even before the server's first accept
    return sock


class Server(uvicorn.Server):
    """uvicorn's server, stopped by SIGTERM or Ctrl-C at once: every open event stream ends; serve then exits 0."""

    def __init__(self, config: uvicorn.Config, site: WebSite):
        super().__init__(config)
        self.site = site
        self.stopped: list = []  # the signal that stopped it

    def handle_exit(self, sig, frame):
        """SIGTERM or Ctrl-C: stop, ending every open event stream at once; serve then exits 0 (a stop asked for)."""
        self.stopped.append(signal.Signals(sig).name)
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop without waiting for open requests
        self.should_exit = True
        self.site.stopping.set()
        sse_starlette.sse.AppStatus.should_exit = True
        if self.site.loop is not None:
            self.site.loop.call_soon_threadsafe(self.site.bump)


def serve(
    *,
    store: str | None = None,
    roots=(),
    host: str = "127.0.0.1",
    port: int = 8765,
    certfile: str | None = None,
    keyfile: str | None = None,
    behind_proxy: str | None = None,
    idle_minutes: float = WEB_IDLE_MINUTES,
    passkey_seconds: int = WEB_PASSKEY_SECONDS,
    program: str | None = None,
    say=None,
    notify: str | None = None,
) -> dict:
    """Serve the live review web app until SIGTERM or Ctrl-C: a team's store (store=URL) or state directories (roots);
    with a notification config (notify, else DURABLE_JOB_NOTIFY), also deliver their notifications.

    Everyone signs in (a store's role and password; a --root's one-time printed token) and sees and does exactly
    what the CLI lets them. The address to open is printed once (say, default stderr).
    """
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    check_serve_args(store, roots, port, idle_minutes, passkey_seconds)
    secure = check_serve_address(host, certfile, keyfile, behind_proxy)
    # this process's own seals, from the bytes it loaded (read now, before a release could replace them): a job
    # sealed by another engine is shown read-only
    durable_job.code_sha256()
    durable_job.engine_sha256()
    durable_job.engine_sha256(team_store.STORE_ENGINE_PARTS)
    site = WebSite(
        store=store,
        roots=[os.path.abspath(r) for r in roots],
        program=program or durable_job.default_program(),
        idle_seconds=idle_minutes * 60,
        passkey_seconds=passkey_seconds,
        secure=secure,
        say=say,
    )
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    site.base_address = f"{'https' if certfile else 'http'}://{shown}:{sock.getsockname()[1]}/"
    config = uvicorn.Config(
        web_app(site),
        log_level="warning",
        access_log=False,  # an address can carry the --root token: nothing logs addresses
        proxy_headers=bool(behind_proxy),
        forwarded_allow_ips=behind_proxy,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        timeout_graceful_shutdown=5,
        lifespan="on",
    )
    server = Server(config, site)
    try:
        halt = start_sender(store, site.roots, program, notify)  # a sender that cannot deliver refuses before any address is shown
    except BaseException:
        sock.close()
        raise
    say(f"serving {site.where()}: open {site.address_with_token() if site.roots else site.address()}")
    if host in WEB_LOOPBACK and host != "localhost":  # WebAuthn takes a host name as relying party, never an address
        say(f"passkeys need a host name: on this machine the same pages answer at http://localhost:{sock.getsockname()[1]}/")
    try:
        server.run(sockets=[sock])
    finally:
        if halt is not None:
            halt()
    return {"served": site.address(), "stoppedBy": server.stopped[0] if server.stopped else None}


def start_sender(store: str | None, roots: list, program: str | None, notify: str | None):
    """With a notification config, deliver the store's (or the folders') notifications in a thread while serving; a
    function that stops it (None without a config: nothing of the sender is imported). serve's own address knows no
    password: a store's sender logs in as its URL's role (the administrator or a worker; a URL without ROLE@ as the
    login name) with its password from ~/.pgpass, PGPASSFILE or PGPASSWORD. One that cannot is refused here, at start."""
    path = os.environ.get(durable_job.NOTIFY_ENV) if notify is None else notify
    if not path:
        return None
    from durable_job_team import notify as notifying  # only with a notification config

    config = notifying.read_config(path)
    boxes: list = []
    if store:
        target = team_store.PgStore(store, "", program=program)
        try:
            sender, boxes = notifying.store_sender(target, config)
        except durable_job.JobError as exc:
            role = team_store.connect_target(store)["role"]
            named = "" if "@" in store.partition("://")[2].partition("/")[0] else ", the login name: the URL names no ROLE@"
            raise durable_job.StateError(
                f"serve --notify cannot deliver: its sender connects as role {role}{named} ({exc}); name the store's "
                "administrator or a worker role in --store (postgresql://worker1@HOST/DBNAME) with its password in ~/.pgpass "
                "or the file PGPASSFILE names (people still sign in as themselves), or serve without --notify and run "
                "`notify --follow` as that role"
            ) from None
    else:
        sender = notifying.dirs_sender(roots, config)
    halt, thread = notifying.background(sender)

    def stop() -> None:
        halt.set()
        thread.join()
        for box in boxes:
            box.close()

    return stop

"""durable_job_team.cli: the team's commands, which durable_job.py (the one-file core) does not hold.

serve, work, submit, migrate, notify, passkeys, rotate-key, shred, prune, usage, limits, jobs and delete: what a team's
store, its workers, its web app and its administrator do, and what lists or tends many jobs at once. Each is a plain
function over the core's command API (as the core's own commands are), its text renderer and its row of COMMANDS; the
package's team() hands those rows to the core (durable_job.Team), whose CLI parses and prints them as its own. None is
in the engine a job seals: a release that changes only this file strands no job.

The store, its workers, the web app and the notifier are imported inside the commands that use them (part()), so a
command loads only what it uses, and the core's CLI can list these commands without loading any of them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import cast

from durable_job import (
    FIGURE_WHERE,
    FIGURES,
    JOB_FILE,
    KEY_FILE_ENV,
    KEY_FIX,
    KEY_FLAG,
    NOTIFY_ENV,
    PASSKEY_FILE_HEADER,
    PASSKEY_LINE_FIELDS,
    PRICES_FLAG,
    REQUESTS_PER_MINUTE_ENV,
    STORE_ENV,
    STORE_FLAG,
    TOKENS_PER_MINUTE_ENV,
    AdminStore,
    Command,
    DecisionError,
    Job,
    JobError,
    Journal,
    Kek,
    Keys,
    SealError,
    Snapshot,
    StateDirStore,
    StateError,
    Store,
    UsageError,
    Writes,
    add_tokens,
    append_link,
    call_tokens,
    canonical,
    chained,
    check_program_seals,
    clip,
    command_line,
    cost_words,
    counted,
    crash_point,
    data_key_row,
    default_program,
    endpoint_of,
    estimated_cost,
    figure_counts,
    flag,
    flags_of,
    job_tokens,
    journal_hold,
    labelled_lines,
    need_job_id,
    no_tokens,
    now_utc,
    os_account,
    passkey_problem,
    path_argument,
    program_fields,
    read_kek_file,
    read_prices,
    read_snapshot,
    rotated_refusal,
    set_up_by_its_administrator,
    store_from,
    strict_json,
    where_it_stands,
    with_manifests_job,
)


def part(name: str):
    """durable_job_team.<name>, imported by the command that uses it (the store needs psycopg, the web app its
    libraries), from this same package."""
    return importlib.import_module(f"durable_job_team.{name}")


def cost_cell(cost: dict | None) -> str:
    """A table's cost column: the amount, `no price` when none of its models is priced, `+ unpriced` when some are not."""
    if not cost:
        return "-"
    if not cost["pricesSetOn"] and cost["unpriced"]:
        return "no price"
    return f"{cost['amount']:.6f}" + (" + unpriced" if cost["unpriced"] else "")


def passkey_line(row: dict) -> str:
    """One registered passkey as a line of an allowed-passkeys file; a malformed row (written before rows were checked)
    as a comment naming why, so that no line `passkeys` prints is one verify refuses."""
    problem = passkey_problem({**row, "origin": row.get("origin") or ""})
    if problem:
        return f"# skipped passkey {clip(row.get('credentialId'), 24)} of {clip(row.get('principal'), 40)}: {problem}"
    return " ".join(str(row.get(k) or "-") for k in PASSKEY_LINE_FIELDS)


def delete(store: Store) -> dict:
    """Remove a job from a store entirely, leaving a tombstone (who, when, its receipt's sha256) that keeps its jobId
    taken: the store's administrator's alone, refused while anyone holds the job."""
    need_job_id(store)
    if not store.shared:
        raise UsageError(
            "delete removes a job from a --store; a state directory is one job's folder: remove the folder itself once its receipt is kept elsewhere"
        )
    return part("store").delete_job(store)


def shred(store: AdminStore) -> dict:
    """Destroy an encrypted job's data key: its content unreadable for good, its ids, hashes, chain and signatures kept."""
    need_job_id(store)
    if store.shared:
        return part("store").shred_job(store)
    job = store.load_job()
    owner = store.people(job)["owner"]
    if owner != store.principal():
        raise DecisionError(f"job {job['jobId']} in {store.where()} is {owner}'s: only its owner shreds it")
    with store.lock("shred"):
        journal = store.journal(writes=Writes(chained(job)))
        try:
            tombstone = shred_key(store, journal, job, store.principal())
        finally:
            journal.close()
    crash_point("after-shred", job)
    store.scrub_freed()
    return {"jobId": job["jobId"], "shredded": tombstone}


def shred_key(store: AdminStore, journal: Journal, job: Job, who: str) -> dict:
    """The shred itself, one transaction: the wrapped data key emptied (overwritten where the store can) and its tombstone
    (who, when, the KEK's id) linked into the chain in clear; a job shredded already says when, and by whom."""
    store.secure_writes(journal)
    with journal.transaction():
        row = data_key_row(journal)
        if row is None:
            raise UsageError(f"job {job['jobId']} is not encrypted at rest: it has no data key to shred (delete the job instead)")
        if row["shredded_utc"]:
            return {
                "act": "shred",
                "kekId": row["kek_id"],
                "principal": row["shredded_by"],
                "shreddedUtc": row["shredded_utc"],
                "again": True,
            }
        crash_point("before-shred", job)
        stamp = now_utc()
        journal.change(
            "UPDATE {data_keys} SET wrapped = NULL, shredded_utc = {p.at}, shredded_by = {p.principal}{where}",
            at=stamp,
        )
        record = {"act": "shred", "kekId": row["kek_id"], "principal": who, "shreddedUtc": stamp}
        append_link(journal, "shred", "data_keys", "data", record, plain=True)  # the tombstone stays in clear: it is what remains
        crash_point("in-shred", job)
    return record


def rotate_key(store: AdminStore, new_key_file: str) -> dict:
    """Rewrap the data key under a new key-encryption key (a store: every live job's, one transaction); content untouched."""
    new = read_kek_file(new_key_file, "--new-key-file")
    old = store.keys.kek()
    if old is None:
        raise UsageError(f"rotate-key needs the current key as well as the new one: {KEY_FIX}")
    if store.shared:
        return part("store").rotate_keys(store, old, new)
    job = store.load_job()
    with store.lock("rotate-key"):
        journal = store.journal()
        try:
            store.secure_writes(journal)
            with journal.transaction():
                done = rewrap(journal, job["jobId"], old, new)
        finally:
            journal.close()
    store.scrub_freed()
    return {"jobId": job["jobId"], "rotated": done, "kekId": new.id, "next": f"from now on {KEY_FILE_ENV} must name {new_key_file}"}


def rewrap(journal: Journal, job_id: str, old: Kek, new: Kek) -> str:
    """One job's data key rewrapped under `new` (in the caller's transaction); what was done."""
    row = data_key_row(journal)
    if row is None:
        raise UsageError(f"job {job_id} is not encrypted at rest: it has no data key to rewrap")
    if row["shredded_utc"]:
        return "shredded: no key to rewrap"
    if row["kek_id"] == new.id:
        return "already under the new key"
    if row["kek_id"] != old.id:
        raise rotated_refusal(job_id, row["kek_id"], old)
    journal.change(
        "UPDATE {data_keys} SET kek_id = {p.kek}, wrapped = {p.wrapped}{where}",
        kek=new.id,
        wrapped=new.wrap(old.unwrap(row["wrapped"], job_id), job_id),
    )
    return "rewrapped"


def notify(
    *,
    store: str | None = None,
    roots=(),
    state_dir: str | None = None,
    program: str | None = None,
    from_env: bool = False,
    config: str | None = None,
    follow: bool = False,
    stop: threading.Event | None = None,
) -> dict:
    """Deliver the due notifications of a store (its administrator or a worker role), a state directory or the state
    directories under folders (their owner), at least once each; with follow, until stopped (SIGTERM, Ctrl-C)."""
    notifier = part("notify")
    path = notifier.config_path(config)
    if not path:
        raise UsageError(f"notify needs a notification config: --notify FILE, or set {NOTIFY_ENV} (see docs/CONTRACT.md, Notifications)")
    targets = notifier.read_config(path)
    if sum(map(bool, (store, roots, state_dir))) != 1:
        raise UsageError(f"name the outbox: --store URL (or set {STORE_ENV}), --state-dir DIR, or --root DIR (repeatable)")
    boxes: list = []
    if store:
        sender, boxes = notifier.store_sender(part("store").PgStore(store, "", from_env=from_env, program=program), targets)
    else:
        folders = [state_dir] if state_dir else list(roots)
        for folder in folders:
            if os.stat(folder).st_uid != os.geteuid():
                raise UsageError(f"{folder} is {os_account(os.stat(folder).st_uid)}'s: its owner delivers its notifications")
        sender = notifier.dirs_sender(folders, targets)
    try:
        if follow:
            sender.follow(stop or stop_on_signals())
        else:
            sender.once()
        waiting = sender.set_aside_rows()  # every row set aside so far (this run's and earlier ones'), for a person
    finally:
        for box in boxes:
            box.close()
    return {
        "delivered": sender.delivered,
        "failedTries": sender.failed,
        "setAside": sender.set_aside,
        "setAsideInAll": waiting,
        "followed": follow,
    }


def stop_on_signals():
    """An event SIGTERM or Ctrl-C sets (notify --follow ends at its next pass)."""
    import signal
    import threading

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


JOB_PHASES = (
    "not-started",
    "ready",
    "running",
    "uncertain-call",
    "awaiting-review",
    "deciding",
    "decided",
    "cancelled",
    "unreadable",
)


def page_cursor(kind: str, key) -> str:
    """The opaque --after cursor of a listing's last row: base64url of its kind and key (a store: createdAtUtc, jobId;
    state directories: the path). Stable: rows added later sort after it or are skipped, never repeated."""
    import base64

    return base64.urlsafe_b64encode(canonical([kind, *key])).decode("ascii").rstrip("=")


def read_cursor(cursor: str, kind: str, size: int) -> list:
    """The key a page_cursor of this kind holds, or a UsageError: a cursor is only ever one a listing printed."""
    import base64

    refused = UsageError(
        f"--after {clip(cursor, 60)!r} is not a cursor of this listing: give the nextCursor that `jobs` printed "
        f"with the same --store or --root (or leave --after out for the first page)"
    )
    try:
        key = strict_json(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError:  # binascii.Error too
        raise refused from None
    if not (isinstance(key, list) and len(key) == size + 1 and key[0] == kind and all(isinstance(k, str) for k in key)):
        raise refused
    return key[1:]


def check_listing_flags(phases, since: str | None, limit: int | None) -> None:
    bad = [p for p in phases if p not in JOB_PHASES]
    if bad:
        raise UsageError(f"--phase {bad[0]!r}: give one of {', '.join(JOB_PHASES)}")
    if since is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?Z?)?", since):
        raise UsageError(f"--since {since!r}: give a UTC date or time, for example 2026-12-01 or 2026-12-01T09:30Z")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise UsageError(f"--limit {limit!r}: give how many jobs a page shows, 1 or more")


def jobs(
    *,
    store: str | None = None,
    roots=(),
    program: str | None = None,
    from_env: bool = False,
    phases=(),
    owner: str | None = None,
    mine: bool = False,
    to_review: bool = False,
    since: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    prices: str | None = None,
    sealed_by_other: bool = False,
    held: bool = False,
    keys: Keys | None = None,
) -> dict:
    """List the jobs in a store (store=URL: those this role may see) or in the state directories under folders (roots).

    Filters: phases (any of), owner (a role, or an account under roots), mine (owned by whoever lists), to_review
    (awaiting review and naming me as a reviewer, or owned by me when it names none), since (created on or after),
    sealed_by_other (only the jobs another program or graph version sealed: each row's actsHere says which), held (only
    the jobs a run's refusal holds: each row's hold says who met it, what it said and the fix). limit: at most this many rows (None: all); after: the nextCursor of the page before. Each row has its tokens; with
    prices (a file, see read_prices) also its estimatedCost. `nextCursor` and `nextPage` say how to read on.
    """
    if roots and store:
        raise UsageError("give --store URL or --root DIR, not both")
    check_listing_flags(phases, since, limit)
    if not store and not roots:
        raise UsageError(f"name the jobs to list: --store URL (or set {STORE_ENV}), or --root DIR")
    priced = read_prices(prices) if prices else None
    filters = {
        "phases": list(phases),
        "owner": owner,
        "mine": mine,
        "to_review": to_review,
        "since": since,
        "sealed_by_other": sealed_by_other,
        "held": held,
    }
    if store:
        team = part("store")
        lister = team.PgStore(store, "", from_env=from_env, program=program, keys=keys)
        kind, address, prog = "store", lister.store_address(), lister.program
        try:
            rows, last = team.store_job_rows(lister, filters, read_cursor(after, kind, 2) if after else None, limit, priced)
            children = team.fork_children(lister) if rows else {}  # (a store not set up lists nothing, and has no jobs table)
        finally:
            lister.close()
    else:
        kind, address, prog = "dirs", [w for r in roots for w in ("--root", os.path.abspath(r))], program or default_program()
        rows, last = dir_job_rows(list(roots), program, filters, read_cursor(after, kind, 1) if after else None, limit, priced, keys)
        children = {}
        for row in rows:  # a state directory's forks: those under the same folders
            if row.get("forkedFrom"):
                children.setdefault(row["forkedFrom"], []).append(row["jobId"])
    for row in rows:
        if children.get(row["jobId"]):
            row["forks"] = children[row["jobId"]]
    out: dict = {"jobs": rows}
    if last is not None:
        out["nextCursor"] = cursor = page_cursor(kind, last)
        out["nextPage"] = command_line(prog, "jobs", address, *listing_flags(filters, prices), "--limit", str(limit), "--after", cursor)
    return out


def listing_flags(filters: dict, prices: str | None) -> list:
    """The flags that list the same rows again (a next page's command)."""
    flags = [w for p in filters["phases"] for w in ("--phase", p)]
    flags += ["--owner", filters["owner"]] if filters["owner"] is not None else []
    flags += ["--mine"] if filters["mine"] else []
    flags += ["--to-review"] if filters["to_review"] else []
    flags += ["--since", filters["since"]] if filters["since"] else []
    flags += ["--sealed-by-other"] if filters.get("sealed_by_other") else []
    flags += ["--held"] if filters.get("held") else []
    return flags + (["--prices", os.path.abspath(prices)] if prices else [])


def keeps(row: dict, filters: dict, me: str) -> bool:
    """Whether a listed row passes the filters (the ones a store's statement did not already apply are what matter)."""
    return (
        (not filters["phases"] or row["phase"] in filters["phases"])
        and (filters["owner"] is None or row["owner"] == filters["owner"])
        and (not filters["mine"] or row["owner"] == me)
        and (
            not filters["to_review"]
            or (row["phase"] == "awaiting-review" and (me in row["reviewers"] if row["reviewers"] else row["owner"] == me))
        )
        and (filters["since"] is None or str(row["createdAtUtc"] or "") >= filters["since"].rstrip("Z"))
        and (not filters.get("sealed_by_other") or row.get("actsHere") is False)
        and (not filters.get("held") or row.get("hold") is not None)
    )


def dir_job_rows(
    roots: list, program: str | None, filters: dict, after: list | None, limit: int | None, prices: dict | None, keys: Keys | None
):
    """One page of the state directories under the folders, in path order, and the last path when more remain."""
    me = os_account(os.geteuid())
    found: list[tuple[str, dict]] = []
    for store in state_dirs_under(roots, program, keys):
        if after is not None and os.path.abspath(store.root) <= after[0]:
            continue
        row = job_row(store, None, prices)
        row.pop("me", None)
        if keeps(row, filters, me):
            found.append((os.path.abspath(store.root), row))
            if limit is not None and len(found) > limit:
                return [row for _, row in found[:limit]], [found[limit - 1][0]]
    return [row for _, row in found], None


def state_dirs_under(roots: list, program: str | None = None, keys: Keys | None = None) -> list:
    """A StateDirStore for every state directory at any depth under the roots, in path order.

    A folder is one when it holds a job.json file; nothing else is read to tell. Symlinked
    folders are not followed (a link to a parent would loop), and a state directory's own
    folder is not searched further.
    """
    found = []
    for root in roots:
        if not os.path.isdir(root):
            raise UsageError(f"--root {root} is not a folder; name the folder that holds your state directories (at any depth)")
        errors: list = []
        for folder, subfolders, files in os.walk(root, onerror=errors.append, followlinks=False):
            subfolders.sort()
            if JOB_FILE in files and os.path.isfile(os.path.join(folder, JOB_FILE)):
                found.append(folder)
                subfolders.clear()
        if errors and errors[0].filename == root:
            raise UsageError(
                f"--root {root} cannot be listed ({errors[0].strerror}); name the folder that holds your state directories"
            ) from None
    return [StateDirStore(folder, program, keys=keys) for folder in sorted(dict.fromkeys(os.path.abspath(f) for f in found))]


def sealed_here(job: Job) -> bool:
    """Whether this program may act on the job: the graph version, its own bytes and the dependencies it sealed (an
    upgrade strands the jobs sealed before it: `jobs --sealed-by-other` lists them, for their old program to finish)."""
    try:
        check_program_seals(job)
    except SealError:
        return False
    return True


def job_row(store: Store, snap: Snapshot | StateError | None = None, prices: dict | None = None) -> dict:
    """One line of `jobs`: where a job stands, the command that takes it on, its tokens (and cost, with prices).

    It carries `me` (who reads, in a store) for the listing's own filters, which take it out again.
    """
    try:
        if isinstance(snap, StateError):
            raise snap
        snap = snap or read_snapshot(store)
        try:
            out = where_it_stands(snap, {}, ended_seals=False)
        finally:
            snap.close()
        job = snap.job
        final = snap.final or {}
        row = {
            "jobId": job["jobId"],
            "phase": out["phase"],
            "next": out["next"],
            **store.people(job),
            "decidedBy": {"principal": final.get("principal"), "reviewer": final.get("reviewer")} if final else None,
            "approvedBy": job.get("approvedBy"),
            "mode": job.get("mode"),
            "createdAtUtc": job.get("createdAtUtc"),
            "tokens": job_tokens(snap.calls),
            "figures": job_figures(snap),
            "actsHere": sealed_here(job),
            "hold": out["hold"],
            **({"waitsForSlot": out["waitsForSlot"]} if out.get("waitsForSlot") else {}),
            **({"forkedFrom": job["forkedFrom"]["jobId"]} if job.get("forkedFrom") else {}),
        }
        if prices is not None:
            row["estimatedCost"] = estimated_cost(prices, {job.get("model"): row["tokens"]})
        if not row["actsHere"]:  # which program to finish it with
            row["sealedBy"] = {
                **program_fields(job, ("engineSha256", "release", "codeSha256")),
                "version": job.get("version"),
                "dependencies": job.get("dependencies"),
            }
        if out["phase"] == "running":  # which process (a `work` worker or a person's command), on which host
            row["runningBy"] = {k: out["running"].get(k) for k in ("command", "host", "pid", "sinceUtc")}
        if store.shared and store.row is not None:
            row["me"] = store.row.get("me")
        return row
    except JobError as exc:
        try:  # a refused key's hold is written plain (record_hold): `jobs --held` lists the job it holds, without the key
            hold = journal_hold(store.read_journal())
        except JobError:
            hold = None
        record, people = unread_record(store)
        return {
            "jobId": getattr(store, "job_id", None) or store.where(),
            "phase": "unreadable",
            "next": str(exc),
            **people,
            "decidedBy": None,
            "approvedBy": None,
            "mode": record.get("mode"),
            "createdAtUtc": record.get("createdAtUtc"),
            "tokens": None,
            "hold": hold,
            "figures": None,
        }


def unread_record(store: Store) -> tuple[dict, dict]:
    """What an unreadable job's `jobs` row still knows from what stays clear without the key: its record (job.json, a
    store's jobs.record_json: its mode and creation time) and its people (a store's owner and reviewers columns, a
    state directory's record or, that failing, the account owning job.json); an owner nothing names is `unknown`."""
    try:
        job: dict = dict(store.load_job())
    except JobError:
        job = {}
    try:
        people = store.people(cast(Job, job))
    except Exception:  # a record too damaged to name anyone: the row says so rather than fail the listing
        people = {}
    return job, {"owner": people.get("owner") or "unknown", "reviewers": list(people.get("reviewers") or [])}


def job_figures(snap: Snapshot) -> dict | None:
    """A job's FIGURES, the one answer `jobs`, the web list and the job page show: counted from the results under review
    (after the decision, the decided ones), or None for a job sealed before results carried support flags."""
    return figure_counts(snap.results) if snap.job.get("figures") == FIGURES else None


def figures_words(counts: dict | None) -> str:
    """FIGURES as `jobs` prints it: quote/source/nowhere (`-` for a job without support flags)."""
    return "/".join(str(counts[w]) for w in FIGURE_WHERE) if counts else "-"


USAGE_BY = ("owner", "model", "day")


def limits(
    *,
    store: str | None,
    endpoint: str | None = None,
    model: str | None = None,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    clear: bool = False,
    program: str | None = None,
    from_env: bool = False,
) -> dict:
    """The limits a team sets once (the store's administrator): requests (and tokens) per minute for an endpoint and a
    model, kept in the store, taken slot by slot by every run before it journals a call pending. Without a number (or
    --clear) it sets nothing and lists them."""
    if not store:
        raise UsageError(
            f"limits are kept in a shared store: give --store URL (or set {STORE_ENV}); a --state-dir job takes its limit from "
            f"{REQUESTS_PER_MINUTE_ENV} and {TOKENS_PER_MINUTE_ENV}"
        )
    sets = requests_per_minute is not None or tokens_per_minute is not None or clear
    if sets and not (endpoint and model):
        raise UsageError("limits: give --endpoint URL and --model M with --requests-per-minute N (or --clear): the limit is on that pair")
    if sets and endpoint_of(endpoint or "") is None:
        raise UsageError(f"limits: --endpoint {clip(endpoint, 80)!r} is not an http(s) URL: give the OPENAI_BASE_URL your runs use")
    if clear and (requests_per_minute is not None or tokens_per_minute is not None):
        raise UsageError("limits: --clear removes the limit; give it without --requests-per-minute or --tokens-per-minute")
    if tokens_per_minute is not None and requests_per_minute is None:
        raise UsageError("limits: --tokens-per-minute goes with --requests-per-minute N: a limit always bounds the requests")
    for name, value in (("--requests-per-minute", requests_per_minute), ("--tokens-per-minute", tokens_per_minute)):
        if value is not None and value < 1:
            raise UsageError(f"limits: {name} is {value}: give a positive whole number (or --clear to remove the limit)")
    return part("store").store_limits(
        store,
        endpoint=endpoint_of(endpoint) if sets and endpoint else endpoint,
        model=model,
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        clear=clear,
        program=program,
        from_env=from_env,
    )


def registered_passkeys(*, store: str | None = None, roots=(), program: str | None = None, from_env: bool = False) -> dict:
    """The passkeys registered on serve's page: in a store (every role's), or in the state directories under folders
    (roots), each once. `lines` are an allowed-passkeys file (verify --allowed-passkeys FILE) for a person to review
    and keep outside the store: verify never trusts a key from the store alone."""
    if roots and store:
        raise UsageError("give --store URL or --root DIR, not both")
    if not store and not roots:
        raise UsageError(f"name where the passkeys are registered: --store URL (or set {STORE_ENV}), or --root DIR")
    if store:
        lister = part("store").PgStore(store, "", from_env=from_env, program=program)
        try:
            rows, where = lister.passkey_rows(), {"store": lister.public}
        finally:
            lister.close()
    else:
        found: dict[str, dict] = {}
        for state in state_dirs_under(list(roots), program):
            for row in state.passkey_rows():
                found.setdefault(row["credentialId"], row)
        rows, where = (
            sorted(found.values(), key=lambda r: (r["principal"], r["credentialId"])),
            {"roots": [os.path.abspath(r) for r in roots]},
        )
    return {**where, "passkeys": rows, "lines": [PASSKEY_FILE_HEADER, *(passkey_line(r) for r in rows)]}


def usage(
    *,
    store: str | None = None,
    roots=(),
    since: str | None = None,
    by: str = "owner",
    prices: str | None = None,
    program: str | None = None,
    from_env: bool = False,
) -> dict:
    """Sum the tokens of every call the journal records for the jobs of a store (those this role may see) or under
    folders (roots): by owner, model or day (the call's UTC day), the calls made on or after `since`; with prices,
    an estimated cost from that file. A call without usage (pending, rejected, reconciled by hand) adds nothing."""
    if roots and store:
        raise UsageError("give --store URL or --root DIR, not both")
    if by not in USAGE_BY:
        raise UsageError(f"--by {by!r}: give one of {', '.join(USAGE_BY)}")
    check_listing_flags((), since, None)
    if not store and not roots:
        raise UsageError(f"name the jobs to sum: --store URL (or set {STORE_ENV}), or --root DIR")
    priced = read_prices(prices) if prices else None
    cutoff = (since or "").rstrip("Z")
    if store:
        team = part("store")
        lister = team.PgStore(store, "", from_env=from_env, program=program)
        try:
            spent = team.store_usage(lister, cutoff)
        finally:
            lister.close()
        where: dict = {"store": lister.public}
    else:
        spent = [dir_usage(found, cutoff) for found in state_dirs_under(list(roots), program)]
        where = {"roots": [os.path.abspath(r) for r in roots]}
    groups: dict[str, dict] = {}
    whole: dict = {"jobs": set(), "calls": 0, "tokens": no_tokens(), "byModel": {}}
    for job in spent:
        job["model"] = job["model"] or "unknown"  # a record that cannot be read still has its calls counted
        for call in job["calls"]:
            name = {"owner": job["owner"] or "unknown", "model": job["model"], "day": call["at"][:10]}[by]
            tokens = call_tokens(call["usage"])
            for group in (groups.setdefault(name, {"jobs": set(), "calls": 0, "tokens": no_tokens(), "byModel": {}}), whole):
                group["jobs"].add(job.get("where") or job["jobId"])  # a state directory is its own job: ids may repeat
                group["calls"] += 1
                add_tokens(group["tokens"], tokens)
                add_tokens(group["byModel"].setdefault(job["model"], no_tokens()), tokens)

    def shown(group: dict, head: dict) -> dict:
        out = {**head, "jobs": len(group["jobs"]), "calls": group["calls"], "tokens": group["tokens"]}
        if priced is not None:
            out["estimatedCost"] = estimated_cost(priced, group["byModel"])
        return out

    unreadable = [{"jobId": job["jobId"], "why": job["unreadable"]} for job in spent if job.get("unreadable")]
    return {
        **where,
        "by": by,
        "since": since,
        "groups": [shown(groups[name], {by: name}) for name in sorted(groups)],
        "total": shown(whole, {}),
        **({"unreadable": unreadable} if unreadable else {}),
    }


def dir_usage(store: Store, cutoff: str) -> dict:
    """A state directory's job for `usage`: {jobId, owner, model, calls: [{at, usage}]}, read from what stays clear
    without the key (job.json, each call's time and usage_json), so a job encrypted at rest, or shredded, counts as any
    other; one whose record or journal cannot be read at all adds nothing and says why (`unreadable`)."""
    journal = None
    try:
        job = store.load_job()
        journal = store.read_journal()
        rows = []
        if journal is not None and journal.has_table("calls"):  # only columns that stay clear: nothing asks for the key
            rows = journal.rows("SELECT created_utc, usage_json FROM {calls}{where} ORDER BY created_utc, {row_order}")
    except JobError as exc:
        return {"jobId": store.where(), "owner": None, "model": None, "calls": [], "unreadable": str(exc)}
    finally:
        if journal is not None:
            journal.close()
    calls = [{"at": c["created_utc"], "usage": c["usage_json"]} for c in rows if c["usage_json"] and c["created_utc"] >= cutoff]
    return {"jobId": job["jobId"], "where": store.where(), "owner": store.people(job)["owner"], "model": job.get("model"), "calls": calls}


PRUNE_PHASES = ("decided", "cancelled")


def prune(
    *,
    store: str | None = None,
    roots=(),
    older_than: float,
    phases=PRUNE_PHASES,
    dry_run: bool = False,
    program: str | None = None,
    from_env: bool = False,
    shred_encrypted: bool = False,
    keys: Keys | None = None,
) -> dict:
    """Remove what finished jobs no longer need: LangGraph's checkpoint history of each job decided or cancelled more
    than older_than days ago (a store's, as its administrator, or the state directories under roots).

    Kept: the job record, the journal, the drafts, the results and decision as the chained history records them,
    the receipt and its signature, and (in the prune record) the last checkpoint values and the checkpoints' sha256,
    so inspect, jobs and verify still answer. A job is first marked, then pruned, then the mark finished: a kill
    leaves it whole (unmarked) or marked, and the next prune finishes it. `shred_encrypted`: each such job encrypted at rest is
    shredded too, once pruned (its data key destroyed: see shred), in place of keeping its content.
    """
    if bool(store) == bool(roots):
        raise UsageError(f"prune needs --store URL (or {STORE_ENV}) or --root DIR, one")
    if not isinstance(older_than, (int, float)) or not 0 <= older_than <= 36500:
        raise UsageError(f"--older-than {older_than!r}: give a number of days from 0 to 36500 (0: every finished job)")
    bad = [p for p in phases if p not in PRUNE_PHASES]
    if bad or not phases:
        raise UsageError(f"--phase {bad[0] if bad else ''!r}: prune takes finished jobs only: decided, cancelled")
    import datetime

    cutoff = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=older_than)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    out = []
    with prune_candidates(store, list(roots), program, from_env, keys) as jobs_here:
        for one in jobs_here:
            try:  # each job's connections go back to the lister's pool once it is done: a few, however many jobs
                row = prune_row(one, set(phases), cutoff, shred_encrypted)
                if row is None:
                    continue
                if not dry_run and row["state"] != "pruned":
                    row["freedBytes"] = prune_job(one)
                    row["state"] = "pruned"
                if shred_encrypted and one.cipher() is not None:
                    row["state"] += ", would shred" if dry_run else ", shredded"
                    if not dry_run:
                        shred(one)
                out.append(row)
            finally:
                one.close()
    return {
        "dryRun": dry_run,
        "olderThanDays": older_than,
        "phases": list(phases),
        "jobs": out,
        "freedBytes": sum(r["freedBytes"] for r in out),
    }


@contextlib.contextmanager
def prune_candidates(store: str | None, roots: list, program: str | None, from_env: bool, keys: Keys | None) -> Iterator[list]:
    """Every finished job a prune may look at: a store's (as its administrator: refused to any other role), all read
    on one connection (a store of 10,000 finished jobs must not open 10,000), or the state directories holding a
    receipt under the folders."""
    if roots:
        yield [s for s in state_dirs_under(roots, program, keys) if s.has_receipt()]
        return
    lister = part("store").PgStore(cast(str, store), "", from_env=from_env, program=program, keys=keys)
    try:
        db = lister.db()
        if not db.rows("SELECT durable_job.is_admin() AS admin")[0]["admin"]:
            raise StateError(
                f"prune and delete are the store's administrator's (the owner of schema durable_job in {lister.public}); run them as that role"
            )
        ids = [r["job_id"] for r in db.rows("SELECT job_id FROM durable_job.receipts ORDER BY written_utc, job_id")]
        yield [lister.for_job(job_id) for job_id in ids]
    finally:
        lister.close()


def prune_row(store: AdminStore, phases: set, cutoff: str, shred: bool = False) -> dict | None:
    """The job's line in prune's output when it is to be pruned (finished in one of phases before cutoff), else None;
    with `shred`, a pruned job encrypted at rest and not yet shredded too (a shredded job: None, nothing left to read)."""
    cipher = store.cipher()
    if cipher is not None and cipher.why == "shredded":
        return None
    receipt = strict_json((store.read_receipt() or b"{}").decode("utf-8"))
    outcome = receipt.get("outcome") or ("decided" if receipt.get("final") else "cancelled" if receipt.get("cancel") else None)
    ended = (receipt.get("final") or {}).get("decidedAtUtc") or (receipt.get("cancel") or {}).get("cancelledAtUtc") or ""
    to_shred = shred and cipher is not None
    pruned = store.pruned_record()
    done = pruned is not None and pruned.get("prunedUtc")
    if outcome not in phases or not ended or ended > cutoff or (done and not to_shred):
        return None
    job = store.load_job()
    return {
        "jobId": job["jobId"],
        "outcome": outcome,
        "finishedUtc": ended,
        "freedBytes": store.checkpoint_bytes(job),
        "state": "pruned" if done else "marked: to finish" if pruned is not None else "would prune",
    }


def prune_job(store: AdminStore) -> int:
    """Mark, prune, finish the mark (under the job's lock: no run reads checkpoints meanwhile); the bytes freed."""
    with store.lock("prune"):
        job = store.load_job()
        record = store.pruned_record()
        if record is None:
            record = {
                "values": store.read_checkpoint(job)["values"],
                "checkpointsSha256": store.checkpoints_digest(job),
                "freedBytes": store.checkpoint_bytes(job),
                "markedUtc": now_utc(),
                "prunedUtc": None,
                "principal": store.principal(),
            }
            store.mark_pruned(record)
            crash_point("after-prune-mark", job)
        store.drop_checkpoints(job)
        crash_point("after-prune-delete", job)
        store.mark_pruned({**record, "prunedUtc": now_utc()})
        return int(record["freedBytes"])


def text_shred(out: dict, store) -> list:
    t = out["shredded"]
    again = " (already)" if t.get("again") else ""
    return [f"  shredded{again}: by {t['principal']} at {t['shreddedUtc']}; the content is unreadable, the history and its hashes remain"]


def text_rotate_key(out: dict, store) -> list:
    """What was rewrapped; the next step (the key file to name from now on) is the document's `next`."""
    return [f"  {out['rotated']}: the data key is wrapped under {out['kekId']}"]


def text_notify(out: dict, store) -> list:
    return [
        f"notify: {out['delivered']} delivered, {out['failedTries']} failed tries, {out['setAside']} set aside"
        + (" (followed until stopped)" if out["followed"] else "")
        + (f"; {out['setAsideInAll']} set aside in all (their set_aside column says why)" if out["setAsideInAll"] else "")
    ]


def text_passkeys(out: dict, store) -> list:
    return list(out["lines"])


def text_limits(out: dict, store) -> list:
    """Each limit the store keeps (who set it, when), then each job that waits for a slot, since when."""
    lines = [f"limits of store {out['store']}:" if out["limits"] else f"store {out['store']} keeps no limits: every call goes at once"]
    for r in out["limits"]:
        tokens = f", {r['tokensPerMinute']} tokens" if r.get("tokensPerMinute") else ""
        lines.append(
            f"  {r['model']} at {r['endpoint']}: {r['requestsPerMinute']} requests{tokens} a minute (set by {r['setBy']} {r['setAt']})"
        )
    lines += [f"  job {w['jobId']} waits for a slot since {w['since']} ({w['model']} at {w['endpoint']})" for w in out.get("waiting") or []]
    return lines


def text_jobs(out: dict, store) -> list:
    """The table, then how to read the next page when more rows remain."""
    lines = [jobs_table(out["jobs"])]
    for row in out["jobs"]:  # lineage, both ways
        lines += [f"  {row['jobId']}: forked from {row['forkedFrom']}"] if row.get("forkedFrom") else []
        lines += [f"  {row['jobId']}: forked into {', '.join(row['forks'])}"] if row.get("forks") else []
    if out.get("nextPage"):
        lines.append(f"more jobs: the next page is `{out['nextPage']}`")
    return lines


def text_migrate(out: dict, store) -> list:
    """What this run changed (the schema, each role granted, the jobs adopted, encryption turned on), and what it found
    already so: a rerun that changed nothing says so, and never that it granted what a role already had."""
    at = f" (at {out['latestMigration']})" if out.get("latestMigration") else ""
    did = out["changed"] or out.get("granted") or out.get("grantedWorkers") or out.get("adopted") or out.get("encryptionTurnedOn")
    return [
        f"migrate: store {out['store']} schema {out['schema']}: "
        + (f"brought up to date{at}" if out["changed"] else f"already up to date{at}" + ("" if did else "; nothing to do")),
        *(f"  granted {role} use of it" for role in out.get("granted") or []),
        *(f"  granted {role} use of it as a worker" for role in out.get("grantedWorkers") or []),
        *(f"  {role} already had use of it: nothing changed" for role in out.get("alreadyGranted") or []),
        *(f"  {role} already had use of it as a worker: nothing changed" for role in out.get("alreadyGrantedWorkers") or []),
        *([f"  {counted(out['adopted'], 'job')} of the administrator's now owned by {out['owner']}"] if out.get("owner") else []),
        *encryption_words(out),
        *(
            [
                f"  every role may still {' and '.join(out['publicMay'])} in its database: as its owner, run "
                f"REVOKE {', '.join(out['publicMay'])} ON DATABASE {out['database']} FROM PUBLIC (granted roles keep CONNECT)"
            ]
            if out.get("publicMay")
            else []
        ),
    ]


def encryption_words(out: dict) -> list:
    """migrate's words for encryption at rest: turned on by this run, or on since a date (a store without it: none)."""
    mark = out.get("encryptedAtRest")
    if not mark:
        return []
    if out.get("encryptionTurnedOn"):
        return [
            f"  encryption at rest turned on (key {mark['kekId']}): every new job will now be encrypted; jobs started before stay as they were"
        ]
    return [f"  encryption at rest is on (key {mark['kekId']}, since {mark['since']}): every new job is encrypted"]


def text_work(out: dict, store) -> list:
    lines = [
        f"work: store {out['store']}, worker {out['worker']['host']}:{out['worker']['pid']}, {counted(len(out['runs']), 'run')} in {out['seconds']:.1f} s"
        + (" (stopped by a signal)" if out["stopped"] else "")
    ]
    for r in out["runs"]:
        lines.append(f"  {r['jobId']:<16} {r['from']} -> {r['to']}" + (f"  HOLD: {r['hold']}" if r.get("hold") else ""))
    return lines


def text_submit(out: dict, store) -> list:
    """One submit: what it did and the phase; several: one line each under its own header, then its next step."""
    if "submits" in out:
        lines = [f"submit: {counted(len(out['submits']), 'manifest')}"]
        for one in out["submits"]:
            lines += [f"  job {one['jobId']}:", *(f"  {line}" for line in text_submit(one, store)), *labelled_lines("  next", one["next"])]
        return lines
    said = "already in the store: reported as it stands" if out.get("existing") else "sealed into the store; nothing run"
    return [f"  {said}", f"  phase: {out['phase']}"]


def text_prune(out: dict, store) -> list:
    verb = "would free" if out["dryRun"] else "freed"
    days = f"{out['olderThanDays']:g} day" + ("" if out["olderThanDays"] == 1 else "s")
    lines = [f"prune: {counted(len(out['jobs']), 'finished job')} older than {days}; {verb} {out['freedBytes']:,} bytes"]
    lines += [f"  {r['jobId']}: {r['outcome']} {r['finishedUtc']} · {r['freedBytes']:,} bytes · {r['state']}" for r in out["jobs"]]
    return lines


def text_delete(out: dict, store) -> list:
    t = out["tombstone"]
    return [
        f"deleted job {out['jobId']}: its tombstone keeps the id taken (by {t['principal']} at {t['deletedAt']}; receipt {t['receiptSha256']})"
    ]


def text_serve(out: dict, store) -> list:
    return [f"serve stopped ({out.get('stoppedBy') or 'done'}); it served {out['served']}"]


def text_usage(out: dict, store) -> list:
    """One row per owner, model or day, then the total; a cost is always labelled an estimate, and from which file."""
    where = out.get("store") or ", ".join(out.get("roots") or [])
    since = f" since {out['since']}" if out.get("since") else ""
    head: tuple[str, ...] = (out["by"].upper(), "JOBS", "CALLS", "INPUT", "OUTPUT", "TOTAL")
    priced = "estimatedCost" in out["total"]
    if priced:
        head += (f"EST. COST ({out['total']['estimatedCost']['currency']})",)
    rows = []
    for group in [*out["groups"], {**out["total"], out["by"]: "(all)"}]:
        tokens = group["tokens"]
        row = (
            str(group[out["by"]]),
            str(group["jobs"]),
            str(group["calls"]),
            f"{tokens['input']:,}",
            f"{tokens['output']:,}",
            f"{tokens['total']:,}",
        )
        rows.append(row + ((cost_cell(group["estimatedCost"]),) if priced else ()))
    widths = [max(len(r[n]) for r in [head, *rows]) for n in range(len(head))]
    lines = [f"usage: {where}{since}, by {out['by']}"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    if priced:
        said = cost_words(out["total"]["estimatedCost"])
        lines.append(f"  {said}" + ("" if said.startswith("no ") else ": an estimate from your prices file, not the provider's bill"))
    for job in out.get("unreadable") or []:
        lines.append(f"  unreadable, not counted: {job['jobId']}: {job['why']}")
    return lines


def jobs_table(jobs: list) -> str:
    """`jobs` on a terminal: one row per job, the next step on the line below."""
    if not jobs:
        return "jobs: none"
    priced = [j["estimatedCost"] for j in jobs if j.get("estimatedCost")]
    head: tuple[str, ...] = ("JOB", "PHASE", "OWNER", "REVIEWERS", "DECIDED BY", "MODE", "CREATED (UTC)", "FIGURES Q/S/N", "TOKENS")
    head += (f"EST. COST ({priced[0]['currency']})",) if priced else ()
    rows = [
        (
            str(j["jobId"]),
            str(j["phase"]),
            str(j["owner"] or "-"),
            ",".join(j["reviewers"]) or "-",
            f"{j['decidedBy']['reviewer']} ({j['decidedBy']['principal']})" if j["decidedBy"] else "-",
            str(j["mode"] or "-"),  # an unreadable job's (its seal not read) are unknown
            str(j["createdAtUtc"] or "-"),
            figures_words(j.get("figures")),
            f"{j['tokens']['total']:,}" if j.get("tokens") else "-",
        )
        + ((cost_cell(j.get("estimatedCost")),) if priced else ())
        for j in jobs
    ]
    widths = [max(len(r[n]) for r in [head, *rows]) for n in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths)).rstrip()]
    for row, job in zip(rows, jobs):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if job.get("hold"):
            lines += labelled_lines("held", f"{job['hold']['message']} (by {job['hold']['by']} at {job['hold']['at']})")
        if job.get("waitsForSlot"):
            lines += labelled_lines(
                "waits", f"for a slot since {job['waitsForSlot']['since']} (a limit on its model's requests or tokens a minute)"
            )
        lines += labelled_lines("next", job["next"])
    if priced:
        lines.append(f"costs: estimates from {priced[0]['pricesFile']}, not the provider's bill")
    return "\n".join(lines)


def store_url_from(args, command: str) -> Store:
    """The store a queue command (submit, work) names; a state directory has no queue."""
    if getattr(args, "state_dir", None):
        raise UsageError(f"{command} works on a shared store: give --store URL (or set {STORE_ENV}); a --state-dir job runs with `start`")
    if not args.store and not os.environ.get(STORE_ENV):
        raise UsageError(f"{command} needs --store URL (or {STORE_ENV}): the shared PostgreSQL store that holds the jobs")
    return store_from(args)


def cmd_shred(args) -> dict:
    """Destroy an encrypted job's data key: its content unreadable for good; its ids, hashes, chain and signatures remain."""
    return shred(store_from(args))


def cmd_rotate_key(args) -> dict:
    """Rewrap encrypted jobs' data keys under a new key-encryption key (the current one given as usual); content untouched."""
    return rotate_key(store_from(args), args.new_key_file)


def cmd_notify(args) -> dict:
    """Deliver the outbox's notifications (a store's: its administrator or a worker role; a state directory's: its owner)."""
    url = args.store or (None if args.root or args.state_dir else os.environ.get(STORE_ENV))
    return notify(
        store=url,
        roots=args.root or (),
        state_dir=args.state_dir,
        program=args.program,
        from_env=not args.store,
        config=args.notify,
        follow=args.follow,
    )


def cmd_jobs(args) -> dict:
    """List every job in a store (--store URL) or in the state directories under a folder (--root DIR)."""
    url = args.store or (None if args.root else os.environ.get(STORE_ENV))
    if args.root and args.store:
        raise UsageError("give --store URL or --root DIR, not both")
    return jobs(
        store=url,
        roots=args.root or (),
        program=args.program,
        from_env=not args.store,
        limit=args.limit if args.limit is not None else PAGE_ON_TERMINAL if sys.stdout.isatty() else None,
        **flags_of(args, "phases", "owner", "mine", "to_review", "since", "after", "prices", "sealed_by_other", "held", "keys"),
    )


def cmd_passkeys(args) -> dict:
    """Print the passkeys registered on serve's page as lines of an allowed-passkeys file (verify --allowed-passkeys)."""
    url = args.store or (None if args.root else os.environ.get(STORE_ENV))
    return registered_passkeys(store=url, roots=args.root or (), program=args.program, from_env=not args.store)


def cmd_usage(args) -> dict:
    """Sum the tokens of every call in a store (the jobs you may see) or under folders, by owner, model or day."""
    if args.root and args.store:
        raise UsageError("give --store URL or --root DIR, not both")
    url = args.store or (None if args.root else os.environ.get(STORE_ENV))
    return usage(store=url, roots=args.root or (), program=args.program, from_env=not args.store, **flags_of(args, "since", "by", "prices"))


def cmd_prune(args) -> dict:
    """Remove the checkpoint history of jobs finished over --older-than days ago; each stays listed and verifiable."""
    if args.root and args.store:
        raise UsageError("give --store URL or --root DIR, not both")
    url = args.store or (None if args.root else os.environ.get(STORE_ENV))
    return prune(
        store=url,
        roots=args.root or (),
        program=args.program,
        from_env=not args.store,
        phases=args.phases or PRUNE_PHASES,
        **flags_of(args, "older_than", "dry_run", "shred_encrypted", "keys"),
    )


def cmd_delete(args) -> dict:
    """Remove a job from a store entirely, leaving a tombstone that keeps its jobId taken (the administrator's)."""
    return delete(store_from(args))


def cmd_migrate(args) -> dict:
    """Create or update a store's schema (run once by an administrator; job commands then need no CREATE privilege)."""
    url = args.store or os.environ.get(STORE_ENV)
    if not url:
        raise UsageError(f"migrate needs --store URL (or {STORE_ENV})")
    return part("store").migrate_schema(
        url,
        grant=args.grant or (),
        grant_worker=args.grant_worker or (),
        owner=args.owner,
        program=args.program,
        from_env=not args.store,
        keys=args.keys,
    )


def cmd_limits(args) -> dict:
    """Set (the store's administrator) or list the requests and tokens per minute an endpoint and model allow."""
    return limits(
        store=args.store or os.environ.get(STORE_ENV),
        from_env=not args.store,
        **flags_of(args, "endpoint", "model", "requests_per_minute", "tokens_per_minute", "clear", "program"),
    )


def cmd_submit(args) -> dict:
    """Seal jobs into a store as start does (one manifest, several, or a folder of them), and run nothing: `work` runs them."""
    store = store_url_from(args, "submit")
    workers = part("workers")
    with set_up_by_its_administrator(store):
        if args.manifest is not None and not args.manifests:  # one --manifest M: that job's own document, as it always was
            return workers.submit(with_manifests_job(args, store), args.manifest)
        return workers.submit_all(store, args.manifests, manifest=args.manifest)


def cmd_work(args) -> dict:
    """Run the store's jobs that can go on without a person, each to its next stop, up to --concurrency at once."""
    store = store_url_from(args, "work")
    args.opened = None  # a worker's output names its store itself
    return part("workers").work(store, concurrency=args.concurrency, until_idle=args.until_idle, notify=args.notify)


def work_refusal(out: dict) -> JobError | None:
    """`work --until-idle` that held a job (a run's refusal recorded on it) or met any other refusal exits 2 after its summary, naming each."""
    held = [r for r in out.get("runs") or [] if r.get("held") or r.get("refused")]
    if not out.get("untilIdle") or not held:
        return None
    named = "; ".join(f"job {r['jobId']}: {r['hold']}" for r in held)
    return JobError(
        f"work held {counted(len(held), 'job')}, each left for a person: {named}. Each job's status names the fix; once it is fixed, "
        "its owner's `release` (or resume) lets the workers take it on again"
    )


WORK_MAX_CONCURRENCY = 8  # the jobs one `work` process runs at once, at most (--concurrency)


WEB_IDLE_MINUTES = 30.0  # serve signs out a session unused this long (--idle-minutes)


WEB_PASSKEY_SECONDS = 60  # how long serve's page waits for a passkey to answer (--passkey-seconds)


def cmd_serve(args) -> dict:
    """Serve the live review web app (sign in, follow jobs live, act from a phone) until SIGTERM or Ctrl-C.

    The web app is durable_job_team.web, beside this file and outside the seal, imported only here."""
    web = part("web")
    store = args.store or (None if args.root else os.environ.get(STORE_ENV))
    return web.serve(
        store=store,
        roots=args.root or (),
        **flags_of(args, "host", "port", "certfile", "keyfile", "behind_proxy", "idle_minutes", "passkey_seconds", "program", "notify"),
    )


ROOT_FLAG = flag("--root", type=path_argument, action="append", help="a folder holding state directories at any depth (repeatable)")


NOTIFY_FLAG = flag("--notify", type=path_argument, metavar="FILE", help=f"the notification config to deliver by (default: ${NOTIFY_ENV})")


SINCE_FLAG = flag("--since", metavar="DATE", help="only jobs created on or after this UTC date or time (2026-12-01)")


PAGE_ON_TERMINAL = 50  # jobs a page shows on a terminal unless --limit says; piped, every job unless it says


COMMANDS = {  # the team's commands, as durable_job.COMMANDS holds the core's
    "shred": Command(cmd_shred, text_shred),
    "rotate-key": Command(
        cmd_rotate_key,
        text_rotate_key,
        [
            flag(
                "--new-key-file",
                required=True,
                type=path_argument,
                metavar="FILE",
                help=f"the new key-encryption key (32 random bytes); the current one is {KEY_FILE_ENV} or --key-file",
            )
        ],
    ),
    "jobs": Command(
        cmd_jobs,
        text_jobs,
        [
            STORE_FLAG,
            KEY_FLAG,
            ROOT_FLAG,
            flag("--phase", dest="phases", action="append", default=[], metavar="PHASE", help="only jobs in this phase (repeatable)"),
            flag("--owner", metavar="ROLE", help="only jobs this role (or account, under --root) owns"),
            flag("--mine", action="store_true", help="only the jobs I own"),
            flag("--to-review", action="store_true", help="jobs awaiting review that name me, or that I own and name no reviewer"),
            SINCE_FLAG,
            flag(
                "--sealed-by-other",
                action="store_true",
                help="only the jobs another version of the program sealed (this one cannot act on them: finish them with theirs)",
            ),
            flag("--held", action="store_true", help="only the jobs a run's refusal holds (each row's hold: by, at, message, fix)"),
            flag(
                "--limit",
                type=int,
                metavar="N",
                help=f"at most N jobs a page (default: {PAGE_ON_TERMINAL} on a terminal, every job when piped)",
            ),
            flag("--after", metavar="CURSOR", help="the page after this cursor (the nextCursor a page printed)"),
            PRICES_FLAG,
        ],
        state_dir=False,
        changes_job=False,
    ),
    "usage": Command(
        cmd_usage,
        text_usage,
        [
            STORE_FLAG,
            ROOT_FLAG,
            flag("--since", metavar="DATE", help="only calls made on or after this UTC date or time (2026-12-01)"),
            flag("--by", choices=list(USAGE_BY), default="owner", help="one row per owner (default), model or day (the call's UTC day)"),
            PRICES_FLAG,
        ],
        state_dir=False,
        changes_job=False,
    ),
    "migrate": Command(
        cmd_migrate,
        text_migrate,
        [
            STORE_FLAG,
            KEY_FLAG,
            flag(
                "--grant", action="append", metavar="ROLE", help="let ROLE (a person) own, review and decide jobs (repeatable); no CREATE"
            ),
            flag(
                "--grant-worker",
                action="append",
                metavar="ROLE",
                help="let ROLE (a worker) run any runnable job, and nothing else (repeatable)",
            ),
            flag("--owner", metavar="ROLE", help="a store made before jobs had owners: its jobs become ROLE's"),
        ],
        state_dir=False,
        changes_job=False,
    ),
    "limits": Command(
        cmd_limits,
        text_limits,
        [
            STORE_FLAG,
            flag("--endpoint", metavar="URL", help="the provider's base URL the limit is on (as OPENAI_BASE_URL names it)"),
            flag("--model", metavar="M", help="the model the limit is on"),
            flag("--requests-per-minute", type=int, metavar="N", help="set the limit: at most N calls in any minute (the administrator's)"),
            flag("--tokens-per-minute", type=int, metavar="N", help="and at most N tokens (each call's input estimate and answer cap)"),
            flag("--clear", action="store_true", help="remove the limit on --endpoint and --model (the administrator's)"),
        ],
        state_dir=False,
    ),
    "submit": Command(
        cmd_submit,
        text_submit,
        [
            flag("--manifest", type=path_argument, help="one approved manifest JSON file (its job's own document, as before)"),
            STORE_FLAG,
            flag("--job", metavar="JOB_ID", help="the manifest's jobId (checked)"),
            KEY_FLAG,
            flag(
                "manifests",
                nargs="*",
                type=path_argument,
                metavar="MANIFEST",
                help="approved manifests, or folders of *.json manifests: each sealed in its own transaction",
            ),
        ],
        state_dir=False,
    ),
    "prune": Command(
        cmd_prune,
        text_prune,
        [
            STORE_FLAG,
            ROOT_FLAG,
            flag(
                "--older-than", type=float, required=True, metavar="DAYS", help="only jobs that finished more than DAYS days ago (0: all)"
            ),
            flag(
                "--phase",
                dest="phases",
                action="append",
                choices=list(PRUNE_PHASES),
                metavar="PHASE",
                help="decided or cancelled (repeatable; default both)",
            ),
            flag("--dry-run", action="store_true", help="print what would go and the bytes it frees; change nothing"),
            flag(
                "--shred",
                dest="shred_encrypted",
                action="store_true",
                help="also shred each job encrypted at rest: its content destroyed for good (see shred)",
            ),
            KEY_FLAG,
        ],
        state_dir=False,
    ),
    "delete": Command(cmd_delete, text_delete),
    "passkeys": Command(cmd_passkeys, text_passkeys, [STORE_FLAG, ROOT_FLAG], state_dir=False, changes_job=False, text_piped=True),
    "serve": Command(
        cmd_serve,
        text_serve,
        [
            STORE_FLAG,
            flag("--root", type=path_argument, action="append", help="a folder holding your state directories at any depth (repeatable)"),
            NOTIFY_FLAG,
            flag("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1; another needs TLS or --behind-proxy)"),
            flag("--port", type=int, default=8765, help="the port to listen on (default 8765; 0: any free port)"),
            flag("--certfile", type=path_argument, metavar="PEM", help="serve HTTPS with this certificate (with --keyfile)"),
            flag("--keyfile", type=path_argument, metavar="PEM", help="the certificate's private key"),
            flag(
                "--behind-proxy",
                metavar="ADDRESS",
                help="a proxy at ADDRESS terminates TLS in front of serve: its X-Forwarded-* headers are believed, no one else's",
            ),
            flag(
                "--idle-minutes",
                type=float,
                default=WEB_IDLE_MINUTES,
                metavar="N",
                help=f"sign out a session unused for N minutes (default {WEB_IDLE_MINUTES:g})",
            ),
            flag(
                "--passkey-seconds",
                type=int,
                default=WEB_PASSKEY_SECONDS,
                metavar="N",
                help=f"wait N seconds (1 to 600) for a passkey to answer on the page, then offer the ways on (default {WEB_PASSKEY_SECONDS})",
            ),
        ],
        state_dir=False,
        changes_job=False,
    ),
    "notify": Command(
        cmd_notify,
        text_notify,
        [
            STORE_FLAG,
            flag("--state-dir", type=path_argument, help="one state directory's outbox"),
            ROOT_FLAG,
            NOTIFY_FLAG,
            flag("--follow", action="store_true", help="keep delivering until SIGTERM or Ctrl-C (default: deliver what is due, then exit)"),
        ],
        state_dir=False,
        changes_job=False,
    ),
    "work": Command(
        cmd_work,
        text_work,
        [
            STORE_FLAG,
            KEY_FLAG,
            flag(
                "--until-idle",
                action="store_true",
                help="exit once no job is runnable: 0, or 2 if it held a job (default: keep polling, with back-off)",
            ),
            flag(
                "--concurrency",
                type=int,
                default=1,
                metavar="N",
                help=f"run up to N jobs at once in this process (1-{WORK_MAX_CONCURRENCY}, default 1)",
            ),
            NOTIFY_FLAG,
        ],
        state_dir=False,
        changes_job=False,
        refusal=work_refusal,
    ),
}

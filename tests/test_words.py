"""Words a person reads (issue 45): every command's text output (--text, as on a terminal) and the web list, on the
suite's own journeys, says nothing that leaks from the code: no `None`, no Python repr, no doubled word, no count in
the wrong number, no figure that took the sentence's full stop; and the next step it gives fits the reader's store.
"""

import html
import re

from test_web import Serve, sign_in

from conftest import (
    BOILER,
    Workspace,
    admin_url,
    allowed_signers,
    as_role,
    make_key,
    new_key_file,
    new_store,
    openai_workspace,
    sql,
)

COUNTED = "calls|operations|results|links|items|jobs|claims|drafts|attempts|tries|runs|tokens|bytes|days|figures|passkeys|rows"


def leaks(text: str) -> list:
    """What in a person's text came from the code, not from a sentence."""
    found = [f"None: {m.group(0)!r}" for m in re.finditer(r".{0,30}\bNone\b.{0,30}", text)]
    found += [f"a Python repr: {m.group(0)!r}" for m in re.finditer(r"[\[{]['\"].{0,40}", text)]
    found += [f"a doubled word: {m.group(0)!r}" for m in re.finditer(r"(?<![-\w])([A-Za-z]{2,}) +(?:this +)?\1\b", text, re.I)]
    found += [f"a wrong plural: {m.group(0)!r}" for m in re.finditer(rf"(?<![\d.,])\b1 (?:{COUNTED})\b", text)]
    found += [f"a wrong plural: {m.group(0)!r}" for m in re.finditer(r"(?<![\d.,])\b1 [a-z]+s?' ", text)]  # 1 job' data key
    found += [f"a hedged plural: {m.group(0)!r}" for m in re.finditer(r"\b\w+\(s\)", text) if m.group(0) != "http(s)"]
    for figures in re.findall(r"\[figures: ([^\]]*)\]", text):
        found += [
            f"a figure with punctuation: {f!r}" for f in re.findall(r"([^,]+?): (?:quote|source|nowhere)", figures) if f[-1] in ".,;:!?"
        ]
    return found


def said(ws: Workspace, *args, **kw) -> str:
    """One command's text, as a person at a terminal reads it (stdout and any HOLD line), checked for leaks."""
    done = ws.run(*args, "--text", **kw)
    text = done.stdout + done.stderr
    assert leaks(text) == [], (args, text)
    return text


def test_a_state_directory_journey_reads_as_sentences(tmp_path):
    ws = Workspace(tmp_path / "job")
    ws.write_manifest(sources={"alpha": "The pilot opened on 9 March.\n", "beta": BOILER}, maxModelCalls=1)
    said(ws, "start", "--manifest", ws.manifest)
    repeated = said(ws, "start", "--manifest", ws.manifest)
    assert "this directory already holds this job" in repeated
    assert "[figures: 9 March: quote]" in said(ws, "inspect")
    said(ws, "status")
    refused = said(ws, "decide", "--decision", "accept", "--reviewer", "r", "--reason", "ok")
    assert "ran out of model calls" in refused and "failed validation" not in refused
    said(ws, "decide", "--decision", "reject", "--reviewer", "r", "--reason", "ok")
    again = said(ws, "decide", "--decision", "reject", "--reviewer", "r", "--reason", "ok")
    assert "already recorded" in again and "as resume would" not in again
    said(ws, "verify")
    prices = tmp_path / "prices.json"
    prices.write_text(
        '{"schemaVersion": 1, "currency": "USD", "models": {"gpt-x": {"inputPerMillion": 1, "outputPerMillion": 2, "setOn": "2026-11-01"}}}'
    )
    priced = said(ws, "usage", "--root", str(tmp_path), "--prices", str(prices), state=False)
    assert "0.000000" not in priced and "no price" in priced
    said(ws, "jobs", "--root", str(tmp_path), state=False)
    said(ws, "prune", "--root", str(tmp_path), "--older-than", "0", "--dry-run", state=False)
    config = tmp_path / "notify.json"
    config.write_text('{"commands": [{"argv": ["true"]}]}')
    said(ws, "notify", "--state-dir", ws.state, "--notify", str(config), state=False)


def test_figures_leave_the_sentence_s_full_stop_out(tmp_path, provider):
    ws = Workspace(tmp_path / "job")
    openai_workspace(ws, provider, sources={"alpha": BOILER})
    answer = {
        "itemId": "alpha",
        "summary": "It opened on 9 March.",
        "citations": [{"quote": "serviced on Saturday", "claim": "Open on Sat."}],
    }
    provider.behave("answer:" + __import__("json").dumps(answer))
    said(ws, "start", "--manifest", ws.manifest)
    shown = said(ws, "inspect")
    assert "9 March: nowhere" in shown and "Sat: quote" in shown, shown


def test_an_encrypted_job_s_key_words_and_a_shredded_job_in_jobs(tmp_path):
    ws = Workspace(tmp_path / "job")
    ws.write_manifest()
    ws.env["DURABLE_JOB_KEY_FILE"] = new_key_file(tmp_path)
    said(ws, "start", "--manifest", ws.manifest)
    said(ws, "decide", "--decision", "hold", "--reviewer", "r", "--reason", "later")
    rotated = said(ws, "rotate-key", "--new-key-file", new_key_file(tmp_path, "kek-2"))
    assert "job journey" in rotated
    said(ws, "shred")
    listed = said(ws, "jobs", "--root", str(tmp_path), state=False)
    assert "unreadable" in listed


def test_a_signature_checked_against_another_principal_s_line_says_whose_line_it_is(tmp_path):
    ws = Workspace(tmp_path / "job")
    ws.write_manifest()
    key = make_key(tmp_path, "dana")
    said(ws, "start", "--manifest", ws.manifest)
    said(ws, "decide", "--decision", "hold", "--reviewer", "dana", "--reason", "later", "--sign-key", key)
    shown = said(ws, "verify", "--allowed-signers", allowed_signers(tmp_path, "signers", ("dana", key, "")))
    assert "its lines name dana, not " + ws.principal() in shown and "a state directory's account" in shown, shown


def test_a_store_journey_gives_each_role_its_own_next_step(tmp_path, pg_server):
    url = new_store(pg_server, "alice", empty=True)
    key = new_key_file(tmp_path)
    Workspace(tmp_path / "admin").run("migrate", "--store", url, "--grant", "alice", "--key-file", key, state=False).ok()
    ws = Workspace(tmp_path / "job", store=as_role(url, "alice"))
    ws.write_manifest(reviewers=["bob"])
    ws.env["DURABLE_JOB_KEY_FILE"] = key
    said(ws, "start", "--manifest", ws.manifest)
    assert "the store already holds this job" in said(ws, "start", "--manifest", ws.manifest)
    for command in ("status", "inspect", "verify"):
        said(ws, command)
    said(ws, "usage", "--store", ws.store, state=False)

    submitted = Workspace(tmp_path / "job", store=ws.store)
    submitted.write_manifest(jobId="submitted", reviewers=["bob"])
    submitted.env["DURABLE_JOB_KEY_FILE"] = key
    said(submitted, "submit", "--store", ws.store, "--manifest", submitted.manifest, state=False)
    bare = Workspace(tmp_path / "job", store=ws.store)
    listed = said(bare, "jobs", "--store", ws.store, state=False)
    assert listed.count("unreadable") == 2 and "not-started" not in listed and "--state-dir" not in listed, listed
    assert "no key is given" in said(bare, "status", "--job", "submitted")
    page = Serve(tmp_path, "--store", ws.store)  # serve without the key: the list shows both jobs unreadable
    try:
        listing = sign_in(page, "alice").get("/").text
    finally:
        page.kill()
    shown = html.unescape(re.sub(r"<[^>]+>", " ", listing.split("<main", 1)[1].split("</main>", 1)[0]))
    assert "Unreadable" in shown and leaks(shown) == [] and "unknown time" not in shown, shown

    carol = Workspace(tmp_path / "carol", store=as_role(url, "carol"))
    sql(admin_url(url), "GRANT CONNECT ON DATABASE " + url.rsplit("/", 1)[1] + " TO carol")
    refused = said(carol, "jobs", "--store", carol.store, state=False)
    assert "may not see the schema" in refused and "--grant carol" in refused and "--job ''" not in refused, refused

    admin = Workspace(tmp_path / "admin", store=admin_url(url))
    admin.env["DURABLE_JOB_KEY_FILE"] = key
    said(ws, "shred")
    rotated = said(admin, "rotate-key", "--store", admin.store, "--new-key-file", new_key_file(tmp_path, "kek-2"), state=False)
    assert "must name the new key file" in rotated and "['" not in rotated
    config = tmp_path / "notify.json"
    config.write_text('{"commands": [{"argv": ["true"]}]}')
    said(admin, "notify", "--store", admin.store, "--notify", str(config), state=False)

"""What the reviewer checked (issue 34), on the phone: each claim's check on the job page, ticked after reading its
quote, sent with the decision into the same `checked` record `decide --checked` makes; and each figure's flag shown
beside its claim. Real `serve`, real PostgreSQL, real Chromium (the fixtures of tests/test_web.py)."""

import re

from test_passkeys import phone_signs_in
from test_web import post_form, serving, shown_results, sign_in, text_of  # noqa: F401 (serving is a fixture)

from conftest import BOILER, THREE, Workspace, as_, new_store, password_of
from durable_job_team.cli import figures_words


def waiting_job(root, store: str, provider, job_id: str, **manifest) -> Workspace:
    """alice's job of one item with three claims, waiting for bob's review."""
    ws = Workspace(root, store=store)
    ws.write_manifest(sources={"alpha": BOILER}, jobId=job_id, mode="openai", model="gpt-test", reviewers=["bob"], **manifest)
    ws.env.update(provider.env(DURABLE_JOB_OPENAI_TIMEOUT="20"))
    provider.behave(THREE)
    ws.start().ok()
    return ws


def tick_and_accept(driver, wait, base: str, job_id: str, claims: list, reason: str) -> None:
    driver.get(f"{base}/jobs/{job_id}")
    wait.until(lambda d: d.find_elements("css selector", "button.accept"))
    for claim in claims:
        driver.find_element("id", f"check-{claim}").click()
    driver.find_element("id", "reason").send_keys(reason)
    driver.find_element("css selector", "button.accept").click()


def test_bob_ticks_two_of_three_claims_on_his_phone_and_the_record_says_so(tmp_path, pg_server, provider, serving, phone):  # noqa: F811
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    ws = waiting_job(tmp_path / "free", store, provider, "free")
    strict = waiting_job(tmp_path / "strict", store, provider, "strict", reviewChecksEveryClaim=True)
    s = serving(tmp_path, "--store", store)
    driver = phone
    wait = WebDriverWait(driver, 30, poll_frequency=0.1, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
    driver.get(f"{s.base}/login?next=/jobs/free")
    driver.find_element("id", "role").send_keys("bob")
    driver.find_element("id", "password").send_keys(password_of("bob"))
    driver.find_element("css selector", "form button[type=submit]").click()
    wait.until(lambda d: d.current_url == f"{s.base}/jobs/free")
    claim = driver.find_element("id", "c0-0")  # the figure's flag, beside the claim that states it
    assert "The boiler saves about 9 percent." in claim.text and "9 percent: nowhere" in claim.text
    assert "9 percent: nowhere" in driver.find_element("id", "checks-alpha").text  # and beside the claim's check
    digest = ws.run("inspect").ok()["resultsSha256"]
    tick_and_accept(driver, wait, s.base, "free", ["alpha.1", "alpha.3"], "Read the quotes of two claims.")
    wait.until(lambda d: text_of(d, "live-state").startswith("Saved: accepted by bob (role bob)"))
    # the page's live line may say it before the form's answer replaced the page: the answer shows the checks
    wait.until(lambda d: "Checked 2 of 3 claims." in d.page_source)
    checked = {"claims": ["alpha.1", "alpha.3"], "of": 3, "resultsSha256": digest}
    assert ws.receipt()["checked"] == checked and ws.receipt()["final"]["checked"] == checked  # the CLI's record, the same
    decision = {c["name"]: c for c in ws.run("verify").ok()["checks"]}["decision"]
    assert decision["detail"].endswith("checked 2 of 3 claims")

    tick_and_accept(driver, wait, s.base, "strict", ["alpha.1", "alpha.3"], "Two of three.")
    wait.until(lambda d: "Refused: Cannot accept" in d.page_source)
    assert "not checked: alpha.2 (checked 2 of 3 claims)" in driver.page_source
    assert strict.run("status").ok()["phase"] == "awaiting-review"
    tick_and_accept(driver, wait, s.base, "strict", ["alpha.1", "alpha.2", "alpha.3"], "All three.")
    wait.until(lambda d: text_of(d, "live-state").startswith("Saved: accepted by bob (role bob)"))
    assert strict.receipt()["checked"]["claims"] == ["alpha.1", "alpha.2", "alpha.3"]


def test_a_jobs_figures_stay_the_same_after_a_decision_on_the_page_or_in_a_terminal(tmp_path, pg_server, provider, serving):  # noqa: F811
    """Issue 45: FIGURES went from 3/1/1 to 0/0/0 once a job was decided (a finished job's listing read no results).
    `jobs`, the web list and the job page show the same counts, before and after, whichever surface decided."""
    store = new_store(pg_server, "alice")
    on_page = waiting_job(tmp_path / "page", store, provider, "on-page")
    in_terminal = waiting_job(tmp_path / "terminal", store, provider, "in-terminal")
    s = serving(tmp_path, "--store", store)
    bob = sign_in(s, "bob")

    def shown() -> dict:
        listed = {j["jobId"]: figures_words(j["figures"]) for j in on_page.run("jobs", "--store", store).ok()["jobs"]}
        text = on_page.run("jobs", "--store", store, "--text").stdout
        web_list = bob.get("/").text
        for job_id, words in listed.items():
            assert re.search(rf"^{job_id} .* {re.escape(words)} ", text, re.M), text  # the FIGURES column
            assert f"<b>{job_id}</b>" in web_list and f"figures {words}" in web_list.split(f"<b>{job_id}</b>", 1)[1].split("</li>", 1)[0]
            assert f"figures {words}</span>" in bob.get(f"/jobs/{job_id}").text
        return listed

    before = shown()
    assert before == {"on-page": "3/1/1", "in-terminal": "3/1/1"}
    digest = shown_results(bob.get("/jobs/on-page").text)
    fields = {
        "decision": "accept",
        "reviewer": "bob",
        "reason": "Read it.",
        "resultsSha256": digest,
        "claims": "shown",
        "checked": "alpha.1",
    }
    assert post_form(bob, "/jobs/on-page/decision", **fields).status_code == 303
    as_(in_terminal, "bob", tmp_path).run("decide", "--decision", "accept", "--reviewer", "bob", "--reason", "Read it.").ok()
    assert [j["phase"] for j in on_page.run("jobs", "--store", store).ok()["jobs"]] == ["decided", "decided"]
    assert shown() == before


# Each claim's row as the browser laid it out: the row (the label), its text's box (the union of its text's line
# boxes), the checkbox's, each word's line boxes (a word on two lines is broken inside) and each figure pill's.
CLAIM_ROWS_JS = """
const rows = [];
for (const label of document.querySelectorAll('fieldset.claim-checks label.check')) {
  const box = label.getBoundingClientRect(), field = label.closest('fieldset'), pad = getComputedStyle(field);
  const fieldWidth = field.clientWidth - parseFloat(pad.paddingLeft) - parseFloat(pad.paddingRight);  // its content box
  const broken = [], text = document.createRange();
  text.setStartAfter(label.querySelector('input'));
  text.setEnd(label, label.childNodes.length);
  const walk = document.createTreeWalker(label, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    for (const m of node.data.matchAll(/\\S+/g)) {
      const r = document.createRange();
      r.setStart(node, m.index);
      r.setEnd(node, m.index + m[0].length);
      const tops = new Set(Array.from(r.getClientRects()).filter(c => c.width > 0).map(c => Math.round(c.top)));
      if (tops.size > 1) broken.push(m[0] + ' on ' + tops.size + ' lines');
    }
  }
  // a figure begun at one line's end and ended on the next (one box on lines of its own, when wider than a line, is whole)
  const pills = Array.from(label.querySelectorAll('.pill')).filter(p => p.getClientRects().length > 1).map(p => p.textContent);
  rows.push({id: label.querySelector('input').value, left: box.left, width: box.width, fieldWidth: fieldWidth,
             textWidth: text.getBoundingClientRect().width, broken: broken, brokenPills: pills});
}
return {rows: rows, scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth};
"""


def claim_rows_fit(driver, width: int, zoom: int) -> list:
    """The claim list at `width` device pixels wide and `zoom`× text (the browser's zoom: the same screen, its layout
    viewport width/zoom CSS pixels and each CSS pixel zoom× as large): what is wrong with it, [] when nothing is."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": width // zoom, "height": 844 // zoom, "deviceScaleFactor": 2 * zoom, "mobile": True}
    )
    laid = driver.execute_script(CLAIM_ROWS_JS)
    assert laid["rows"], "no claim rows on the page"
    wrong = []
    if laid["scrollWidth"] > laid["innerWidth"]:
        wrong.append(f"scrolls sideways ({laid['scrollWidth']} > {laid['innerWidth']})")
    for r in laid["rows"]:
        said = f"{width}px at {zoom * 100}%: claim {r['id']}"
        if r["left"] != laid["rows"][0]["left"] or r["width"] < 0.9 * r["fieldWidth"]:
            wrong.append(f"{said}: its row is not a full-width row of one column ({r['width']:.0f} of {r['fieldWidth']:.0f} px)")
        if r["textWidth"] < 0.7 * r["width"]:
            wrong.append(f"{said}: its text takes {r['textWidth']:.0f} of its row's {r['width']:.0f} px")
        wrong += [f"{said}: word {w}" for w in r["broken"]] + [f"{said}: figure {p!r} split over two lines" for p in r["brokenPills"]]
    return wrong


def test_the_claim_checks_read_as_full_width_rows_on_a_phone_and_at_twice_the_text(tmp_path, pg_server, provider, serving, phone):  # noqa: F811
    """Issue 45: in a flex label each text fragment was a column, `report-a.1` wrapped as re/p/or/t-/a./1 and each
    figure as $1/,2/00. At 320, 390 and 430 px and at 200% zoom, each claim is a row of the list's full width whose text
    takes most of it, and no word or figure breaks inside; a screenshot at 390×844 is kept for a person to look at."""
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    ws = Workspace(tmp_path / "report", store=store)
    ws.write_manifest(sources={"report-a": BOILER}, jobId="report", mode="openai", model="gpt-test", reviewers=["bob"])
    ws.env.update(provider.env(DURABLE_JOB_OPENAI_TIMEOUT="20"))
    provider.behave(THREE.replace('"alpha"', '"report-a"'))
    ws.start().ok()
    s = serving(tmp_path, "--store", store)
    driver = phone
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, s.base, "report", "bob")
    wait.until(lambda d: d.find_elements("id", "check-report-a.1"))
    assert "$1,200: source" in driver.find_element("id", "checks-report-a").text
    wrong = [w for width in (320, 390, 430) for zoom in (1, 2) for w in claim_rows_fit(driver, width, zoom)]
    assert wrong == [], "\n".join(wrong)
    claim_rows_fit(driver, 390, 1)
    driver.execute_script("document.getElementById('checks-report-a').scrollIntoView()")
    shot = tmp_path / "claim-checks-390x844.png"
    driver.save_screenshot(str(shot))
    print(f"the claim checks at 390x844: {shot}")
    assert shot.stat().st_size > 10_000


def test_bob_ticks_a_sentence_and_a_fact_of_the_draft_answer_on_his_phone_and_the_record_says_so(tmp_path, pg_server, serving, phone):  # noqa: F811
    """Issue 47: on a drafting job's page each sentence of the draft answer and each asked fact has its check beside the
    answer, as each claim has beside its quote; the decision records the ticked ones, counted, as decide --checked does."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    from test_writer import drafting

    store = new_store(pg_server, "alice")
    ws = drafting(Workspace(tmp_path / "strict", store=store), jobId="strict", reviewers=["bob"], reviewChecksEveryClaim=True)
    ws.start().ok()
    s = serving(tmp_path, "--store", store)
    driver = phone
    wait = WebDriverWait(driver, 30, poll_frequency=0.1, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
    phone_signs_in(driver, wait, s.base, "strict", "bob")
    wait.until(lambda d: d.find_elements("id", "checks-answer"))
    checks = text_of(driver, "checks-answer")
    assert "draft.1 The day is Saturday." in checks and "fact.day Saturday (“The workshop" in checks and "fact.time not stated" in checks
    digest = ws.run("inspect").ok()["resultsSha256"]
    tick_and_accept(driver, wait, s.base, "strict", ["workshop.1", "draft.1", "fact.day"], "The time is not checked.")
    wait.until(lambda d: "Refused: Cannot accept" in d.page_source)
    assert "not checked: fact.time (checked 1 of 1 claim, 1 of 1 sentence, 1 of 2 facts)" in driver.page_source
    tick_and_accept(driver, wait, s.base, "strict", ["workshop.1", "draft.1", "fact.day", "fact.time"], "All of it.")
    wait.until(lambda d: text_of(d, "live-state").startswith("Saved: accepted by bob (role bob)"))
    wait.until(lambda d: "Checked 1 of 1 claim, 1 of 1 sentence, 2 of 2 facts." in d.page_source)
    checked = {"claims": ["workshop.1"], "of": 1, "resultsSha256": digest, "sentences": ["draft.1"], "sentencesOf": 1}
    assert ws.receipt()["checked"] == {**checked, "facts": ["fact.day", "fact.time"], "factsOf": 2}
    assert ws.run("verify").ok()["ok"] is True

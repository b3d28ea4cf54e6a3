"""What the reviewer checked (issue 34), on the phone: each claim's check on the job page, ticked after reading its
quote, sent with the decision into the same `checked` record `decide --checked` makes; and each figure's flag shown
beside its claim. Real `serve`, real PostgreSQL, real Chromium (the fixtures of tests/test_web.py)."""

import re

from test_web import phone, post_form, serving, shown_results, sign_in, text_of  # noqa: F401 (serving is a fixture)

from conftest import BOILER, THREE, Workspace, as_, new_store, password_of
from durable_job import figures_words


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


def test_bob_ticks_two_of_three_claims_on_his_phone_and_the_record_says_so(tmp_path, pg_server, provider, serving):  # noqa: F811
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    ws = waiting_job(tmp_path / "free", store, provider, "free")
    strict = waiting_job(tmp_path / "strict", store, provider, "strict", reviewChecksEveryClaim=True)
    s = serving(tmp_path, "--store", store)
    driver = phone(tmp_path)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
    try:
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
    finally:
        driver.quit()


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

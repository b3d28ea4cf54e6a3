"""What the reviewer checked (issue 34), on the phone: each claim's check on the job page, ticked after reading its
quote, sent with the decision into the same `checked` record `decide --checked` makes; and each figure's flag shown
beside its claim. Real `serve`, real PostgreSQL, real Chromium (the fixtures of tests/test_web.py)."""

from test_web import phone, serving, text_of  # noqa: F401 (serving is a fixture)

from conftest import BOILER, THREE, Workspace, new_store, password_of


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

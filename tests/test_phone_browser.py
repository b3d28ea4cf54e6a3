"""The browser tests' phone (conftest's `phone` and `shared_phone`): one real Chromium per pytest worker, and nothing
one test does in it is seen by the next. Each test here does what a test might leave behind, then what the `phone`
fixture does between two tests (SharedPhone.release, then .clean), and looks: a signed-in reviewer signed out, cookies of every
host and port, storage, extra tabs, a passkey authenticator, a narrower screen and shorter timeouts all gone, the same
browser kept; a browser left dead (quit, or Chromium killed) replaced by a new one."""

import os
import signal

from test_passkeys import passkey_phone
from test_web import phone_signs_in, serving, store_job  # noqa: F401 (serving is a fixture)

from conftest import wait_for

PAGE = """<!doctype html><html><head><meta name="viewport" content="width=device-width, initial-scale=1">
<title>page</title></head><body>a page</body></html>"""
LOOK = "return [document.cookie, localStorage.getItem('left'), sessionStorage.getItem('left'), innerWidth, devicePixelRatio]"


def running(pid: int) -> bool:
    """The process runs (it is neither gone nor a zombie waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_reviewer_signed_in_on_one_tests_serve_is_signed_out_for_the_next(tmp_path, pg_server, serving, shared_phone):  # noqa: F811
    from selenium.webdriver.support.ui import WebDriverWait

    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    driver = shared_phone.clean()
    phone_signs_in(driver, WebDriverWait(driver, 30, poll_frequency=0.1), s.base, "journey", "bob")
    assert driver.find_elements("css selector", "button.accept") and driver.get_cookies()  # bob's session, in a cookie

    shared_phone.release()  # what the phone fixture does after this test, and before the next one
    again = shared_phone.clean()
    assert again is driver and again.window_handles == [again.current_window_handle]
    assert again.execute_cdp_cmd("Storage.getCookies", {})["cookies"] == []  # of every host
    again.get(f"{s.base}/jobs/journey")  # the same serve, still running: bob is asked to sign in again
    assert again.find_elements("id", "password") and not again.find_elements("css selector", "button.accept")


def test_what_one_test_leaves_in_the_browser_is_gone_for_the_next(shared_phone, other_page):
    from selenium.common.exceptions import InvalidArgumentException
    from selenium.webdriver.remote.command import Command

    driver = shared_phone.clean()
    starts = shared_phone.starts
    first = other_page({"/": PAGE})
    driver.get(first)
    driver.execute_script("document.cookie = 'left=1; path=/'; localStorage.setItem('left', 1); sessionStorage.setItem('left', 1)")
    driver.add_cookie({"name": "http-only", "value": "1", "httpOnly": True})
    unvisited = {"name": "unvisited", "value": "1", "domain": "127.0.0.2", "path": "/"}  # a host no tab showed
    assert driver.execute_cdp_cmd("Network.setCookie", unvisited)["success"] is True  # as a request's answer may set it
    assert driver.execute_script(LOOK) == ["left=1", "1", "1", 390, 2]
    passkey_phone(driver)
    authenticator = driver.virtual_authenticator_id
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 320, "height": 600, "deviceScaleFactor": 1, "mobile": True})
    driver.switch_to.new_window("window")
    driver.get(first.replace("localhost", "127.0.0.1"))  # another host's cookie, in another window
    driver.execute_script("document.cookie = 'other=1; path=/'")
    driver.set_page_load_timeout(1)
    driver.implicitly_wait(5)

    shared_phone.release()  # what the phone fixture does after this test, and before the next one
    driver = shared_phone.clean()
    assert shared_phone.starts == starts  # the same browser, not a new one
    assert driver.window_handles == [driver.current_window_handle] and driver.current_url == "about:blank"
    assert driver.execute_cdp_cmd("Storage.getCookies", {})["cookies"] == []  # no cookie of any host or port
    assert driver.virtual_authenticator_id is None
    try:
        driver.execute(Command.GET_CREDENTIALS, {"authenticatorId": authenticator})
        raise AssertionError("the authenticator of the test before is still there")
    except InvalidArgumentException as e:
        assert "Could not find a Virtual Authenticator" in str(e)
    assert driver.timeouts.page_load == 30 and driver.timeouts.implicit_wait == 0 and driver.timeouts.script == 30
    driver.get(first)  # the same origin as before: nothing of it left
    assert driver.execute_script(LOOK) == ["", None, None, 390, 2]
    driver.get(other_page({"/": PAGE}))  # another port of the same host: no cookie either
    assert driver.execute_script(LOOK) == ["", None, None, 390, 2]
    assert driver.execute_script("return [screen.width, screen.height]") == [390, 844]


def test_a_browser_left_dead_is_replaced_for_the_next_test(shared_phone, other_page):
    page = other_page({"/": PAGE})
    quit_by_the_test = shared_phone.clean()
    starts = shared_phone.starts
    quit_by_the_test.quit()
    fresh = shared_phone.clean()
    assert fresh is not quit_by_the_test and shared_phone.starts == starts + 1
    fresh.get(page)
    assert fresh.execute_script(LOOK) == ["", None, None, 390, 2]

    chromedriver = fresh.service.process.pid
    chromium = []
    for thread in os.listdir(f"/proc/{chromedriver}/task"):  # the browser's process, started by one of its threads
        with open(f"/proc/{chromedriver}/task/{thread}/children") as fh:
            chromium += [int(pid) for pid in fh.read().split()]
    assert chromium, "chromedriver started no browser"
    for pid in chromium:
        os.kill(pid, signal.SIGKILL)  # Chromium crashed under the test
    wait_for(lambda: not any(running(pid) for pid in chromium))
    shared_phone.release()  # the phone fixture, after the test: nothing to wipe, so the browser is let go
    assert shared_phone.driver is None
    after_crash = shared_phone.clean()
    assert after_crash is not fresh and shared_phone.starts == starts + 2
    after_crash.get(page)
    assert after_crash.execute_script(LOOK) == ["", None, None, 390, 2]

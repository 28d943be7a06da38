"""The web view in a real headless Chromium against a real `xce dev` cluster: the page shows
a submitted job and its state change without a reload, and a banner once the majority of
controllers is killed. Run by scripts/webview-test (which installs what it needs)."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def wait(what, timeout, check, shown=None):
    """Polls check until it answers; on timeout, says what shown() reads then."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            last = f" (the page shows {shown()!r})" if shown else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{last}")
        time.sleep(0.1)


def submit(api, token, command, name=None, **fields):
    body = {"command": command, **fields}
    if name is not None:
        body["name"] = name
    req = urllib.request.Request(
        api + "/v1/jobs",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + token},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 201, r.status
        return json.load(r)["id"]


def cell(driver, job_id, column):
    """One cell of a job's row, read inside the page in one call: the table re-renders on every
    update, so an element handle held across two WebDriver calls can go stale."""
    return driver.execute_script(
        "const c = document.querySelector(`#jobs tr[data-id=\"${arguments[0]}\"] td.${arguments[1]}`);"
        "return c ? c.textContent.trim() : null;",
        str(job_id),
        column,
    )


def job_state(driver, job_id):
    return cell(driver, job_id, "state")


def job_result(driver, job_id):
    return cell(driver, job_id, "result")


def texts(driver, selector):
    """The texts of the elements a selector matches now, read in one call (see cell)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent.trim());",
        selector,
    )


def shown_ids(driver):
    """The ids of the job rows the table shows now, read in one call (see cell)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.id);"
    )


def main(xce):
    # Jobs retire to history 15 s after their end: the first one has by the end of the test.
    config = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    config.write("history: {retire_after: 15s}\n")
    config.close()
    dev = subprocess.Popen(
        [xce, "dev", "-o", "json", "--workers", "1", "--controller-config", config.name],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    driver = None
    try:
        info = json.loads(dev.stdout.readline())
        api, token = info["api"], info["token"]
        pids = {d["name"]: d["pid"] for d in info["daemons"]}
        options = Options()
        options.binary_location = "/usr/bin/chromium"
        # 1280 px wide: the narrowest a queue's last column must not be clipped at.
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--window-size=1280,900"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        driver.get(api + "/")
        wait("the event stream", 30, lambda: driver.find_element(By.ID, "live").text == "events: live")
        assert not driver.find_element(By.ID, "banner").is_displayed(), "a banner on a ready cluster"
        # `xce dev` runs without authentication, and the page says so.
        warning = wait(
            "the authentication-off warning",
            30,
            lambda: driver.find_element(By.ID, "auth-warning").is_displayed()
            and driver.find_element(By.ID, "auth-warning").text,
        )
        assert "authentication" in warning.lower(), warning
        print(f"webview: the page warns: {warning}")
        # The state filter lists exactly the states the API document enumerates (from the
        # cluster's own enum).
        with urllib.request.urlopen(api + "/openapi.json") as r:
            doc = json.load(r)
        states = doc["components"]["schemas"]["JobJson"]["properties"]["state"]["enum"]
        listed = wait("the state filter", 30, lambda: texts(driver, "#f-state option")[1:] or None)
        assert listed == states, (listed, states)
        print(f"webview: the state filter lists {listed}")
        results = [r for r in doc["components"]["schemas"]["JobJson"]["properties"]["result"]["enum"] if r]
        listed = wait("the result filter", 30, lambda: texts(driver, "#f-result option")[1:] or None)
        assert listed == results, (listed, results)
        print(f"webview: the result filter lists {listed}")
        # No column of the queue table is clipped at 1280 px.
        wait("the queue table", 30, lambda: driver.find_elements(By.CSS_SELECTOR, "#queues tbody tr"))
        box = driver.execute_script(
            "const s = document.querySelector('#queues').closest('section').getBoundingClientRect();"
            "const c = document.querySelector('#queues tbody tr td:last-child').getBoundingClientRect();"
            "return [s.right, c.right];"
        )
        assert box[1] <= box[0], f"the queue table's last column ends at {box[1]}, past its box at {box[0]}"
        # A marker that a reload would lose.
        driver.execute_script("window.__notReloaded = true;")

        job_id = submit(api, token, ["sh", "-c", "sleep 1"])
        first = wait(f"job {job_id} on the page", 30, lambda: job_state(driver, job_id))
        print(f"webview: job {job_id} appeared as {first}")
        # It runs for a second: seen before its end, the change below is a live update.
        assert first != "done", f"job {job_id} was already done when it appeared"
        wait(f"job {job_id} done on the page", 60, lambda: job_state(driver, job_id) == "done")
        wait(f"job {job_id}'s result on the page", 30, lambda: job_result(driver, job_id) == "completed")
        assert driver.execute_script("return window.__notReloaded === true;"), "the page reloaded"
        print(f"webview: job {job_id} went from {first} to done without a reload")

        # The name filter narrows the table to the job of that name.
        named = submit(api, token, ["true"], name="webview-named")
        wait(f"job {named} on the page", 30, lambda: job_state(driver, named))
        driver.find_element(By.ID, "f-name").send_keys("webview-named")
        driver.find_element(By.ID, "apply").click()
        shown = wait("the table filtered by name", 30, lambda: (lambda ids: ids if ids == [str(named)] else None)(
            shown_ids(driver)
        ))
        print(f"webview: filtered by name, the table shows jobs {shown}")

        # A held script job: the table says why it waits; its detail shows the script, and
        # its release button lets it run.
        driver.find_element(By.ID, "f-name").clear()
        driver.find_element(By.ID, "apply").click()
        script = "#!/bin/sh\necho held-and-released\n"
        held = submit(api, token, [], name="webview-held", script=script, hold=True)
        # One that waits for it: the table says so, until the held one has run.
        follower = submit(api, token, ["true"], name="webview-follower", dependency=f"afterok:{held}")
        wait(f"job {held} held on the page", 30,
             lambda: job_state(driver, held) == "pending (held)",
             shown=lambda: job_state(driver, held))
        wait(f"job {follower} waiting on the page", 30,
             lambda: job_state(driver, follower) == "pending (dependency)")
        driver.execute_script(
            "document.querySelector(`#jobs tr[data-id=\"${arguments[0]}\"]`).click();", str(held)
        )
        wait("the held job's script in its detail", 30,
             lambda: driver.find_element(By.ID, "detail-script").text.strip() == script.strip())
        wait("the release button", 30, lambda: driver.find_element(By.ID, "release").is_enabled())
        driver.find_element(By.ID, "release").click()
        wait(f"job {held} done on the page", 60, lambda: job_state(driver, held) == "done")
        wait(f"job {follower} done on the page", 60, lambda: job_state(driver, follower) == "done")
        print(f"webview: held script job {held} shown with its script, released, done; "
              f"job {follower}, waiting for it, done after it")

        # An array: one row, named with its tasks, each task started on a row of its own
        # as ARRAY_INDEX.
        array = submit(api, token, ["true"], name="webview-array", array="0-2%1", hold=True)
        shown = wait(f"array {array} on the page", 30,
                     lambda: (lambda t: t if t and "[array" in t else None)(cell(driver, array, "id")))
        assert shown == f"{array} [array 0-2%1: 3 waiting]", shown
        req = urllib.request.Request(
            f"{api}/v1/jobs/{array}/release",
            data=b"{}",
            headers={"Content-Type": "application/json", "Authorization": "Bearer " + token},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200, r.status
        ids = "return [...document.querySelectorAll('#jobs td.id')].map((c) => c.textContent.trim());"
        wait(f"task {array}_0 on a row of its own", 60,
             lambda: f"{array}_0" in driver.execute_script(ids))
        print(f"webview: array {array} shown as {shown!r}, released, task {array}_0 on its own row")

        # History: the first job, ended and retired, is listed there, done and completed.
        driver.find_element(By.ID, "f-source").send_keys("history")
        reloaded = [time.monotonic()]

        def in_history():
            # The listing is read again every 2 s until the job has retired.
            if time.monotonic() - reloaded[0] > 2:
                driver.find_element(By.ID, "apply").click()
                reloaded[0] = time.monotonic()
            return job_state(driver, job_id) == "done" and job_result(driver, job_id) == "completed"

        wait(f"job {job_id} in history", 60, in_history, shown=lambda: shown_ids(driver))
        states = texts(driver, "#jobs td.state")
        assert set(states) <= {"done", "exited"}, f"history lists unended jobs: {states}"
        print(f"webview: history lists job {job_id}, retired, as done and completed")

        for name in ("c1", "c2"):
            os.kill(pids[name], signal.SIGKILL)
        banner = wait(
            "the not-ready banner",
            60,
            lambda: driver.find_element(By.ID, "banner").is_displayed()
            and driver.find_element(By.ID, "banner").text,
        )
        assert "not ready" in banner, banner
        print(f"webview: with the majority down the page says: {banner}")
    finally:
        if driver is not None:
            driver.quit()
        dev.send_signal(signal.SIGTERM)
        try:
            dev.wait(timeout=60)
        except subprocess.TimeoutExpired:
            dev.kill()
            dev.wait()
        os.unlink(config.name)


if __name__ == "__main__":
    main(sys.argv[1])
    print("webview: ok")

#!/usr/bin/env python3
"""The web UI in a real headless Chromium, against a real hauld and the loopback test server.

Adds a download from the page, watches its progress bar move, changes its speed limit, pauses
and resumes it, sees it arrive in Finished with the right size, checks the file's SHA-256
against the server's entity, and checks that a bad URL gets an error in the Add dialog. Then
queues 10,000 paused downloads and checks the page as a new user would meet it: the first
screen within 1 s, paging, a state filter, search by name, and pausing / resuming / removing a
selection. Saves a screenshot of each step to test-artifacts/web-ui/.

Run by scripts/test after the Swift tests; needs the built binaries in .build/debug.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("HAUL_BIN_DIR", os.path.join(ROOT, ".build", "debug"))
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "web-ui")
SIZE = 6_000_000


def chromium_binary():
    for candidate in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
        if os.path.exists(candidate):
            return candidate
    raise RuntimeError("no chromium found (apt-get install chromium chromium-driver)")


class WebUITest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(ARTIFACTS, exist_ok=True)
        cls.tmp = tempfile.mkdtemp(prefix="haul-webui-")
        cls.downloads = os.path.join(cls.tmp, "downloads")
        cls.env = dict(os.environ)
        cls.env.update({
            "HAUL_DATA_DIR": os.path.join(cls.tmp, "data"),
            "HAUL_RUNTIME_DIR": os.path.join(cls.tmp, "run"),
            "HAUL_DAEMON_PATH": os.path.join(BIN, "hauld"),
            "XDG_DOWNLOAD_DIR": cls.downloads,
        })
        # Each part started is stopped by a class cleanup registered as it starts: these run also
        # when setUpClass fails half-way (no browser, a daemon that never answers), which
        # tearDownClass does not, and would leave hauld and the server running.
        cls.server = subprocess.Popen([os.path.join(BIN, "haul-test-server"), "0"], stdout=subprocess.PIPE, text=True)
        cls.addClassCleanup(cls.stop_server)
        line = cls.server.stdout.readline()
        cls.port = int(line.strip().rsplit(":", 1)[1])
        cls.log = open(os.path.join(cls.tmp, "hauld.log"), "w")
        cls.addClassCleanup(cls.log.close)
        cls.daemon = subprocess.Popen(
            [os.path.join(BIN, "hauld"), "--web-port", "0"], env=cls.env, stdout=cls.log, stderr=cls.log
        )
        cls.addClassCleanup(cls.stop_daemon)
        cls.address = None
        deadline = time.time() + 30
        while time.time() < deadline and cls.address is None:
            result = subprocess.run([os.path.join(BIN, "haul"), "ui"], env=cls.env, capture_output=True, text=True)
            if result.returncode == 0 and "#token=" in result.stdout:
                cls.address = result.stdout.strip()
            else:
                time.sleep(0.1)
        assert cls.address, "hauld's web UI did not come up"
        assert cls.address.startswith("http://127.0.0.1:"), cls.address

        options = webdriver.ChromeOptions()
        options.binary_location = chromium_binary()
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                         "--window-size=412,915", "--no-proxy-server", "--disable-background-networking"):
            options.add_argument(argument)
        service = Service(executable_path="/usr/bin/chromedriver") if os.path.exists("/usr/bin/chromedriver") else Service()
        cls.driver = webdriver.Chrome(service=service, options=options)
        cls.addClassCleanup(cls.driver.quit)
        cls.wait = WebDriverWait(cls.driver, 30, poll_frequency=0.05)

    @classmethod
    def stop_daemon(cls):
        cls.daemon.send_signal(signal.SIGTERM)
        try:
            cls.daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            cls.daemon.kill()
            cls.daemon.wait()

    @classmethod
    def stop_server(cls):
        cls.server.kill()
        cls.server.wait()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def row(self, download_id):
        return self.driver.find_element(By.CSS_SELECTOR, '.row[data-id="%s"]' % download_id)

    def row_attribute(self, download_id, name):
        try:
            return self.row(download_id).get_attribute(name)
        except Exception:
            return None

    def segment_widths(self, download_id):
        """The drawn widths of a row's map of ranges, read in one go in the page (the live list
        redraws the map as bytes arrive: an element found by one call may be gone by the next)."""
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]))"
            ".map(function (mark) { return getComputedStyle(mark).width; });",
            '.row[data-id="%s"] .segments span' % download_id)

    def screenshot(self, name):
        path = os.path.join(ARTIFACTS, name)
        self.driver.save_screenshot(path)
        self.assertGreater(os.path.getsize(path), 1000, "screenshot %s is empty" % name)

    def test_add_watch_pause_resume_finish(self):
        driver = self.driver
        driver.get(self.address)
        self.wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("live"))
        self.assertNotIn("token", driver.current_url, "the token is taken out of the address bar")

        # A bad URL: the dialog says why and nothing is added.
        driver.find_element(By.ID, "add-button").click()
        self.wait.until(EC.visibility_of_element_located((By.ID, "add-urls")))
        driver.find_element(By.ID, "add-urls").send_keys("ftp://example.org/file.iso")
        driver.find_element(By.ID, "add-submit").click()
        error = self.wait.until(EC.visibility_of_element_located((By.ID, "add-error")))
        self.assertIn("not an http or https URL", error.text)
        self.screenshot("add-dialog-error.png")

        # A real, slow download (400 KB/s per connection, ~1.6 MB/s over the 4 connections hauld
        # uses per host): its progress must move on the page.
        urls = driver.find_element(By.ID, "add-urls")
        urls.clear()
        urls.send_keys(self.url("/file/webui.bin?size=%d&seed=77&rate=400000" % SIZE))
        driver.find_element(By.ID, "add-submit").click()
        self.wait.until(EC.invisibility_of_element_located((By.ID, "add-dialog")))
        self.wait.until(lambda d: self.row_attribute(1, "data-state") == "active")
        self.wait.until(lambda d: int(self.row_attribute(1, "data-bytes") or 0) > 0)
        first = int(self.row_attribute(1, "data-bytes"))
        self.wait.until(lambda d: int(self.row_attribute(1, "data-bytes") or 0) > first + 300_000)
        width = self.driver.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0])).width;", '.row[data-id="1"] .fill')
        self.assertNotEqual(width, "0px", "the progress bar moved")
        self.assertIn("/s", self.row(1).find_element(By.CSS_SELECTOR, ".speed").text)
        # Fetched over several connections: the row draws its map of ranges and counts them.
        self.wait.until(lambda d: int(self.row_attribute(1, "data-segments") or 0) >= 1)
        self.wait.until(lambda d: "×" in self.row(1).find_element(By.CSS_SELECTOR, ".speed").text)
        widths = self.segment_widths(1)
        self.assertGreaterEqual(len(widths), 1)
        self.assertNotEqual(widths[0], "0px", "the map shows bytes on disk")
        self.screenshot("downloading-tab.png")

        # Its speed limit changes while it runs: a bad value is refused, a good one shows.
        self.row(1).find_element(By.CSS_SELECTOR, ".set-limit").click()
        value = self.wait.until(EC.visibility_of_element_located((By.ID, "limit-value")))
        value.clear()
        value.send_keys("fast please")
        driver.find_element(By.ID, "limit-submit").click()
        self.assertIn("bad speed limit", self.wait.until(EC.visibility_of_element_located((By.ID, "limit-error"))).text)
        value.clear()
        value.send_keys("4M")
        driver.find_element(By.ID, "limit-submit").click()
        self.wait.until(EC.invisibility_of_element_located((By.ID, "limit-dialog")))
        self.wait.until(lambda d: "4.0 MiB/s" in self.row(1).find_element(By.CSS_SELECTOR, ".limit").text)
        shown = json.loads(subprocess.run([os.path.join(BIN, "haul"), "show", "1", "--json"], env=self.env,
                                          capture_output=True, text=True, check=True).stdout)
        self.assertEqual(shown["speedLimit"], 4 * 1024 * 1024)

        # Pause: the state changes and the bytes stop moving.
        self.row(1).find_element(By.CSS_SELECTOR, ".pause").click()
        self.wait.until(lambda d: self.row_attribute(1, "data-state") == "paused")
        time.sleep(0.6)
        paused_bytes = int(self.row_attribute(1, "data-bytes"))
        time.sleep(1.0)
        self.assertEqual(int(self.row_attribute(1, "data-bytes")), paused_bytes, "paused means no progress")
        self.assertLess(paused_bytes, SIZE)
        self.screenshot("downloading-tab-paused.png")

        # Resume: it goes on and arrives in Finished with the right size.
        self.row(1).find_element(By.CSS_SELECTOR, ".resume").click()
        self.wait.until(lambda d: self.row_attribute(1, "data-state") in ("active", "complete"))
        WebDriverWait(driver, 60, poll_frequency=0.1).until(
            lambda d: d.find_element(By.ID, "count-finished").text == "1")
        driver.find_element(By.ID, "tab-finished").click()
        finished = self.wait.until(lambda d: d.find_element(By.CSS_SELECTOR, '#list .row[data-id="1"]'))
        self.assertEqual(finished.get_attribute("data-state"), "complete")
        self.assertEqual(int(finished.get_attribute("data-bytes")), SIZE)
        self.assertIn("5.7 MiB / 5.7 MiB", finished.find_element(By.CSS_SELECTOR, ".bytes").text)
        self.assertEqual(driver.find_element(By.ID, "count-downloading").text, "0")
        self.screenshot("finished-tab.png")

        # The file on disk is the server's entity.
        path = os.path.join(self.downloads, "webui.bin")
        self.assertEqual(os.path.getsize(path), SIZE)
        with open(path, "rb") as handle:
            local = hashlib.sha256(handle.read()).hexdigest()
        with urllib.request.urlopen(self.url("/file/webui.bin?size=%d&seed=77" % SIZE)) as response:
            remote = hashlib.sha256(response.read()).hexdigest()
        self.assertEqual(local, remote)
        # It continued from the paused bytes rather than starting over.
        listing = json.loads(subprocess.run([os.path.join(BIN, "haul"), "ls", "--json"], env=self.env,
                                            capture_output=True, text=True, check=True).stdout)
        self.assertEqual([(d["id"], d["state"], d["bytesDone"]) for d in listing], [(1, "complete", SIZE)])

        # A download with a mirror: the row tells what each server contributes while it runs.
        driver.find_element(By.ID, "tab-downloading").click()
        query = "size=%d&seed=78&rate=300000" % SIZE
        subprocess.run([os.path.join(BIN, "haul"), "add", "-x", "2", self.url("/file/webui-mirror.bin?" + query),
                        "--mirror", self.url("/file/webui-mirror.bin?via=mirror&" + query)],
                       env=self.env, capture_output=True, text=True, check=True)
        self.wait.until(lambda d: self.row_attribute(2, "data-sources") == "2")
        self.wait.until(lambda d: "mirror 127.0.0.1:%d" % self.port in self.row(2).find_element(By.CSS_SELECTOR, ".sources").text)
        self.screenshot("downloading-with-mirror.png")
        WebDriverWait(driver, 60, poll_frequency=0.1).until(
            lambda d: d.find_element(By.ID, "count-finished").text == "2")
        with open(os.path.join(self.downloads, "webui-mirror.bin"), "rb") as handle:
            local = hashlib.sha256(handle.read()).hexdigest()
        with urllib.request.urlopen(self.url("/file/webui-mirror.bin?size=%d&seed=78" % SIZE)) as response:
            self.assertEqual(local, hashlib.sha256(response.read()).hexdigest())

    def haul_list(self):
        result = subprocess.run([os.path.join(BIN, "haul"), "ls", "--json"], env=self.env, capture_output=True, text=True, check=True)
        return json.loads(result.stdout)

    def test_long_pasted_list(self):
        """A pasted list longer than one request of the web API carries (1 MiB) is sent in several,
        every URL added in order; a body over the limit is refused with a message, not a bare 413."""
        driver = self.driver
        driver.get(self.address)
        self.wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("live"))
        # 800 URLs of ~1.5 KB: ~1.2 MB of JSON, two requests. Missing files: each fails at once.
        prefix = self.url("/missing/" + "p" * 1450 + "/")
        urls = [prefix + "long-%03d.bin" % index for index in range(800)]
        driver.find_element(By.ID, "add-button").click()
        self.wait.until(EC.visibility_of_element_located((By.ID, "add-urls")))
        driver.execute_script("document.getElementById('add-urls').value = arguments[0];", "\n".join(urls))
        driver.find_element(By.ID, "add-submit").click()
        self.wait.until(EC.invisibility_of_element_located((By.ID, "add-dialog")))
        added = sorted((d for d in self.haul_list() if d["urls"][0].startswith(prefix)), key=lambda d: d["id"])
        self.assertEqual([d["urls"][0] for d in added], urls, "every URL added once, in the list's order")

        # Straight to the API, twice the list in one body: a clear refusal, nothing added.
        token = self.address.split("#token=")[1]
        request = urllib.request.Request(
            self.address.split("#")[0] + "api/downloads", data=json.dumps({"urls": urls + urls}).encode(),
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"}, method="POST")
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        self.assertEqual(refused.exception.code, 400)
        self.assertIn("larger than the web API takes", json.loads(refused.exception.read())["error"])
        self.assertEqual(len([d for d in self.haul_list() if d["urls"][0].startswith(prefix)]), 800)

        # Gone again (they failed: 404), so that the tests after this one count only theirs.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(d["state"] == "error" for d in self.haul_list() if d["urls"][0].startswith(prefix)):
                break
            time.sleep(0.2)
        subprocess.run([os.path.join(BIN, "haul"), "purge"], env=self.env, capture_output=True, check=True)
        self.assertEqual([d for d in self.haul_list() if d["urls"][0].startswith(prefix)], [])

    def test_phone_layout_fits(self):
        driver = self.driver
        driver.get(self.address.split("#")[0])  # the token stays in this tab's session storage
        self.wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("live"))
        overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        self.assertLessEqual(overflow, 0, "no horizontal scrolling on a phone-sized screen")

    def test_ten_thousand_paused(self):
        """10,000 queued downloads (after the other tests: ids after theirs)."""
        driver = self.driver
        count = 10_000
        listing = os.path.join(self.tmp, "many.txt")
        with open(listing, "w") as handle:
            for index in range(count):
                handle.write(self.url("/missing/item-%05d.bin\n" % index))
        started = time.monotonic()
        subprocess.run([os.path.join(BIN, "haul"), "add", "--paused", "-i", listing], env=self.env,
                       capture_output=True, text=True, check=True)
        print("\n  added %d paused downloads in one batch: %.2f s" % (count, time.monotonic() - started))

        # A new user opens the page: the first screen comes within a second.
        driver.get("about:blank")
        started = time.monotonic()
        driver.get(self.address.split("#")[0])
        WebDriverWait(driver, 10, poll_frequency=0.02).until(
            lambda d: d.find_element(By.ID, "page-info").text.endswith("of 10,000"))
        first_screen = time.monotonic() - started
        print("  first screen with 10,000 queued: %.3f s" % first_screen)
        self.assertLessEqual(first_screen, 1.0)
        rows = driver.find_elements(By.CSS_SELECTOR, "#list .row")
        self.assertEqual(len(rows), 100, "one page of rows, not 10,000 cards")
        self.assertEqual(driver.find_element(By.ID, "count-downloading").text, "10000")
        self.assertEqual(driver.find_element(By.ID, "page-info").text, "1–100 of 10,000")
        self.screenshot("ten-thousand-first-page.png")
        first_id = int(rows[0].get_attribute("data-id"))

        # Paging.
        driver.find_element(By.ID, "page-next").click()
        self.wait.until(lambda d: d.find_element(By.ID, "page-info").text == "101–200 of 10,000")
        self.assertEqual(driver.find_elements(By.CSS_SELECTOR, "#list .row")[0].get_attribute("data-id"), str(first_id + 100))

        # Search by name.
        box = driver.find_element(By.ID, "search")
        box.send_keys("item-00420")
        self.wait.until(lambda d: d.find_element(By.ID, "page-info").text == "1–1 of 1")
        self.assertIn("item-00420", driver.find_element(By.CSS_SELECTOR, "#list .row .name").get_attribute("title"))
        box.clear()
        box.send_keys("item-09")
        self.wait.until(lambda d: d.find_element(By.ID, "page-info").text == "1–100 of 1,000")

        # Select a page and resume it: they leave the "paused" filter. (They fail at once on the
        # server's 404 and end as failed downloads.)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.DELETE)
        Select(driver.find_element(By.ID, "state-filter")).select_by_value("paused")
        self.wait.until(lambda d: d.find_element(By.ID, "page-info").text == "1–100 of 10,000")
        driver.find_element(By.ID, "select-page").click()
        self.assertEqual(driver.find_element(By.ID, "selected-count").text, "100 selected")
        driver.find_element(By.ID, "selected-resume").click()
        WebDriverWait(driver, 30, poll_frequency=0.05).until(
            lambda d: d.find_element(By.ID, "page-info").text == "1–100 of 9,900")
        self.assertEqual(driver.find_element(By.ID, "selected-count").text, "none selected")
        self.screenshot("ten-thousand-filtered.png")

        # Pick three rows by hand and remove them.
        picks = driver.find_elements(By.CSS_SELECTOR, "#list .row .pick")[:3]
        removed = [p.find_element(By.XPATH, "..").get_attribute("data-id") for p in picks]
        for pick in picks:
            pick.click()
        self.assertEqual(driver.find_element(By.ID, "selected-count").text, "3 selected")
        driver.find_element(By.ID, "selected-remove").click()
        self.wait.until(lambda d: d.find_element(By.ID, "page-info").text == "1–100 of 9,897")
        shown = [r.get_attribute("data-id") for r in driver.find_elements(By.CSS_SELECTOR, "#list .row")]
        self.assertFalse(set(removed) & set(shown))

        # Pause-all still works at this size, and the daemon stayed small.
        rss = self.daemon_rss_mib()
        print("  hauld RSS with 10,000 downloads and the page open: %.1f MiB" % rss)
        self.assertLess(rss, 128)

    def daemon_rss_mib(self):
        with open("/proc/%d/status" % self.daemon.pid) as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0


if __name__ == "__main__":
    unittest.main(verbosity=2)

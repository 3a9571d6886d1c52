#!/usr/bin/env python3
"""hauld's aria2 RPC driven by aria2p (PyPI) exactly as it drives aria2c, and a differential
test that sends the same call sequence to aria2c and to hauld and compares the answers' shapes.

Everything runs on 127.0.0.1: the loopback test server, hauld (--enable-rpc) and, when it is
installed, aria2c. Run by scripts/test after the Swift tests; needs the built binaries in
.build/debug.
"""
import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import aria2p

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("HAUL_BIN_DIR", os.path.join(ROOT, ".build", "debug"))
SECRET = "aria2p-secret-%d" % os.getpid()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition, timeout=30.0, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def raw_call(endpoint, method, params, secret=SECRET, request_id="d"):
    """One JSON-RPC call over HTTP; the whole answer object."""
    if method.startswith("aria2.") and secret is not None:
        params = ["token:" + secret] + params
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    request = urllib.request.Request(endpoint, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:  # aria2c answers some errors with 400
        return json.loads(error.read())


class Haul:
    """hauld with the RPC on, and the test server, in a temporary directory."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="haul-rpc-")
        self.downloads = os.path.join(self.tmp, "downloads")
        os.makedirs(self.downloads)
        self.env = dict(os.environ)
        self.env.update({
            "HAUL_DATA_DIR": os.path.join(self.tmp, "data"),
            "HAUL_RUNTIME_DIR": os.path.join(self.tmp, "run"),
            "HAUL_DAEMON_PATH": os.path.join(BIN, "hauld"),
            "XDG_DOWNLOAD_DIR": self.downloads,
        })
        self.server = subprocess.Popen([os.path.join(BIN, "haul-test-server"), "0"], stdout=subprocess.PIPE, text=True)
        self.port = int(self.server.stdout.readline().strip().rsplit(":", 1)[1])
        self.log = open(os.path.join(self.tmp, "hauld.log"), "w")
        self.daemon = subprocess.Popen(
            [os.path.join(BIN, "hauld"), "--no-web", "--enable-rpc", "--rpc-listen-port", "0", "--rpc-secret", SECRET],
            env=self.env, stdout=self.log, stderr=self.log,
        )
        self.info = None

        def ready():
            result = subprocess.run([os.path.join(BIN, "haul"), "rpc-info", "--json"], env=self.env, capture_output=True, text=True)
            if result.returncode == 0:
                self.info = json.loads(result.stdout)
                return True
            return False

        try:
            assert wait_until(ready), "hauld's RPC did not come up"
            assert self.info["endpoint"].startswith("http://127.0.0.1:"), self.info
            assert self.info["secret"] == SECRET
            self.rpc_port = int(self.info["endpoint"].rsplit(":", 1)[1].split("/")[0])
        except BaseException:
            # Nobody else would stop what was started: the test class never got its Haul.
            self.close()
            raise

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def server_sha256(self, path):
        with urllib.request.urlopen(self.url(path)) as response:
            return hashlib.sha256(response.read()).hexdigest()

    def close(self):
        self.daemon.terminate()
        try:
            self.daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait()
        self.server.terminate()
        self.server.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Aria2pTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.haul = Haul()
        cls.addClassCleanup(cls.haul.close)
        cls.api = aria2p.API(aria2p.Client(host="http://127.0.0.1", port=cls.haul.rpc_port, secret=SECRET))

    def test_1_wrong_secret_is_unauthorized(self):
        wrong = aria2p.API(aria2p.Client(host="http://127.0.0.1", port=self.haul.rpc_port, secret="nope"))
        with self.assertRaises(aria2p.ClientException) as raised:
            wrong.get_stats()
        self.assertIn("Unauthorized", str(raised.exception))
        self.assertEqual(raised.exception.code, 1)

    def test_2_add_download_verify(self):
        path = "/file/aria2p-one.bin?size=3000000&seed=21"
        download = self.api.add_uris([self.haul.url(path)], options={"dir": self.haul.downloads, "out": "one.bin"})
        self.assertRegex(download.gid, r"^[0-9a-f]{16}$")
        self.assertTrue(wait_until(lambda: download.update() or download.is_complete), download.status)
        self.assertEqual(download.total_length, 3_000_000)
        self.assertEqual(download.completed_length, 3_000_000)
        self.assertEqual(download.name, "one.bin")
        self.assertEqual(str(download.dir), self.haul.downloads)
        with open(os.path.join(self.haul.downloads, "one.bin"), "rb") as handle:
            self.assertEqual(hashlib.sha256(handle.read()).hexdigest(), self.haul.server_sha256(path))
        # The same download seen through `haul ls` (one queue, several doors).
        listed = json.loads(subprocess.run([os.path.join(BIN, "haul"), "ls", "--json"], env=self.haul.env, capture_output=True, text=True, check=True).stdout)
        self.assertIn(download.gid, [entry["gid"] for entry in listed])

    def test_3_list_pause_resume_remove_purge_stats(self):
        added = [
            self.api.add_uris([self.haul.url("/file/aria2p-p%d.bin?size=2000000&seed=%d&rate=1000000" % (index, index))],
                              options={"dir": self.haul.downloads, "pause": "true"})
            for index in range(3)
        ]
        gids = [download.gid for download in added]
        listed = {download.gid: download.status for download in self.api.get_downloads()}
        for gid in gids:
            self.assertEqual(listed[gid], "paused")
        stats = self.api.get_stats()
        self.assertEqual(stats.num_waiting, 3)
        self.assertTrue(self.api.resume([added[0]])[0])
        self.assertTrue(wait_until(lambda: self.api.get_download(gids[0]).status == "active"))
        self.assertTrue(self.api.pause([added[0]])[0])
        self.assertTrue(wait_until(lambda: self.api.get_download(gids[0]).status == "paused"))
        # aria2p removes, then drops the result: the download is gone, its partial file too.
        self.assertTrue(self.api.remove([added[1]])[0])
        self.assertNotIn(gids[1], [download.gid for download in self.api.get_downloads()])
        self.assertFalse([name for name in os.listdir(self.haul.downloads) if name.startswith("aria2p-p1.bin")])
        self.assertTrue(self.api.resume_all())
        self.assertTrue(wait_until(lambda: all(self.api.get_download(gid).status == "complete" for gid in (gids[0], gids[2]))))
        stats = self.api.get_stats()
        self.assertEqual((stats.num_active, stats.num_waiting), (0, 0))
        self.assertGreaterEqual(stats.num_stopped, 3)
        self.assertTrue(self.api.purge())
        self.assertEqual([download for download in self.api.get_downloads() if download.status in ("complete", "removed", "error")], [])
        for index in (0, 2):
            path = "/file/aria2p-p%d.bin?size=2000000&seed=%d&rate=1000000" % (index, index)
            with open(os.path.join(self.haul.downloads, "aria2p-p%d.bin" % index), "rb") as handle:
                self.assertEqual(hashlib.sha256(handle.read()).hexdigest(), self.haul.server_sha256(path))

    def test_4_notifications_through_aria2p_listener(self):
        events = []
        lock = threading.Lock()

        def record(kind):
            def handler(api, gid):
                with lock:
                    events.append((kind, gid))
            return handler

        self.api.listen_to_notifications(
            threaded=True,
            on_download_start=record("start"),
            on_download_pause=record("pause"),
            on_download_complete=record("complete"),
            on_download_stop=record("stop"),
            on_download_error=record("error"),
            timeout=1,
        )
        try:
            time.sleep(0.5)  # the listener's WebSocket is open
            download = self.api.add_uris([self.haul.url("/file/aria2p-ws.bin?size=3000000&seed=33&rate=1500000")], options={"dir": self.haul.downloads})
            gid = download.gid

            def seen(kind):
                with lock:
                    return (kind, gid) in events

            self.assertTrue(wait_until(lambda: seen("start")), events)
            self.api.pause([download])
            self.assertTrue(wait_until(lambda: seen("pause")), events)
            self.api.resume([download])
            self.assertTrue(wait_until(lambda: seen("complete")), events)
            with lock:
                mine = [kind for kind, event_gid in events if event_gid == gid]
            self.assertEqual(mine, ["start", "pause", "start", "complete"])
        finally:
            self.api.stop_listening()


def shape(value):
    """The structure of an answer: keys and value types, not the values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


@unittest.skipUnless(shutil.which("aria2c"), "aria2c is not installed")
class DifferentialTest(unittest.TestCase):
    """The same calls to aria2c and to hauld; the answers must have the same shapes."""

    @classmethod
    def setUpClass(cls):
        # Class cleanups, registered as each part starts, run also when setUpClass fails half-way.
        cls.haul = Haul()
        cls.addClassCleanup(cls.haul.close)
        cls.aria2_dir = tempfile.mkdtemp(prefix="aria2c-")
        cls.addClassCleanup(shutil.rmtree, cls.aria2_dir, ignore_errors=True)
        cls.aria2_port = free_port()
        cls.aria2 = subprocess.Popen(
            ["aria2c", "--enable-rpc", "--rpc-listen-port=%d" % cls.aria2_port, "--rpc-secret=" + SECRET,
             "--dir=" + cls.aria2_dir, "--no-conf", "--quiet", "--rpc-listen-all=false", "--max-tries=1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        cls.addClassCleanup(cls.stop_aria2)
        cls.endpoints = {"aria2c": "http://127.0.0.1:%d/jsonrpc" % cls.aria2_port, "hauld": cls.haul.info["endpoint"]}
        assert wait_until(lambda: cls.try_call(cls.endpoints["aria2c"])), "aria2c's RPC did not come up"

    @staticmethod
    def try_call(endpoint):
        try:
            return "result" in raw_call(endpoint, "aria2.getVersion", [])
        except OSError:
            return False

    @classmethod
    def stop_aria2(cls):
        cls.aria2.terminate()
        try:
            cls.aria2.wait(timeout=10)
        except subprocess.TimeoutExpired:
            cls.aria2.kill()
            cls.aria2.wait()

    def both(self, method, params, secret=SECRET):
        return {name: raw_call(endpoint, method, params, secret=secret) for name, endpoint in self.endpoints.items()}

    def test_sequence(self):
        url = self.haul.url("/file/diff.bin?size=100000&seed=5")
        gids = {}
        for index in range(3):
            answers = self.both("aria2.addUri", [[url + "&n=%d" % index], {"pause": "true"}])
            for name, answer in answers.items():
                self.assertRegex(answer["result"], r"^[0-9a-f]{16}$", name)
                gids.setdefault(name, []).append(answer["result"])
        # Same answers' shapes for the calls front-ends make all the time.
        checks = [
            ("aria2.tellStatus", lambda name: [gids[name][0]]),
            ("aria2.tellStatus", lambda name: [gids[name][0], ["gid", "status", "totalLength"]]),
            ("aria2.tellWaiting", lambda name: [0, 10]),
            ("aria2.tellWaiting", lambda name: [-1, 2, ["gid"]]),
            ("aria2.tellActive", lambda name: [["gid"]]),
            ("aria2.tellStopped", lambda name: [0, 10]),
            ("aria2.getUris", lambda name: [gids[name][0]]),
            ("aria2.getFiles", lambda name: [gids[name][0]]),
            ("aria2.getGlobalStat", lambda name: []),
            ("aria2.changePosition", lambda name: [gids[name][2], 0, "POS_SET"]),
            ("aria2.changePosition", lambda name: [gids[name][2], 1, "POS_CUR"]),
            ("aria2.getPeers", lambda name: [gids[name][0]]),
            ("aria2.unpause", lambda name: [gids[name][0]]),
            ("aria2.remove", lambda name: [gids[name][1]]),
            ("aria2.getSessionInfo", lambda name: []),
            ("aria2.changeGlobalOption", lambda name: [{"max-concurrent-downloads": "3"}]),
        ]
        for method, params in checks:
            answers = {name: raw_call(endpoint, method, params(name)) for name, endpoint in self.endpoints.items()}
            self.assertIn("result", answers["aria2c"], (method, answers["aria2c"]))
            self.assertIn("result", answers["hauld"], (method, answers["hauld"]))
            expected, actual = shape(answers["aria2c"]["result"]), shape(answers["hauld"]["result"])
            if method in ("aria2.tellStatus", "aria2.tellWaiting", "aria2.tellStopped") and expected and actual:
                status_a = expected if isinstance(expected, dict) else expected[0]
                status_h = actual if isinstance(actual, dict) else actual[0]
                # Every key aria2c sends for an HTTP download, with the same type.
                for key, kind in status_a.items():
                    self.assertIn(key, status_h, (method, key))
                    self.assertEqual(status_h[key], kind, (method, key))
            else:
                self.assertEqual(actual, expected, (method, answers))
        # The waiting order after the same moves is the same.
        order = {}
        for name, endpoint in self.endpoints.items():
            waiting = raw_call(endpoint, "aria2.tellWaiting", [0, 10, ["gid"]])["result"]
            order[name] = [gids[name].index(entry["gid"]) for entry in waiting if entry["gid"] in gids[name]]
        self.assertEqual(order["hauld"], order["aria2c"])
        # The same errors: a wrong token, and an unknown gid (code 1 both).
        for method, params, secret in (("aria2.getGlobalStat", [], "wrong"), ("aria2.tellStatus", ["ffffffffffffffff"], SECRET)):
            answers = self.both(method, params, secret=secret)
            self.assertEqual(answers["hauld"]["error"]["code"], answers["aria2c"]["error"]["code"], answers)
        self.assertEqual(self.both("aria2.getGlobalStat", [], secret="wrong")["hauld"]["error"]["message"], "Unauthorized")
        # system.multicall: one answer per call, results wrapped in a list, faults as objects.
        calls = [[{"methodName": "aria2.getGlobalStat", "params": ["token:" + SECRET]},
                  {"methodName": "aria2.getGlobalStat", "params": ["token:wrong"]}]]
        answers = self.both("system.multicall", calls)
        self.assertEqual(shape(answers["hauld"]["result"]), shape(answers["aria2c"]["result"]))
        # GET with base64 params, as AriaNg sends.
        params = base64.b64encode(json.dumps(["token:" + SECRET]).encode()).decode()
        got = {}
        for name, endpoint in self.endpoints.items():
            with urllib.request.urlopen("%s?method=aria2.getGlobalStat&id=g&params=%s" % (endpoint, urllib.parse.quote(params))) as response:
                got[name] = json.loads(response.read())
        self.assertEqual(shape(got["hauld"]), shape(got["aria2c"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)

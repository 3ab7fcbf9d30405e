"""Helpers of the `pldr serve` tests: start a server on loopback, talk HTTP with http.client."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVAL_MODEL = os.path.join(ROOT, "tests/golden/eval/models/eval_v510_s2024")


class Server:
    """`pldr serve MODEL --port 0 ARGS`, on 127.0.0.1; the port is read from its first line."""

    def __init__(self, pldr, model=EVAL_MODEL, args=(), env=None):
        e = dict(os.environ)
        e.setdefault("OMP_NUM_THREADS", "2")
        e.setdefault("OPENBLAS_NUM_THREADS", "1")
        if env:
            e.update(env)
        # stderr to a file: a sanitizer report must neither block the server on a full pipe nor
        # get lost (stop() prints its tail when the exit code is not 0).
        self.err = tempfile.NamedTemporaryFile(prefix="pldr-serve-", suffix=".err", delete=False)
        self.p = subprocess.Popen([pldr, "serve", model, "--host", "127.0.0.1", "--port", "0", *args],
                                  stdout=subprocess.PIPE, stderr=self.err, env=e, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.p.kill()
            self.p.wait()
            raise RuntimeError("server did not start: " + line + self.stderr())
        self.port = int(m.group(1))

    def stderr(self):
        with open(self.err.name, errors="replace") as f:
            return f.read()

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, raw=None, timeout=120):
        c = self.conn(timeout)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        return r.status, r.getheader("Content-Type") or "", text

    def post(self, path, body=None, raw=None):
        st, ct, text = self.request("POST", path, body, raw)
        return st, (json.loads(text) if "json" in ct else text)

    def get(self, path):
        st, ct, text = self.request("GET", path)
        return st, (json.loads(text) if "json" in ct else text)

    def stream(self, path, body):
        """POST with stream: the list of SSE data payloads (the last one is '[DONE]')."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert r.getheader("Content-Type", "").startswith("text/event-stream")
        out = []
        buf = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                ev = ev.decode("utf-8")
                if ev.startswith("data: "):
                    d = ev[6:]
                    out.append(d if d == "[DONE]" else json.loads(d))
        c.close()
        return out

    def metric(self, name):
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def sanitized(self):
        """True for an AddressSanitizer build of pldr: its allocator keeps freed memory in a
        quarantine (256 MB by default) and never returns its small-size pools to the system, so
        RSS after freeing says nothing about pldr's own memory."""
        if not hasattr(self, "_asan"):
            with open(self.p.args[0], "rb") as f:
                self._asan = b"__asan_init" in f.read()
        return self._asan

    def rss_kb(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            code = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            code = None
        if code != 0:
            print("server stderr (tail):\n" + self.stderr()[-4000:], file=sys.stderr)
        os.unlink(self.err.name)
        return code


def check(cond, msg):
    if not cond:
        print("FAIL: " + msg, file=sys.stderr)
        raise AssertionError(msg)

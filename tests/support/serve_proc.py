"""``blockc serve`` in a subprocess on a free port of 127.0.0.1, for the tests."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

__all__ = ["Server", "NAME"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "tiny-chat"


class Server:
    """``blockc serve`` in a subprocess on a free port of 127.0.0.1."""

    def __init__(self, model_dir, *args, log=None, name=NAME):
        where = model_dir if model_dir.is_dir() else model_dir.parent  # a directory or a .gguf
        self.log = log or (where / f"serve-{time.monotonic_ns()}.log")
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "blockc", "serve", "--model", str(model_dir), "--port", "0",
             "--model-name", name, *args], stdout=self.f, stderr=subprocess.STDOUT, cwd=ROOT)
        end = time.monotonic() + 90
        while time.monotonic() < end:
            m = re.search(r"on http://127\.0\.0\.1:(\d+)/v1", open(self.log).read())
            if m:
                self.port = int(m.group(1))
                break
            if self.p.poll() is not None:
                raise RuntimeError(f"server exited: {open(self.log).read()}")
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("server did not start in 90 s")
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, **kw):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "none"),
                             max_retries=0, timeout=120, **kw)

    def post(self, path, body, **kw):
        import httpx
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx.post(self.url + path, content=data, timeout=60,
                          headers={"Content-Type": "application/json", **kw.pop("headers", {})},
                          **kw)

    def get(self, path, **kw):
        import httpx
        return httpx.get(self.url + path, timeout=60, **kw)

    def rss_kb(self):
        for line in open(f"/proc/{self.p.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(30)
        self.f.close()

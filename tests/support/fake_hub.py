"""A stand-in for the Hugging Face Hub on 127.0.0.1, for `blockc pull`'s tests: the few
routes huggingface_hub's downloads ask (a repository's revision, its file tree, each
file's metadata and bytes), served from a dict. Nothing leaves the machine."""
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict


class FakeHub:
    """``repos``: id -> {file name: bytes}. ``url`` is the endpoint (HF_ENDPOINT);
    ``requests`` lists (method, path) as served."""

    def __init__(self, repos: Dict[str, Dict[str, bytes]]):
        self.repos = repos
        self.commits = {r: hashlib.sha1(r.encode()).hexdigest() for r in repos}
        self.requests = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code, body=b"", headers=None, head=False):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _json(self, obj, code=200):
                self._send(code, json.dumps(obj).encode(), {"Content-Type": "application/json"})

            def _route(self, head):
                path = self.path.split("?")[0]
                hub.requests.append((self.command, path))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
                if m and m.group(1) in hub.repos:
                    r = m.group(1)
                    return self._json({"id": r, "sha": hub.commits[r],
                                       "siblings": [{"rfilename": f} for f in hub.repos[r]]})
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
                if m and m.group(1) in hub.repos:
                    files = hub.repos[m.group(1)]
                    return self._json([{"type": "file", "path": f, "size": len(b),
                                        "oid": hashlib.sha1(b).hexdigest()}
                                       for f, b in files.items()])
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m and m.group(1) in hub.repos and m.group(3) in hub.repos[m.group(1)]:
                    r, data = m.group(1), hub.repos[m.group(1)][m.group(3)]
                    return self._send(200, data, {
                        "X-Repo-Commit": hub.commits[r],
                        "ETag": '"%s"' % hashlib.sha256(data).hexdigest(),
                        "Content-Type": "application/octet-stream"}, head=head)
                return self._send(404, b'{"error": "Repository not found"}',
                                  {"X-Error-Code": "RepoNotFound"}, head=head)

            def do_GET(self):
                self._route(False)

            def do_HEAD(self):
                self._route(True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

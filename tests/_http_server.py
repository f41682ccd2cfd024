"""A real HTTP server on loopback for the remote-reading tests and benchmarks: nginx, and a fault proxy.

:class:`Nginx` runs Debian's nginx (``.ci/server-deps.sh`` installs it) on a
free loopback port over a folder laid out as the hub serves repos
(:func:`lay_out_repo`: ``/{repo}/resolve/{commit}/{file}`` with
``X-Repo-Commit`` and ``X-Linked-Etag`` headers, ``/api/models/{repo}/revision/{rev}``
for ``HfApi.model_info``) and plain files (``/plain/...``). nginx answers
ranges (206), HEAD, ``ETag`` (from mtime and size) itself; its access log
gives the body bytes it sent for each request (:meth:`Nginx.requests`).

:class:`FaultProxy` sits in front of it and misbehaves on purpose, by rule
(:class:`Fault`): an HTTP status with ``Retry-After``, a ``Range`` header
dropped (the server answers 200 with the whole file), a body cut short with
correct headers, a connection dropped mid-body, a header rewritten, a body
dripped byte by byte, a stated size that is not the file's, a redirect (a loop,
another scheme), a body whose bytes are flipped, a request refused without its
query or credentials.
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha256_of(path: Path, *, fake: bool = False) -> str:
    """The file's sha256 (``fake``: of its name and size, for sparse benchmark files too large to hash)."""
    if fake:
        return hashlib.sha256(f"{path.name}:{path.stat().st_size}".encode()).hexdigest()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def lay_out_repo(root: Path, repo: str, folder: Path, commit: str, *, branch: str = "main", fake_sha: bool = False,
                 link: bool = True) -> tuple[dict[str, str], dict[str, str]]:
    """Serve the files of ``folder`` as hub repo ``repo`` at ``commit`` (``branch`` points at it).

    Returns ``({resolve path: sha256}, {resolve prefix: commit})``, the ``X-Linked-Etag`` and
    ``X-Repo-Commit`` maps of :class:`Nginx`.
    """
    target = root / repo / "resolve" / commit
    target.mkdir(parents=True, exist_ok=True)
    siblings, linked = [], {}
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        dest = target / f.name
        if dest.exists() or dest.is_symlink():
            dest.unlink()
        if link:
            os.symlink(f.resolve(), dest)
        else:
            shutil.copy(f, dest)
        sha = sha256_of(f, fake=fake_sha)
        size = f.stat().st_size
        siblings.append({"rfilename": f.name, "size": size, "blobId": sha[:40],
                         "lfs": {"sha256": sha, "size": size, "pointerSize": 134}})
        for rev in (commit, branch):
            linked[f"/{repo}/resolve/{rev}/{f.name}"] = sha
    branch_dir = root / repo / "resolve" / branch
    if branch_dir.is_symlink() or branch_dir.exists():
        branch_dir.unlink()
    os.symlink(commit, branch_dir)
    api = root / "api" / "models" / repo / "revision"
    api.mkdir(parents=True, exist_ok=True)
    info = {"id": repo, "modelId": repo, "sha": commit, "private": False, "siblings": siblings}
    tree = [{"type": "file", "oid": s["blobId"], "size": s["size"], "path": s["rfilename"],
             "lfs": {"oid": s["lfs"]["sha256"], "size": s["size"], "pointerSize": 134}} for s in siblings]
    listing = root / "api" / "models" / repo / "tree"  # what snapshot_download lists (HfApi.list_repo_tree)
    listing.mkdir(parents=True, exist_ok=True)
    for rev in (commit, branch):
        (api / rev).write_text(json.dumps(info))
        (listing / rev).write_text(json.dumps(tree))
    return linked, {f"/{repo}/resolve/{rev}/": commit for rev in (commit, branch)}


@dataclass
class Nginx:
    """nginx serving ``root`` on ``127.0.0.1:port`` (see the module docstring)."""

    root: Path
    workdir: Path
    commits: dict[str, str] = field(default_factory=dict)  # resolve prefix -> commit for X-Repo-Commit
    linked: dict[str, str] = field(default_factory=dict)  # resolve path -> sha256 for X-Linked-Etag
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _conf(self) -> str:
        commit_map = "\n".join(f'        "~^{prefix}" "{c}";' for prefix, c in self.commits.items())
        linked_map = "\n".join(f'        "{uri}" "\\"{sha}\\"";' for uri, sha in self.linked.items())
        user = "user root;\n" if os.geteuid() == 0 else ""
        w = self.workdir
        return f"""{user}worker_processes 1;
daemon off;
pid {w}/nginx.pid;
error_log {w}/error.log warn;
events {{ worker_connections 512; }}
http {{
    default_type application/octet-stream;
    types {{ application/json json; }}
    log_format counted '$request_method $uri $status $body_bytes_sent "$http_range"';
    access_log {w}/access.log counted;
    client_body_temp_path {w}/body; proxy_temp_path {w}/proxy; fastcgi_temp_path {w}/fcgi;
    uwsgi_temp_path {w}/uwsgi; scgi_temp_path {w}/scgi;
    sendfile on;
    keepalive_requests 100000;
    map_hash_bucket_size 256;
    map $uri $repo_commit {{
        default "";
{commit_map}
    }}
    map $uri $linked_etag {{
        default "";
{linked_map}
    }}
    server {{
        listen 127.0.0.1:{self.port};
        root {self.root};
        location /api/ {{ default_type application/json; }}
        location ~ /resolve/ {{
            add_header X-Repo-Commit $repo_commit always;
            add_header X-Linked-Etag $linked_etag always;
        }}
    }}
}}
"""

    def start(self) -> Nginx:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        (self.workdir / "nginx.conf").write_text(self._conf())
        self.proc = subprocess.Popen([NGINX, "-p", str(self.workdir), "-e", str(self.workdir / "error.log"),
                                      "-c", str(self.workdir / "nginx.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for_port(self.port, self.proc, self.workdir / "error.log")
        return self

    def serve(self, maps: tuple[dict[str, str], dict[str, str]]) -> None:
        """Add the maps :func:`lay_out_repo` returns (then :meth:`start` or :meth:`reload`)."""
        self.linked.update(maps[0])
        self.commits.update(maps[1])

    def reload(self) -> None:
        """Re-read the maps (after :func:`lay_out_repo` of a new commit)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def mark(self) -> int:
        """A position in the access log; :meth:`requests` ``(since=mark)`` gives what came after."""
        log = self.workdir / "access.log"
        return log.stat().st_size if log.exists() else 0

    def requests(self, since: int = 0) -> list[tuple[str, str, int, int, str]]:
        """``(method, uri, status, body bytes sent, range)`` of each request logged after ``since``."""
        log = self.workdir / "access.log"
        deadline = time.monotonic() + 2
        out = []
        while True:
            text = log.read_bytes()[since:].decode() if log.exists() else ""
            out = []
            for line in text.splitlines():
                method, uri, status, sent, rng = line.split(" ", 4)
                out.append((method, uri, int(status), int(sent), rng.strip('"')))
            if time.monotonic() > deadline or text.endswith("\n") or not text:
                return out
            time.sleep(0.02)  # a line being written

    def bytes_sent(self, since: int = 0, suffix: str = "") -> int:
        """Body bytes sent after ``since`` for URIs ending with ``suffix``."""
        time.sleep(0.05)  # nginx logs a request when its response is done
        return sum(r[3] for r in self.requests(since) if r[1].endswith(suffix))


def wait_for_port(port: int, proc=None, log: Path | None = None, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            err = log.read_text() if log is not None and log.exists() else ""
            raise RuntimeError(f"the server exited ({proc.returncode}): {err[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


# ------------------------------------------------------------------ the fault proxy


@dataclass
class Fault:
    """One misbehaviour of :class:`FaultProxy`.

    ``kind``: ``"status"`` (answer ``status`` with ``headers``, not forwarded),
    ``"ignore_range"`` (forward without ``Range``), ``"shorten"`` (a 206 of only
    the first ``keep`` bytes, with headers that say so), ``"drop"`` (the
    upstream headers, ``keep`` body bytes, then the connection closed),
    ``"header"`` (``headers`` replace the upstream ones), ``"drip"`` (the upstream
    headers, then the body one byte every ``interval`` seconds; ``"slow_headers"``: the
    status line and headers too), ``"claim"`` (the
    size stated: ``Content-Length`` and a ``Content-Range`` total of ``size``, the
    body as it is), ``"redirect"`` (``status`` with ``Location: location``, where
    ``{path}`` is the request's path, ``{name}`` its last part: ``"{path}"`` loops on itself), ``"corrupt"``
    (the same headers, the body's bytes flipped), ``"require"`` (403 unless the
    request's path contains ``needs`` and its ``Authorization`` is ``auth``, when set;
    else forwarded). It applies to requests whose path contains ``path`` and
    ``method`` (``""``: any), after ``skip`` of them, ``times`` times (None: always).
    """

    kind: str
    path: str = ""
    method: str = "GET"
    times: int | None = 1
    skip: int = 0
    status: int = 503
    keep: int = 0
    headers: dict = field(default_factory=dict)
    interval: float = 0.2
    size: int = 0
    location: str = ""
    needs: str = ""
    auth: str = ""
    seen: int = 0
    used: int = 0

    def applies(self, method: str, path: str) -> bool:
        if self.method and method != self.method or self.path not in path:
            return False
        self.seen += 1
        if self.seen <= self.skip or (self.times is not None and self.used >= self.times):
            return False
        self.used += 1
        return True


class FaultProxy:
    """A loopback HTTP proxy to ``upstream_port`` applying :attr:`faults` (see :class:`Fault`)."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.seen: list[tuple[str, str, str]] = []  # (method, path with query, Authorization) of each request
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._forward("HEAD")

            def do_GET(self):
                self._forward("GET")

            def _forward(self, method: str):
                with proxy.lock:
                    proxy.seen.append((method, self.path, self.headers.get("Authorization", "")))
                    fault = next((f for f in proxy.faults if f.applies(method, self.path)), None)
                if fault is not None and fault.kind == "require" and fault.needs in self.path and (
                        not fault.auth or self.headers.get("Authorization") == fault.auth):
                    fault = None
                answer = {"status": (fault.status if fault else 0, fault.headers if fault else {}),
                          "redirect": (fault.status if fault else 0,
                                       {"Location": fault.location.format(
                                           path=self.path, name=self.path.split("?")[0].rsplit("/", 1)[-1])}
                                       if fault else {}),
                          "require": (403, {})}.get(fault.kind if fault else "")
                if answer is not None:
                    self._answer(method, *answer)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                if fault is not None and fault.kind == "ignore_range":
                    headers = {k: v for k, v in headers.items() if k.lower() != "range"}
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                try:
                    conn.request(method, self.path, headers=headers)
                    resp = conn.getresponse()
                    out = dict(resp.getheaders())
                    body = resp.read() if method == "GET" else b""
                finally:
                    conn.close()
                status = resp.status
                if fault is not None and fault.kind == "header":
                    out.update(fault.headers)
                if fault is not None and fault.kind == "shorten" and status == 206:
                    first = int(out["Content-Range"].split()[1].split("-")[0])
                    total = out["Content-Range"].split("/")[1]
                    body = body[: fault.keep]
                    out["Content-Range"] = f"bytes {first}-{first + len(body) - 1}/{total}"
                    out["Content-Length"] = str(len(body))
                if fault is not None and fault.kind == "claim":
                    for k in ("Content-Length", "Content-Range"):
                        if k in out:
                            out[k] = str(fault.size) if k == "Content-Length" else \
                                out[k].rsplit("/", 1)[0] + f"/{fault.size}"
                if fault is not None and fault.kind == "corrupt":
                    body = bytes(b ^ 0x5A for b in body)
                if fault is not None and fault.kind in ("drip", "slow_headers"):
                    self._drip(out, status, body, fault.interval, fault.kind == "slow_headers")
                    return
                self.send_response(status)
                for k, v in out.items():
                    if k.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                        self.send_header(k, v)
                self.end_headers()
                if fault is not None and fault.kind == "drop":
                    self.wfile.write(body[: fault.keep])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

            def _answer(self, method: str, status: int, headers: dict):
                body = b"fault"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if method == "GET":
                    self.wfile.write(body)

            def _drip(self, out: dict, status: int, body: bytes, interval: float, head: bool):
                """The body (``head``: the status line and headers too) one byte every ``interval`` seconds."""
                self.close_connection = True
                lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in out.items()
                                                    if k.lower() not in ("connection", "transfer-encoding",
                                                                         "keep-alive")]
                data = body
                if head:
                    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
                else:
                    self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode())
                try:
                    for i in range(len(data)):
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        time.sleep(interval)
                except OSError:
                    pass  # the client gave up

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a connection the client closed, or one a "drop" fault closed

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

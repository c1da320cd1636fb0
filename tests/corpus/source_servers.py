"""Real servers on loopback for the source tests: a Git repository over smart HTTP (`git
http-backend` behind a tiny CGI-speaking Python server, with an optional token) and a web site
(pages, links, a sitemap, a robots.txt, ETags and Last-Modified, 500s on demand). Each runs in a
thread of the test process and stops with its fixture."""

from __future__ import annotations

import hashlib
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@dataclass
class GitServer:
    root: Path  # GIT_PROJECT_ROOT: repositories are root/<name>.git
    port: int
    token: str = "s3cret-token-value"
    private: set[str] = field(default_factory=set)  # repositories that need the token
    down: bool = False

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}.git"

    def repository(self, name: str, files: dict[str, str], *, private: bool = False) -> Path:
        """A bare repository served as `name`, with a working copy beside it holding `files` on main."""
        bare, work = self.root / f"{name}.git", self.root.parent / f"{name}-work"
        git("init", "--quiet", "--bare", "--initial-branch=main", str(bare), cwd=self.root)
        git("clone", "--quiet", str(bare), str(work), cwd=self.root)
        git("checkout", "--quiet", "-b", "main", cwd=work)
        self.commit(work, files, message="first")
        if private:
            self.private.add(name)
        return work

    def commit(
        self, work: Path, files: dict[str, str], *, delete: tuple[str, ...] = (), message: str = "change"
    ) -> str:
        for path, text in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(text)
        for path in delete:
            (work / path).unlink()
        git("add", "-A", cwd=work)
        git(
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "commit",
            "--quiet",
            "-m",
            message,
            cwd=work,
        )
        git("push", "--quiet", "origin", "main", cwd=work)
        return git("rev-parse", "HEAD", cwd=work).strip()


def git_handler(server: GitServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _cgi(self) -> None:
            path, _, query = self.path.partition("?")
            name = path.strip("/").split(".git")[0]
            if server.down:
                self.send_error(503)
                return
            if name in server.private and self.headers.get("Authorization") != _basic(server.token):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {"GIT_PROJECT_ROOT": str(server.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path,
                   "REQUEST_METHOD": self.command, "QUERY_STRING": query, "REMOTE_ADDR": "127.0.0.1",
                   "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                   "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                   "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""), "PATH": "/usr/bin:/bin"}
            done = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status, headers = 200, []
            for line in head.decode().split("\r\n"):
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.strip().split()[0])
                elif key:
                    headers.append((key, value.strip()))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _cgi

    return Handler


def _basic(token: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


@contextmanager
def git_server(root: Path) -> Iterator[GitServer]:
    root.mkdir(parents=True, exist_ok=True)
    state = GitServer(root=root, port=0)
    with serving(git_handler(state)) as server:
        state.port = server.server_address[1]
        yield state


@dataclass
class Site:
    """A web site: pages by path (text, content type), and what was asked of it."""

    pages: dict[str, tuple[str, str]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, status)
    failing: set[str] = field(default_factory=set)  # paths that answer 500
    redirects: dict[str, str] = field(default_factory=dict)  # path: the Location it answers 302 with
    host: str = "127.0.0.1"
    port: int = 0

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"


def site_handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("#")[0]
            if path in site.failing or "*" in site.failing:
                site.requests.append((path, "500"))
                self.send_error(500)
                return
            if path in site.redirects:
                site.requests.append((path, "302"))
                self.send_response(302)
                self.send_header("Location", site.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            page = site.pages.get(path)
            if page is None:
                site.requests.append((path, "404"))
                self.send_error(404)
                return
            text, kind = page
            body = text.encode()
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == etag:
                site.requests.append((path, "304"))
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            site.requests.append((path, "200"))
            self.send_response(200)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", formatdate(usegmt=True))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextmanager
def web_site(host: str = "127.0.0.1") -> Iterator[Site]:
    site = Site(host=host)
    with serving(site_handler(site), host=host) as server:
        site.port = server.server_address[1]
        yield site

"""Oversized request bodies against a real web server on loopback: memory, temporary files, time to 413.

    python -m bench.abuse [--server uvicorn|daphne] [--mib 200] [--compare]

Starts the portal's ASGI app (`hdrag_site.asgi:application`) under the chosen server as a child
process, on 127.0.0.1 with a fresh SQLite DATA_DIR and its own TMPDIR (so every temporary file it
writes is counted), with `UPLOAD_MAX_BYTES` = 64 MiB. Then, one at a time, it sends `--mib` MiB
bodies: to the login page and a missing URL without logging in, and with a session to the
dataset upload and the chat settings form; multipart and raw; with a Content-Length and chunked.
A sender stops as soon as an answer arrives.

Printed per request: the status, the seconds from the first byte sent to the answer, the growth
of the server's resident memory over its idle RSS (peak, `VmHWM`, which only grows, so each row is
the worst so far) and the peak size of its temporary files while the request ran.
Targets: 413, within 1 s, growth <= 64 MB. `--compare` also runs the same against Daphne, plus
plain throughput (`/healthz`) and websocket round trips (`chat.error` answers), for both servers.
Bounded: each request is cut after 30 s, the whole run takes about a minute per server.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._hw import print_hardware, proc_status_kib  # noqa: E402

MIB = 1024 * 1024
UPLOAD_LIMIT = 64 * MIB
REQUEST_TIMEOUT = 30.0
SERVERS = {
    "uvicorn": ["-m", "uvicorn", "hdrag_site.asgi:application", "--host", "127.0.0.1", "--port", "{port}",
                "--no-access-log", "--ws-max-size", "1048576"],
    "daphne": ["-m", "daphne", "-b", "127.0.0.1", "-p", "{port}", "hdrag_site.asgi:application"],
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tree_bytes(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


class Portal:
    """The server child process with its own DATA_DIR and TMPDIR, plus a logged-in session."""

    def __init__(self, server: str, workdir: Path) -> None:
        self.server, self.workdir = server, workdir
        self.port = _free_port()
        self.temp_dirs = [workdir / "tmp", workdir / "data" / "tmp"]
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "hdrag_site.settings",
            "DATA_DIR": str(workdir / "data"),
            "TMPDIR": str(workdir / "tmp"),
            "UPLOAD_MAX_BYTES": str(UPLOAD_LIMIT),
            "DEBUG": "0",
            "LOG_LEVEL": "ERROR",
        }
        for name in ("DATABASE_URL", "REDIS_URL", "CHROMA_URL"):
            self.env.pop(name, None)
        for directory in self.temp_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        self.session, self.conversation_id, self.corpus_id = self._prepare()
        command = [sys.executable] + [part.format(port=self.port) for part in SERVERS[server]]
        with open(workdir / f"{server}.log", "wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                command, cwd=REPO, env=self.env, stdout=subprocess.DEVNULL, stderr=log
            )
        self._wait_ready()

    def _prepare(self) -> tuple[str, int, int]:
        script = (
            "import django, json; django.setup()\n"
            "from django.core.management import call_command; call_command('migrate', verbosity=0)\n"
            "from django.contrib.auth.models import User; from django.test import Client\n"
            "from chat.services import conversation_create; from corpus.services.corpora import "
            "corpus_create\n"
            "user = User.objects.create_user('bench', password='bench-password-123')\n"
            "client = Client(); client.force_login(user)\n"
            "corpus = corpus_create(owner=user, name='bench')\n"
            "print(json.dumps([client.cookies['sessionid'].value, conversation_create(user=user).pk, "
            "corpus.pk]))\n"
        )
        output = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=self.env, check=True,
                                capture_output=True, text=True).stdout
        session, conversation_id, corpus_id = json.loads(output.strip().splitlines()[-1])
        return session, conversation_id, corpus_id

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                connection.request("GET", "/healthz")
                if connection.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"{self.server} did not come up; see {self.workdir / (self.server + '.log')}")

    def rss_kib(self) -> int:
        return proc_status_kib("VmRSS", self.process.pid)

    def peak_kib(self) -> int:
        return proc_status_kib("VmHWM", self.process.pid)

    def temp_bytes(self) -> int:
        """Files in the temporary directories, plus files the server holds open there after
        unlinking them (Python's TemporaryFile, Twisted's request body), which no listing shows."""
        total = sum(_tree_bytes(directory) for directory in self.temp_dirs)
        prefixes = tuple(str(directory) for directory in self.temp_dirs)
        fd_dir = Path(f"/proc/{self.process.pid}/fd")
        try:
            descriptors = list(fd_dir.iterdir())
        except OSError:
            return total
        for descriptor in descriptors:
            try:
                target = os.readlink(descriptor)
                if target.startswith(prefixes) and target.endswith(" (deleted)"):
                    total += os.stat(descriptor).st_size
            except OSError:
                pass
        return total

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def send_oversized(portal: Portal, path: str, *, size: int, multipart: bool, chunked: bool,
                   logged_in: bool) -> tuple[int | None, float, int]:
    """Send a `size`-byte body; stop at the first answer. Returns (status, seconds, peak temp bytes)."""
    boundary = "benchboundary7MA4YWxkTrZu0gW"
    if multipart:
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.jsonl\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        content_type = f"multipart/form-data; boundary={boundary}"
    else:
        head, tail, content_type = b"", b"", "application/octet-stream"
    headers = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{portal.port}", f"Content-Type: {content_type}",
               "Origin: http://127.0.0.1"]
    if logged_in:
        headers.append(f"Cookie: sessionid={portal.session}")
    headers.append(
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(head) + size + len(tail)}"
    )
    block = b"x" * MIB
    peak_temp = 0
    stop = threading.Event()

    def watch_temp() -> None:
        nonlocal peak_temp
        while not stop.wait(0.02):
            peak_temp = max(peak_temp, portal.temp_bytes())

    watcher = threading.Thread(target=watch_temp, daemon=True)
    watcher.start()
    sock = socket.create_connection(("127.0.0.1", portal.port))
    sock.settimeout(REQUEST_TIMEOUT)
    # poll, not select: select() refuses descriptors past 1023, which a long test process reaches.
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    answer = b""
    started = time.monotonic()

    def frame(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data

    def answered() -> bool:
        nonlocal answer
        if poller.poll(0):
            data = sock.recv(65536)
            answer += data
            return True
        return False

    try:
        sock.sendall(("\r\n".join(headers) + "\r\n\r\n").encode())
        pieces = [head] + [block] * (size // MIB) + [tail]
        for piece in pieces:
            if answered() or time.monotonic() - started > REQUEST_TIMEOUT:
                break
            if piece:
                sock.sendall(frame(piece))
        else:
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        while b"\r\n" not in answer and time.monotonic() - started < REQUEST_TIMEOUT:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    except OSError:
        # The server closed the connection while we were still sending: read what it said.
        with contextlib.suppress(OSError):
            answer += sock.recv(65536)
    elapsed = time.monotonic() - started
    sock.close()
    stop.set()
    watcher.join()
    try:
        status = int(answer.split(b" ", 2)[1])
    except (IndexError, ValueError):
        status = None
    return status, elapsed, peak_temp


def abuse(portal: Portal, mib: int) -> bool:
    idle = portal.rss_kib()
    print(f"\n{portal.server}: idle RSS {idle / 1024:.0f} MiB; bodies of {mib} MiB "
          f"(UPLOAD_MAX_BYTES {UPLOAD_LIMIT // MIB} MiB)")
    print(f"{'request':58} {'status':>6} {'seconds':>8} {'peak RSS growth':>16} {'peak temp files':>16}")
    cases = [
        ("anonymous multipart POST /accounts/login/", "/accounts/login/", True, False, False),
        ("anonymous chunked multipart POST /accounts/login/", "/accounts/login/", True, True, False),
        ("anonymous raw POST /no-such-page/", "/no-such-page/", False, False, False),
        (
            "anonymous multipart POST to the dataset upload",
            f"/corpora/{portal.corpus_id}/datasets/",
            True,
            False,
            False,
        ),
        (
            "logged-in multipart POST to the dataset upload",
            f"/corpora/{portal.corpus_id}/datasets/",
            True,
            False,
            True,
        ),
        (
            "logged-in chunked multipart POST to the dataset upload",
            f"/corpora/{portal.corpus_id}/datasets/",
            True,
            True,
            True,
        ),
        (
            "logged-in raw POST /chat/<id>/settings/",
            f"/chat/{portal.conversation_id}/settings/",
            False,
            False,
            True,
        ),
    ]
    ok = True
    for label, path, multipart, chunked, logged_in in cases:
        status, seconds, temp = send_oversized(
            portal, path, size=mib * MIB, multipart=multipart, chunked=chunked, logged_in=logged_in
        )
        growth = (portal.peak_kib() - idle) / 1024
        good = status == 413 and seconds <= 1.0 and growth <= 64 and temp <= 64 * MIB
        ok &= good
        print(f"{label:58} {status!s:>6} {seconds:8.2f} {growth:13.0f} MiB {temp / MIB:12.1f} MiB"
              f"{'' if good else '   <- over target'}")
        if portal.process.poll() is not None:
            print(f"{portal.server} exited with {portal.process.returncode}")
            return False
    return ok


def throughput(portal: Portal, seconds: float = 5.0) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", portal.port, timeout=10)
    count, deadline = 0, time.monotonic() + seconds
    started = time.monotonic()
    while time.monotonic() < deadline:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        count += 1
    return count / (time.monotonic() - started)


def websocket_round_trips(portal: Portal, frames: int = 300) -> tuple[float, float]:
    """Connect to the chat socket (same origin, session cookie) and time `frames` invalid frames,
    each answered with a chat.error: (connect seconds, round trips per second)."""
    import websocket  # websocket-client, a test tool (requirements-dev.txt)

    started = time.monotonic()
    socket_ = websocket.create_connection(
        f"ws://127.0.0.1:{portal.port}/ws/chat/{portal.conversation_id}/", timeout=10,
        origin=f"http://127.0.0.1:{portal.port}", cookie=f"sessionid={portal.session}")
    ready = json.loads(socket_.recv())
    assert ready["type"] == "chat.ready", ready
    connected = time.monotonic() - started
    started = time.monotonic()
    for _ in range(frames):
        socket_.send("not json")
        assert json.loads(socket_.recv())["code"] == "invalid"
    rate = frames / (time.monotonic() - started)
    socket_.close()
    return connected, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=sorted(SERVERS), default="uvicorn")
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--compare", action="store_true", help="also Daphne, throughput and websockets")
    args = parser.parse_args()
    print_hardware()
    servers = ["uvicorn", "daphne"] if args.compare else [args.server]
    results = {}
    for server in servers:
        workdir = Path(tempfile.mkdtemp(prefix=f"hdrag-abuse-{server}-"))
        portal = Portal(server, workdir)
        try:
            ok = abuse(portal, args.mib)
            if args.compare and portal.process.poll() is None:
                rate = throughput(portal)
                connect, round_trips = websocket_round_trips(portal)
                results[server] = (ok, rate, connect, round_trips)
                print(
                    f"{server}: GET /healthz {rate:.0f} req/s (one keep-alive connection); websocket connect "
                    f"{connect * 1000:.0f} ms, {round_trips:.0f} round trips/s"
                )
            else:
                results[server] = (ok, None, None, None)
        finally:
            portal.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    if args.compare and all(results[s][1] for s in servers):
        base, candidate = results["daphne"], results["uvicorn"]
        print(f"\nuvicorn / daphne: throughput x{candidate[1] / base[1]:.2f}, "
              f"websocket round trips x{candidate[3] / base[3]:.2f}")
    sys.exit(0 if results[servers[0]][0] else 1)


if __name__ == "__main__":
    main()

"""A Git repository's branch, read with the `git` command: a bare clone under DATA_DIR, fetched at
each sync. A document's version is its blob id, so an unchanged file is never read again: the
files a commit changed are exactly those whose blob id changed."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from django.conf import settings

from core.outbound import OutboundUnresolved, connect_address, url_host_port
from corpus.sources.reading import (
    Fetched,
    Listed,
    PathFilter,
    Progress,
    Scan,
    SourceReader,
    SourceRefused,
    SourceUnavailable,
    local_name,
    url_parts,
)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Sources never go through the environment's proxy: it would connect past the outbound check.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                   "ALL_PROXY", "NO_PROXY")


def git_url_check(url: str) -> str:
    """An https URL without credentials in it (plain http only on loopback, for tests and a local
    mirror); else SourceRefused."""
    parsed, host = url_parts(url)
    if parsed.scheme not in ("https", "http") or not host:
        raise SourceRefused(f"{url[:200]!r} is not an https URL of a Git repository.")
    if parsed.scheme == "http" and host not in LOOPBACK:
        raise SourceRefused(f"{url!r}: only https is allowed for a remote repository.")
    if parsed.username or parsed.password:
        raise SourceRefused("Put the token in the token field, not in the URL (a URL is shown on the pages).")
    return url


class GitReader(SourceReader):
    def __init__(self, *, url: str, branch: str, token: str, clone_dir: Path, filters: PathFilter) -> None:
        self.url = git_url_check(url)
        self.branch = branch or "main"
        self.token = token
        self.clone_dir = clone_dir
        self.filters = filters

    def _env(self) -> dict[str, str]:
        # The token travels in a header set through the environment: never on a command line
        # (which `ps` shows), in a URL, or in the clone's config.
        env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
        env |= {"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": "http:https",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_COUNT": "0"}
        if self.token:
            basic = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
            env |= {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}
        return env

    def _git(self, *args: str, what: str, stdin: bytes | None = None, pinned: tuple[str, ...] = ()) -> bytes:
        timeout = settings.SOURCE_TIMEOUT_SECONDS
        command = ["git", "-c", "http.lowSpeedLimit=1", "-c", f"http.lowSpeedTime={timeout}",
                   "-c", "http.followRedirects=false", "-c", "http.proxy=", *pinned, *args]
        try:
            done = subprocess.run(
                command, input=stdin, capture_output=True, env=self._env(), timeout=20 * timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise SourceUnavailable(f"{what} took longer than {20 * timeout} s.") from None
        if done.returncode != 0:
            raise SourceUnavailable(f"{what} failed: {self._reason(done)}")
        return done.stdout

    def _reason(self, done: subprocess.CompletedProcess) -> str:
        """git's own fatal reason; what the server said (`remote:` lines, a remote error's text) is
        never quoted."""
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        fatal = [line.removeprefix("fatal: ") for line in lines if line.startswith("fatal: ")]
        if not fatal or "remote error" in fatal[-1] or fatal[-1].startswith("protocol error"):
            return f"git exited with status {done.returncode} (the server's message is not shown)"
        reason = fatal[-1][:300]
        return reason.replace(self.token, "***") if self.token else reason

    def _pin(self) -> tuple[str, ...]:
        """curl's resolve entry for the remote: git connects to the address the outbound policy
        checked, not to what the name resolves to a moment later."""
        host, port = url_host_port(self.url)
        try:
            address = connect_address(host=host, port=port)
        except OutboundUnresolved as error:
            raise SourceUnavailable(error.message) from None
        if host == address or ":" in host:
            return ()  # an address literal: curl connects to it as written
        shown = f"[{address}]" if ":" in address else address
        return ("-c", f"http.curloptResolve={host}:{port}:{shown}")

    def _fetch(self) -> str:
        ref = f"refs/heads/{self.branch}"
        if not (self.clone_dir / "HEAD").is_file():
            shutil.rmtree(self.clone_dir, ignore_errors=True)
            self.clone_dir.parent.mkdir(parents=True, exist_ok=True)
            self._git("init", "--quiet", "--bare", str(self.clone_dir), what="Preparing the clone")
        self._git("-C", str(self.clone_dir), "fetch", "--quiet", "--depth", "1", "--no-tags", "--", self.url,
                  f"+{ref}:{ref}", what=f"Fetching branch {self.branch!r} of {self.url}", pinned=self._pin())
        return (
            self._git("-C", str(self.clone_dir), "rev-parse", ref, what="Reading the branch").decode().strip()
        )

    def listing(self, scan: Scan) -> list[Listed]:
        commit = self._fetch()
        scan.cursor = {"commit": commit}
        listing = self._git("-C", str(self.clone_dir), "ls-tree", "-r", "-z", "--full-tree", commit,
                            what="Listing the files")
        listed = []
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, path_bytes = entry.split(b"\t", 1)
            mode, kind, blob = meta.decode().split()
            if kind == "blob" and mode != "120000":  # submodules and symlinks are not documents
                listed.append(Listed(path_bytes.decode(errors="replace"), {"blob": blob}, locator=commit))
        return listed

    def read(self, wanted: list[Listed], scan: Scan, workdir: Path, progress: Progress) -> None:
        """Every wanted blob in one `git cat-file --batch` run."""
        if not wanted:
            return
        request = "".join(f"{item.version['blob']}\n" for item in wanted).encode()
        out = self._git(
            "-C", str(self.clone_dir), "cat-file", "--batch", what="Reading the files", stdin=request
        )
        offset = 0
        base = self.url.removesuffix(".git").rstrip("/")
        for number, item in enumerate(wanted):
            progress(number, len(wanted))
            path, blob, commit = item.path, item.version["blob"], item.locator
            header_end = out.index(b"\n", offset)
            header = out[offset:header_end].decode().split()
            size = int(header[2]) if len(header) == 3 else -1
            body = out[header_end + 1:header_end + 1 + max(size, 0)]
            offset = header_end + 1 + max(size, 0) + (1 if size >= 0 else 0)
            if size < 0:
                scan.failed.append((path, "missing from the clone"))
            elif size > settings.UPLOAD_MAX_BYTES:
                scan.failed.append(
                    (path, f"larger than the upload limit ({settings.UPLOAD_MAX_BYTES:,} bytes)")
                )
            else:
                target = local_name(workdir, number, path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(body)
                scan.fetched.append(
                    Fetched(
                        path,
                        target,
                        hashlib.sha256(body).hexdigest(),
                        {"blob": blob, "commit": commit},
                        url=f"{base}/blob/{commit}/{path}",
                    )
                )

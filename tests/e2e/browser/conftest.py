"""A live portal for browser tests, and headless Chromium driven by Playwright.

The portal runs as `./portal run` runs it, in its embedded mode: Uvicorn (HTTP and websockets) and
a Celery worker on the filesystem broker, sharing a fresh SQLite database in a temporary DATA_DIR,
with the session's real llama.cpp server for the chat. It is its own stack (not the test
database), so DATABASE_URL / REDIS_URL of the rest of the suite are left out on purpose.

Chromium is Debian's (`/usr/bin/chromium`; `./portal test` installs it): Playwright's own browser
download is never used. A missing browser fails the tests; it never skips them. Every test here is
marked `browser` and `service` by tests/plugins/tiers.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.llama_server import free_port
from tests.plugins.waiting import wait_until as wait_until_true

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
PASSWORD = "browser-test-password-1"
USERS = ("alice", "bob")
STAFF = "carol"
# The longest a step may take before it counts as a hang (a machine busy with another portal).
BUSY_MACHINE_SECONDS = 180
# Files dropped on a drop zone as a person drops them: [zone, [[name, base64 data], ...]].
DROP = """([zone, files]) => {
  const transfer = new DataTransfer();
  for (const [name, data] of files) {
    const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
    transfer.items.add(new File([bytes], name));
  }
  for (const type of ["dragenter", "dragover", "drop"]) {
    zone.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
  }
}"""

# Screenshots of every page the tests visit; CI keeps them as artifacts, the README uses some.
SCREENSHOT_DIR = Path(os.environ.get("BROWSER_SCREENSHOTS", ROOT / "var" / "test" / "screenshots"))


@dataclass(frozen=True)
class LivePortal:
    url: str
    data_dir: Path
    log_dir: Path
    env: dict[str, str]

    def shell(self, code: str, **variables: object) -> str:
        """Run `code` in `manage.py shell` against the live portal's database; `variables` reach it
        as JSON in the environment (`json.loads(os.environ["NAME"])`). Returns what it printed."""
        env = {**self.env, **{name: json.dumps(value) for name, value in variables.items()}}
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )


def _wait_for(url: str, seconds: float, processes: list[subprocess.Popen]) -> None:
    def answering() -> bool:
        if any(p.poll() is not None for p in processes):
            raise RuntimeError("a portal process exited during start-up")
        try:
            urllib.request.urlopen(url, timeout=2)
            return True
        except OSError:
            return False

    wait_until_true(answering, what=f"{url} answering", timeout=seconds, every=0.3)


@pytest.fixture(scope="session")
def live_portal(llama_server, embedding_cache) -> Iterator[LivePortal]:
    root = Path(tempfile.mkdtemp(prefix="hdrag-browser-"))
    data_dir, log_dir = root / "data", root / "log"
    log_dir.mkdir(parents=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "CHROMA_URL")
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "hdrag_site.settings",
            "HDRAG_ENV": "development",
            "DATA_DIR": str(data_dir),
            "LLM_BASE_URL": llama_server.base_url,
            "LLM_CONTEXT_SIZE": "2048",
            "LLM_MAX_NEW_TOKENS": "400",
            "EMBEDDING_CACHE_DIR": str(embedding_cache),
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "INDEX_ON_UPLOAD": "0",
            "PYTHONPATH": str(ROOT),
            "BUILD_HEARTBEAT_SECONDS": "2",
        }
    )
    python = sys.executable
    subprocess.run(
        [python, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=300
    )
    users = "; ".join([*(f"User.objects.create_user({name!r}, password={PASSWORD!r})" for name in USERS),
                       f"User.objects.create_superuser({STAFF!r}, password={PASSWORD!r})"])
    subprocess.run(
        [python, "manage.py", "shell", "-c", f"from django.contrib.auth.models import User; {users}"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    port = free_port()
    processes: list[subprocess.Popen] = []
    commands = {
        "worker": [
            python,
            "-m",
            "celery",
            "-A",
            "hdrag_site",
            "worker",
            "--pool=solo",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "info",
        ],
        "web": [
            python,
            "-m",
            "uvicorn",
            "hdrag_site.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ws-max-size",
            "1048576",
        ],
    }
    try:
        for name, command in commands.items():
            with open(log_dir / f"{name}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        command,
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        portal = LivePortal(f"http://127.0.0.1:{port}", data_dir, log_dir, env)
        try:
            _wait_for(f"{portal.url}/healthz", BUSY_MACHINE_SECONDS, processes)
        except (RuntimeError, TimeoutError) as error:
            pytest.fail(f"the live portal did not start: {error}\n{portal.logs()}", pytrace=False)
        yield portal
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """Module-scoped on purpose: while the sync Playwright runs, the main thread counts as inside
    an event loop, so asyncio.run() in later test modules would fail. It must stop before them."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `./portal test` installs Debian's chromium (apt-get install "
                    "chromium), or set CHROMIUM_PATH", pytrace=False)
    from playwright.sync_api import sync_playwright

    # Playwright gives every launch a fresh temporary profile (--user-data-dir) and removes it after.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def screenshot():
    """`screenshot(page, "name")` saves a full-page PNG under SCREENSHOT_DIR."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:  # noqa: ANN001 - playwright Page
        path = SCREENSHOT_DIR / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


def log_in(browser, portal: LivePortal, username: str, *, dark: bool = False):  # noqa: ANN001, ANN201
    """A fresh context (own cookies) logged in through the real login page; returns its page."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, color_scheme="dark" if dark else "light"
    )
    # Waits are on states (a selector, a status); the timeouts only bound a hang, and are long
    # enough for a machine busy with another portal or test run (issue 30.7).
    context.set_default_timeout(BUSY_MACHINE_SECONDS * 1000)
    page = context.new_page()
    page.goto(f"{portal.url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{portal.url}/")
    return page


def assert_labelled(page) -> None:  # noqa: ANN001 - playwright Page
    """Every visible form control has a label (or an aria-label): usable with a screen reader."""
    unlabelled = page.evaluate("""() => Array.from(document.querySelectorAll("input, select, textarea"))
      .filter((el) => el.type !== "hidden" && !el.closest("[hidden]"))
      .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute("aria-label"))
      .map((el) => el.outerHTML.slice(0, 120))""")
    assert unlabelled == [], (page.url, unlabelled)


def wait_until(page, expression: str, *, timeout: float = BUSY_MACHINE_SECONDS) -> None:  # noqa: ANN001 - playwright Page
    """Poll a JavaScript expression from here until it is true. Playwright's own wait_for_function
    builds its predicate with eval inside the page, which the portal's Content-Security-Policy
    (script-src 'self', no 'unsafe-eval') rightly refuses; page.evaluate goes through DevTools."""
    wait_until_true(
        lambda: page.evaluate(expression), what=f"true in the page: {expression}", timeout=timeout, every=0.1
    )

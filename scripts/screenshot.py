"""Screenshots of a running portal for the README, with headless Chromium over the DevTools protocol.

    .venv/bin/python scripts/screenshot.py --url http://127.0.0.1:8000 --user admin --password PW \
        /corpora/1/=docs/portal-corpus.png "/memory/search/?q=for+loop=docs/portal-search.png"

Logs in through the real login page, hands the session cookie to Chromium, and captures each
PAGE=FILE pair at 1280 px width (full page height).
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import tempfile
import time
from pathlib import Path

import requests
import websocket

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def login(base: str, user: str, password: str) -> str:
    session = requests.Session()
    session.get(f"{base}/accounts/login/", timeout=10)
    response = session.post(f"{base}/accounts/login/", timeout=10, allow_redirects=False,
                            data={"username": user, "password": password,
                                  "csrfmiddlewaretoken": session.cookies["csrftoken"]},
                            headers={"Referer": f"{base}/accounts/login/"})
    if response.status_code != 302 or "sessionid" not in session.cookies:
        raise SystemExit(f"login as {user!r} failed (HTTP {response.status_code})")
    return session.cookies["sessionid"]


class DevTools:
    def __init__(self, port: int) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                target = requests.put(f"http://127.0.0.1:{port}/json/new?about:blank", timeout=2).json()
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        self.socket = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=60)
        self.next_id = 0

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", required=True)
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--port", type=int, default=9333)
    parser.add_argument("shots", nargs="+", help="PAGE=FILE")
    args = parser.parse_args()
    base = args.url.rstrip("/")
    cookie = login(base, args.user, args.password)
    with tempfile.TemporaryDirectory() as profile:
        browser = subprocess.Popen([args.chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                    f"--remote-debugging-port={args.port}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            tools = DevTools(args.port)
            tools.call("Network.enable")
            tools.call("Network.setCookie", name="sessionid", value=cookie, url=base)
            tools.call(
                "Emulation.setDeviceMetricsOverride",
                width=1280,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            for shot in args.shots:
                page, _, target = shot.rpartition("=")
                tools.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1,
                           mobile=False)
                tools.call("Page.enable")
                tools.call("Page.navigate", url=base + page)
                time.sleep(2.5)
                height = tools.call("Runtime.evaluate", expression="document.documentElement.scrollHeight",
                                    returnByValue=True)["result"]["value"]
                tools.call("Emulation.setDeviceMetricsOverride", width=1280, height=min(int(height), 2400),
                           deviceScaleFactor=1, mobile=False)
                image = tools.call("Page.captureScreenshot", format="png")["data"]
                Path(target).write_bytes(base64.b64decode(image))
                print(f"{page} -> {target}")
        finally:
            browser.terminate()
            browser.wait(timeout=30)


if __name__ == "__main__":
    main()

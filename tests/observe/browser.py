"""Open a report in headless Chromium: its self-check (sizes of the timeline, availability
chart and summary; script errors; blocked loads) and a screenshot. Skipped when Chromium is
absent, except in CI (`CI` set) where that is a failure: scripts/setup.sh installs it."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-extensions",
    "--disable-background-networking",
    "--virtual-time-budget=3000",
    "--run-all-compositor-stages-before-draw",
]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing (scripts/setup.sh installs it)")
        pytest.skip("no chromium here (scripts/setup.sh installs it)")
    return exe


def open_report(
    path: Path,
    screenshot: Path | None = None,
    tmp: Path | None = None,
    width: int = 1400,
    height: int = 900,
    fragment: str = "",
) -> dict:
    """The report's self-check as Chromium rendered it in a window `width` px wide (and a
    screenshot, when asked); `fragment` ends the address (e.g. "#zoom=2-5")."""
    exe = chromium()
    profile = [
        "--user-data-dir=" + str((tmp or path.parent) / "chromium-profile"),
        f"--window-size={width},{height}",
    ]
    # --enable-logging: the page's console (errors, CSP refusals) goes to stderr as CONSOLE lines
    out = subprocess.run(
        [
            exe,
            *ARGS,
            *profile,
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            path.resolve().as_uri() + fragment,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r'data-selfcheck="([^"]*)"', out.stdout)
    assert m, f"no self-check in the rendered page: {out.stderr[-2000:]}"
    console = [
        line for line in out.stderr.splitlines() if ":CONSOLE" in line or "Refused to" in line
    ]
    if screenshot is not None:
        shot = subprocess.run(
            [
                exe,
                *ARGS,
                *profile,
                f"--screenshot={screenshot}",
                path.resolve().as_uri() + fragment,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert screenshot.exists() and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    check = json.loads(html.unescape(m.group(1)))
    check["console"] = console
    return check


def assert_rendered(check: dict) -> None:
    """The timeline, the availability chart and the summary are there with a size; no script
    error; nothing tried to load from outside the file."""
    for part in ("timeline", "availability", "summary"):
        w, h = check[part]
        assert w > 100 and h > 50, (part, check)
    assert check["bars"] > 0, check
    assert check["errors"] == 0 and check["blocked"] == 0, check
    assert check["console"] == [], check["console"]


def assert_readable(check: dict) -> None:
    """No two text labels of a chart overlap (bounding boxes as Chromium laid them out), every
    colour a bar uses is in a legend, no text is smaller than 11 px, and the hover texts are
    HTML tooltips."""
    assert check["overlaps"] == [], check["overlaps"]
    assert check["unlisted"] == [], check["unlisted"]
    assert check["smallest_px"] >= 11, check["smallest_px"]
    # hover text became the page's HTML tooltips (every SVG <title> moved to data-tip)
    assert check["tips"] > 0 and check["titles"] == 0, check


def assert_self_contained(doc: str) -> None:
    """Nothing in the file can make a request: no src/href/url() at all, and a CSP that forbids
    every load (default-src 'none') in case one slipped in."""
    assert not re.search(r"\b(src|href|srcset|action)\s*=", doc, re.I)
    assert "url(" not in doc and "@import" not in doc
    assert "default-src 'none'" in doc

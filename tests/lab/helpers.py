"""Small waits and checks shared by the lab tests."""

from __future__ import annotations

import time

from stepwise.lab import control


def health(lab, node: str, service: str) -> dict:
    for n in control.status(lab)["nodes"]:
        if n["name"] == node:
            return next(s for s in n["services"] if s["name"] == service)
    raise KeyError(node)


def wait_for(fn, timeout: float = 15.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met in {timeout}s (last: {last!r})")

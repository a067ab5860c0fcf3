"""The availability probe samples until it is stopped: no silent cap cuts off a long phase's
tail, and a probe that does stop early at its safety cap says so and fails every check.

No lab: one HTTP server on loopback is the probe's only VIP, and the probe's clock (its module's
`time`) runs 10 s per reading, so ten simulated minutes pass in well under a real second.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

import stepwise.lab.probe as probe_mod
from stepwise.lab.labspec import spec_from_json
from stepwise.lab.probe import Probe, failed
from tests.lab_json import lab_json


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def lab() -> Iterator[SimpleNamespace]:
    """A lab as the probe reads it: one HTTP VIP on loopback, no workloads, no OpenStack."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = spec_from_json(
            json.loads(lab_json(vips={"api": {"address": "127.0.0.1", "port": server.server_port}}))
        )
        api = SimpleNamespace(kind="stand_in", health_path="/")
        yield SimpleNamespace(spec=spec, service=lambda _name: api)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fast_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's wall clock advances 10 s per reading (its pacing stays on the real one)."""
    lock = threading.Lock()
    now = [1_000_000.0]

    def fake_time() -> float:
        with lock:
            now[0] += 10.0
            return now[0]

    monkeypatch.setattr(
        probe_mod,
        "time",
        SimpleNamespace(time=fake_time, monotonic=time.monotonic, perf_counter=time.perf_counter),
    )


def _span(p: Probe) -> float:
    ts = [r["t"] for r in p.records]
    return max(ts) - min(ts) if ts else 0.0


def _wait_for(cond, what: str) -> None:
    """Poll `cond` (a bound on the wait only: the outcome is asserted by the caller)."""
    for _ in range(600):
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_a_probe_samples_until_it_is_stopped(lab, fast_clock):
    """Past the ten minutes that used to end sampling without a word: still sampling."""
    p = Probe(lab, rate=50).start()
    try:
        _wait_for(lambda: _span(p) > 1800, "half an hour of samples")
        assert p._thread is not None and p._thread.is_alive(), "sampling ended on its own"
    finally:
        summary = p.stop()
    assert summary["stopped_early"] is None
    assert summary["targets"]["vip:api"]["requests"] > 0
    assert failed(summary) == {}


def test_a_probe_that_reaches_its_safety_cap_says_so_and_fails_the_checks(lab, fast_clock):
    p = Probe(lab, rate=50, max_seconds=300).start()
    _wait_for(lambda: p._thread is not None and not p._thread.is_alive(), "the cap reached")
    summary = p.stop()
    assert summary["targets"]["vip:api"]["failed"] == 0  # every request it made was answered
    assert "stopped early" in (summary["stopped_early"] or "")
    # whatever the check looks at, it fails: the probe did not see the end of the run
    assert [k for k in failed(summary, "vip:") if k.startswith("probe: ")], summary
    assert failed(summary, "client:")
    assert p.summary()["stopped_early"] == summary["stopped_early"]


def test_a_probe_run_for_a_duration_ends_there_without_stopping_early(lab, fast_clock):
    """`lab probe --duration`: the end asked for is not an early stop."""
    p = Probe(lab, rate=50)
    p.run(until=600)
    summary = p.summary()
    assert summary["stopped_early"] is None and failed(summary) == {}
    assert summary["targets"]["vip:api"]["requests"] > 0
    assert 500 <= _span(p) <= 600

# Shipped with stepwise: holds each play of a stepwise playbook until stepwise lets it start.
"""Before a play (a unit) starts, ask stepwise whether it may: stepwise answers when the
unit's predecessors are done (`go`), or that the run is stopping (`stop`: this playbook ends
before the play touches any host). The question goes over a Unix socket named by
STEPWISE_GATE_SOCKET; without it the plugin does nothing (exported playbooks)."""

from __future__ import annotations

DOCUMENTATION = """
name: stepwise_gate
type: aggregate
short_description: let stepwise decide when each play (unit) may start
description:
  - Blocks at the start of every play until stepwise answers go or stop.
requirements:
  - STEPWISE_GATE_SOCKET in the environment
"""

import json
import os
import socket
import sys

from ansible.plugins.callback import CallbackBase

#: exit code of a playbook that stepwise stopped at a play boundary
STOPPED_RC = 75


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "stepwise_gate"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("STEPWISE_GATE_SOCKET")
        self._chain = os.environ.get("STEPWISE_CHAIN", "")
        self._sock = None
        self._file = None

    def _ask(self, unit):
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.connect(self._path)
            self._file = self._sock.makefile("rwb")
        self._file.write(json.dumps({"chain": self._chain, "unit": unit}).encode() + b"\n")
        self._file.flush()
        line = self._file.readline()
        return json.loads(line).get("answer") if line else "stop"

    def v2_playbook_on_play_start(self, play):
        if not self._path:
            return
        # the stdout callback (ansible-runner's) has emitted this play's start event: make sure
        # it reached stepwise before we wait, so stepwise knows the previous play ended
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            answer = self._ask(play.get_name())
        except OSError:
            answer = "stop"  # stepwise is gone: touch nothing more
        if answer != "go":
            raise SystemExit(STOPPED_RC)

"""The engine's side of the gate: the Unix socket on which each ansible-playbook process's
`stepwise_gate` callback asks, before every play, whether its unit may start."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path


class GateServer:
    """The Unix socket the `stepwise_gate` callbacks ask on; one thread per connection (one
    connection per ansible-playbook process)."""

    def __init__(self, path: Path, answer: Callable[[str, str], str]):
        self.path, self.answer = path, answer
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o600)
        self.sock.listen(64)
        self.closed = False
        threading.Thread(target=self._accept, name="stepwise-gate", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                try:
                    req = json.loads(line)
                    answer = self.answer(str(req.get("chain", "")), str(req.get("unit", "")))
                except (ValueError, OSError):
                    answer = "stop"
                try:
                    f.write(json.dumps({"answer": answer}).encode() + b"\n")
                    f.flush()
                except OSError:
                    return

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

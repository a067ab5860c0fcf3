"""A lab service's stop is graceful, as a real service's is: what the kernel already accepted
is answered, not reset (a reset behind HAProxy is a 502 for the API's client)."""

from __future__ import annotations

import socket
from http.server import BaseHTTPRequestHandler

from stepwise.lab.svcproc import _Server


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server API
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


def test_drain_answers_connections_waiting_in_the_backlog():
    server = _Server(("127.0.0.1", 0), _Ok)
    port = server.server_address[1]
    # nobody accepts yet: these connections sit in the listen backlog with their request sent
    clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
    for c in clients:
        c.sendall(b"GET / HTTP/1.0\r\n\r\n")
    server.drain()
    answers = []
    for c in clients:
        data = b""
        while chunk := c.recv(4096):
            data += chunk
        answers.append(data.split(b"\r\n", 1)[0])
        c.close()
    assert answers == [b"HTTP/1.0 200 OK"] * 3
    # and it no longer listens
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        refused = False
    except ConnectionRefusedError:
        refused = True
    assert refused


def _backlog(server: _Server) -> int:
    """How many connections wait in the listener's backlog (accepted here, then closed)."""
    server.socket.setblocking(False)
    n = 0
    while True:
        try:
            server.socket.accept()[0].close()
        except BlockingIOError:
            return n
        n += 1


def test_a_moving_address_sends_new_connections_to_its_destination_only():
    """A live migration's handover: while source and destination both listen, no connection
    lands in the source's backlog (closing it would reset them), and the destination alone
    goes on answering once the source has gone."""
    source = _Server(("127.0.0.1", 0), _Ok, reuse_port=True)
    address = source.server_address
    destination = _Server(address, _Ok, reuse_port=True)
    for _ in range(40):  # the kernel's hash would put about half of these on the source
        socket.create_connection(address, timeout=5).close()
    assert (_backlog(source), _backlog(destination)) == (0, 40)
    source.server_close()
    for _ in range(10):
        socket.create_connection(address, timeout=5).close()
    assert _backlog(destination) == 10
    destination.server_close()

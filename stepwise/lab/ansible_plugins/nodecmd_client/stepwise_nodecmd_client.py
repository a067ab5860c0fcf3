"""The client half of a lab's node-command server (`stepwise.lab.nodecmd_server`).

Every node command (`systemctl`, `dnf`, `crudini`, ... on a lab node) used to be a Python
process that imported the lab's code before doing a few milliseconds of work: ~0.1 s of CPU
of a ~0.15 s call, and a controller's visit makes a hundred of them. The lab's node-command
server has that code imported once and forks a child per call; this client hands it the
call: argv, environment, working directory and its own standard streams (passed as file
descriptors, so the child reads and writes them directly), then waits for the child's exit
status and exits with it.

Top-level module of its own directory, importing only built-in modules: it runs before (and
instead of) importing stepwise, whose package imports alone cost more than the whole call.
`call` returns only when no server took the call (none running, or
STEPWISE_LAB_NODECMD_SERVER=0); the entry then runs the command in its own process as before.
"""

import _socket
import array
import os

MAGIC = b"SWNC1"
#: the server answers this byte once a child runs the call: after it, never run it here too
ACK = b"A"


def request(argv, env, cwd):
    """The call as bytes: magic, length, then NUL-separated cwd, argc, argv, KEY=VALUE."""
    parts = [os.fsencode(cwd), str(len(argv)).encode()]
    parts += [os.fsencode(a) for a in argv]
    parts += [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]
    body = b"\0".join(parts)
    return MAGIC + len(body).to_bytes(4, "big") + body


def _read(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def start(name, argv, env, cwd, fds=(0, 1, 2)):
    """Hand `argv` to the server at abstract socket `name`, its standard streams the
    descriptors `fds`; the connection once a child runs the call (its status comes on it:
    `status`), or None when no server took the call (then nothing ran)."""
    if os.environ.get("STEPWISE_LAB_NODECMD_SERVER") == "0":
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(name)
        data = request(argv, env, cwd)
        sent = sock.sendmsg(
            [data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", list(fds)))]
        )
        sock.sendall(data[sent:])
        ack = sock.recv(1)
    except OSError:
        sock.close()
        return None
    if ack != ACK:
        sock.close()
        return None
    return sock


def status(sock, timeout=None):
    """The exit status of the call running on `sock` (a connection `start` returned). After
    `timeout` seconds the call is given up (exit status 124): the child sees its caller gone
    and is ended."""
    sock.settimeout(timeout)
    try:
        data = _read(sock, 4)
    except OSError:  # the timeout (the caller says so): closing the socket ends the child
        sock.close()
        return 124
    sock.close()
    if len(data) < 4:
        # the child ran (or runs) the command: running it again here could do it twice
        os.write(2, b"stepwise lab: the node-command server went away during the call\n")
        return 255
    code = int.from_bytes(data, "big", signed=True)
    return code if code >= 0 else 128 - code


def run(name, argv, env, cwd, timeout=None):
    """Run `argv` in the server at abstract socket `name` on this process's standard streams;
    its exit status, or None when no server took the call (then nothing ran). After
    `timeout` seconds the call is given up (exit status 124)."""
    sock = start(name, argv, env, cwd)
    return None if sock is None else status(sock, timeout)


def call(name, argv=None):
    """Run this process's command in the lab's node-command server at abstract socket `name`
    and exit with its status; return when no server took it."""
    import sys

    code = run(name, sys.argv if argv is None else argv, os.environ, os.getcwd())
    if code is not None:
        os._exit(code)

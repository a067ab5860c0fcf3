"""The handover of an address without a refused request: a workload's during its live
migration, a router's floating IP as its new keepalived master takes it.

Source and destination listen on the same address (SO_REUSEPORT) while the instance moves.
The kernel spreads new connections over both listeners, and closing the source's listener
resets whatever landed in its backlog since its last accept: a request the live migration of
a real instance (a pause of milliseconds, no reset) never fails. The destination therefore
steers every new connection of the group to itself from the moment it listens (a one-line
classic BPF program on the reuseport group), so the source drains a backlog that no longer
grows and closes with nothing queued.
"""

from __future__ import annotations

import ctypes
import socket

#: linux/asm-generic/socket.h
SO_ATTACH_REUSEPORT_CBPF = 51
#: BPF_RET | BPF_K: return the constant
_RET_K = 0x06


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def take_new_connections(sock: socket.socket) -> None:
    """Send the reuseport group's new connections to `sock`, the listener that joined last.

    A group's sockets are numbered in the order they joined: a destination joining its source
    is number 1. Alone (no source, or once the source has gone) it is number 0, the program's
    answer is out of range and the kernel falls back to its hash, which has only it to pick.
    """
    program = (_SockFilter * 1)(_SockFilter(_RET_K, 0, 0, 1))
    fprog = _SockFprog(1, program)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, bytes(fprog))
    except OSError:
        pass  # a kernel without it: the handover keeps its (narrow) race, nothing else changes

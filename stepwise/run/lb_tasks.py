"""The load-balancer work of a service behind a VIP (the catalog's `frontend:`), one template
for every such service in every workflow and style: its `leave` drains the node's server in
that backend through HAProxy's runtime API and waits until HAProxy counts no session on it
(the requests in progress have finished), its `rejoin` waits for the service's health checks
and sets the server ready again (docs/architecture.md "Why API drains in the catalog").

The backend's name comes from the catalog and the server's from the inventory: both reach the
shell as environment variables (play variables the run layer marks `!unsafe`), never as script
text. A node without the runtime API (`socat` cannot connect to its socket) has nothing to
drain and skips it, as galera's own leave does.
"""

from __future__ import annotations

from typing import Any

#: where a controller's tasks reach HAProxy's runtime API (TripleO's haproxy container mounts
#: it there); a host variable names another (Kolla-Ansible's is under /var/lib/kolla/haproxy)
STATS_SOCKET = "/var/lib/haproxy/stats"
#: the play variable: service -> its backend, for the services of a leave or rejoin unit
FRONTENDS_VAR = "stepwise_frontends"
#: how long the leave waits for the sessions to end: 50 looks 0.2 s apart (~10 s, the step's
#: default estimate in the planner)
WAIT_RETRIES = 50
WAIT_DELAY = 0.2

_CONNECTED = 'socat /dev/null "unix-connect:$STATS" 2>/dev/null'
#: a runtime-API command: its reply is empty when it worked, else the reason (to stderr)
_SEND = (
    '  reply=$(echo "{command}" | socat stdio "unix-connect:$STATS")\n'
    '  if [ -n "$reply" ]; then echo "HAProxy: $reply" >&2; exit 1; fi\n'
)
_SESSIONS = (
    'awk -F, -v b="$BACKEND" -v s="$SERVER" \'$1 == b && $2 == s {print $5; found = 1}\n'
    '  END {if (!found) {print "HAProxy has no server " s " in backend " b > "/dev/stderr"; '
    "exit 1}}'"
)


def _environment(service: str) -> dict[str, str]:
    return {
        "BACKEND": "{{ " + f"{FRONTENDS_VAR}[{service!r}]" + " }}",
        # TripleO names a controller's servers after its host name on the network
        # (`controller-0.internalapi.localdomain`): a host variable says so
        "SERVER": "{{ stepwise_haproxy_server | default(inventory_hostname) }}",
        "STATS": "{{ stepwise_haproxy_socket | default('" + STATS_SOCKET + "') }}",
    }


def _set_state(service: str, name: str, state: str) -> dict[str, Any]:
    command = "set server $BACKEND/$SERVER state " + state
    return {
        "name": name,
        "ansible.builtin.shell": {
            "cmd": "set -o pipefail\n"
            f"if {_CONNECTED}; then\n" + _SEND.format(command=command) + "fi\n",
            "executable": "/bin/bash",
        },
        "environment": _environment(service),
        "changed_when": True,
    }


def leave_tasks(service: str) -> list[dict[str, Any]]:
    """Drain the node's server of `service` in its backend (no new request comes to it), then
    wait until HAProxy counts no session on it."""
    return [
        _set_state(
            service,
            f"Drain {service} on this node in the load balancer (no new request comes)",
            "drain",
        ),
        {
            "name": f"Wait until {service} on this node has no request in progress "
            "(the load balancer's count of its sessions)",
            "ansible.builtin.shell": {
                "cmd": "set -o pipefail\n"
                f"if ! {_CONNECTED}; then echo 0; exit 0; fi\n"
                "echo 'show stat' | socat stdio \"unix-connect:$STATS\" |\n  " + _SESSIONS + "\n",
                "executable": "/bin/bash",
            },
            "environment": _environment(service),
            "register": "_stepwise_sessions",
            "until": '_stepwise_sessions.stdout == "0"',
            "retries": WAIT_RETRIES,
            "delay": WAIT_DELAY,
            "changed_when": False,
        },
    ]


def rejoin_tasks(service: str, checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wait until `service` passes its health `checks` on the node, then set its server ready:
    the load balancer sends it requests only once it answers them."""
    return [
        *checks,
        _set_state(service, f"Put {service} on this node back into the load balancer", "ready"),
    ]

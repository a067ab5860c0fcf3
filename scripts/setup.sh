#!/usr/bin/env bash
# Install what stepwise, its lab and its tests need on a fresh Debian machine (idempotent).
#   - Debian: MariaDB with galera-4 (the lab's database is a real Galera cluster; mariabackup
#     and socat carry its state transfers) and HAProxy (the lab's real components), OpenSSH
#     server (the SSH connection test), PostgreSQL (the team state store, tested for real),
#     Chromium (the HTML report tests open the reports headless), memcached and RabbitMQ
#     (real on the nodes of a `lab: openstack` deployment).
#   - Python: a venv in .venv with stepwise and its pinned dependencies (+ test extras).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v rsync >/dev/null 2>&1 || need+=(rsync)
# the lab's database is a real Galera cluster: the provider and the SST method (mariabackup over socat)
[ -e /usr/lib/galera/libgalera_smm.so ] || need+=(galera-4)
command -v mariabackup >/dev/null 2>&1 || need+=(mariadb-backup)
command -v socat >/dev/null 2>&1 || need+=(socat)
command -v mariadb >/dev/null 2>&1 || command -v mysql >/dev/null 2>&1 || need+=(mariadb-client)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
# containers in the lab: a real registry (distribution) and the real client nodes pull with
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
# real OpenStack in the lab: uWSGI serves keystone/placement/glance from venvs of Debian's python3
# (the client probe and tempest run from venvs of it too)
command -v uwsgi >/dev/null 2>&1 || need+=(uwsgi-core)
[ -e /usr/lib/uwsgi/plugins/python3_plugin.so ] || need+=(uwsgi-plugin-python3)
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# real memcached and a real RabbitMQ cluster on the nodes of a `lab: openstack` deployment
[ -x /usr/bin/memcached ] || need+=(memcached)
[ -x /usr/sbin/rabbitmq-server ] || need+=(rabbitmq-server)
# the report tests open the HTML reports in headless Chromium (only when the tests are installed)
case ",${STEPWISE_EXTRAS:-test}," in
  *,test,*) command -v chromium >/dev/null 2>&1 || need+=(chromium) ;;
esac
# each step says what it does and how long it took: a fresh machine's first run is minutes
step_start=$SECONDS
step_done() { echo "setup: $1 in $((SECONDS - step_start)) s"; step_start=$SECONDS; }
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # policy-rc.d keeps the packages from starting system-wide daemons: the lab starts its own.
  $SUDO sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  $SUDO rm -f /usr/sbin/policy-rc.d
  step_done "Debian packages installed"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
extras="${STEPWISE_EXTRAS:-test}"
echo "setup: installing stepwise and its pinned dependencies into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]"
step_done "Python packages installed"
# stepwise is installed editable: pip compiles nothing of it, and where PYTHONDONTWRITEBYTECODE
# is set (this workplace's shells set it) every process that imports it compiled its modules
# again: each node command of the lab (0.06 of its 0.29 s), each CLI command (~0.3 s), each
# stand-in service. Compiled once here; Python still reads what it may not write
.venv/bin/python -m compileall -q -j 0 stepwise >/dev/null
echo "setup: ready (.venv/bin/stepwise) in $SECONDS s"

#!/usr/bin/env bash
# Regenerate one of the lab's OpenStack lock files (stepwise/lab/openstack/locks/NAME.txt):
# install the given projects into a throwaway venv of the system Python under an OpenStack
# branch's upper-constraints file, then write its `pip freeze`.
#   bash scripts/lock-openstack.sh NAME UPPER_CONSTRAINTS_FILE 'BRANCH' PROJECT==VERSION...
# e.g. (upper-constraints.txt of openstack/requirements' stable/2025.2 saved locally):
#   bash scripts/lock-openstack.sh 2025.2 uc-2025.2.txt stable/2025.2 keystone==28.1.0 \
#        openstack-placement==14.0.0 glance==31.1.0 PyMySQL python-memcached
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 constraints=$2 branch=$3; shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check -c "$constraints" "$@"
out="stepwise/lab/openstack/locks/$name.txt"
{ echo "# pip freeze of an install under openstack/requirements' upper-constraints of $branch ($*); regenerate with scripts/lock-openstack.sh"
  "$tmp/venv/bin/pip" freeze --disable-pip-version-check; } > "$out"
echo "wrote $out ($(grep -vc '^#' "$out") packages)"

#!/usr/bin/env bash
# Installs the Debian packages the tests need beyond Node: `chromium` (the browser tests of
# test/browser drive it through playwright-core, which never downloads a browser of its own; npm
# installs may set PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 all the same), `prometheus` (its `promtool`
# tests deploy/prometheus/alerts.yml) and `postgresql` (the server binaries initdb, pg_ctl and
# postgres: the cluster-mode tests start their own throwaway server with them, see
# rigs/local-postgres.ts; on Debian 12 the package brings postgresql-15) and `haproxy` (the upgrade
# tier's balancer, test/helpers/haproxy.ts, on deploy/compose/haproxy.cfg). Idempotent: a
# package already there is left alone, and `apt-get update` runs only when something is missing.
# Runs as root, or through sudo when it can.
set -euo pipefail

# package → a file that proves it is installed
declare -A PROVIDES=(
  [chromium]=/usr/bin/chromium
  [prometheus]=/usr/bin/promtool
  [haproxy]=/usr/sbin/haproxy
)

# The PostgreSQL server, looked for where rigs/local-postgres.ts looks: PG_BIN, then
# `pg_config --bindir` (which libpq-dev alone also ships, without a server, hence the initdb check),
# then Debian's /usr/lib/postgresql/<version>/bin. (A PG_BIN naming the wrong directory is not
# fixed by installing anything; the tests' error names it.)
have_postgresql_server() {
  local dir
  if [ -n "${PG_BIN:-}" ] && [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ]; then return 0; fi
  if dir=$(pg_config --bindir 2>/dev/null) && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then return 0; fi
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then return 0; fi
  done
  return 1
}

installed() {
  case "$1" in
    postgresql) have_postgresql_server ;;
    *) [ -x "${PROVIDES[$1]}" ] || dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed' ;;
  esac
}

missing=()
for pkg in chromium prometheus postgresql haproxy; do
  if installed "$pkg"; then
    echo "install-ci-packages: $pkg already installed"
  else
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo -n)
else
  echo "install-ci-packages: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-ci-packages: no apt-get here; install these by hand: ${missing[*]}" >&2
  exit 1
fi

echo "install-ci-packages: installing ${missing[*]}"
"${as_root[@]}" apt-get update -qq
# Recommends stay on: chromium's bring fonts-liberation, without which pages render in fallback glyphs.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"

for pkg in "${missing[@]}"; do
  if ! installed "$pkg"; then
    echo "install-ci-packages: $pkg installed but what the tests use from it is missing (${PROVIDES[$pkg]:-initdb, pg_ctl})" >&2
    exit 1
  fi
done
echo "install-ci-packages: done"

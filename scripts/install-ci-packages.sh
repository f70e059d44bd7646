#!/usr/bin/env bash
# Installs the Debian packages the tests need beyond Node: `chromium` (the browser tests of
# test/browser drive it through playwright-core, which never downloads a browser of its own; npm
# installs may set PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 all the same) and `prometheus` (its `promtool`
# tests deploy/prometheus/alerts.yml). Idempotent: a package already there is left alone, and
# `apt-get update` runs only when something is missing. Runs as root, or through sudo when it can.
set -euo pipefail

# package → a file that proves it is installed
declare -A PROVIDES=(
  [chromium]=/usr/bin/chromium
  [prometheus]=/usr/bin/promtool
)

missing=()
for pkg in chromium prometheus; do
  if [ -x "${PROVIDES[$pkg]}" ] || dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
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
  if [ ! -x "${PROVIDES[$pkg]}" ]; then
    echo "install-ci-packages: $pkg installed but ${PROVIDES[$pkg]} is missing" >&2
    exit 1
  fi
done
echo "install-ci-packages: done"

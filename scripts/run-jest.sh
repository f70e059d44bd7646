#!/usr/bin/env bash
# jest with the workers these tests want; `npm test` and `npm run test:all` run it after their
# build, and arguments go to jest (`--selectProjects postgres`, a path, `--maxWorkers=2`):
#   npm test           --selectProjects unit integration e2e: the fast tier, Node alone
#   npm run test:all   every tier of jest.config.js, postgres, browser and promtool too (they need
#                      PostgreSQL's server binaries, Chromium and promtool: scripts/install-ci-packages.sh)
#
# Workers: most files wait more than they compute (child processes, PostgreSQL, Chromium, timers),
# so the run takes one worker more than there are cores (3 on 2 cores; jest's default is one less,
# 1 on 2 cores). TEST_WORKERS sets the number. Each worker starts its own PostgreSQL server when it
# first needs one (test/helpers/postgres.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
cores="$(node -p 'require("node:os").availableParallelism()')"
exec npx jest --maxWorkers="${TEST_WORKERS:-$((cores + 1))}" "$@"

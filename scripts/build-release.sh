#!/usr/bin/env bash
# Builds a release of consig-receiver — a commit of this repository — outside the work tree, for the
# upgrade tier (test/upgrade/, issue 46): the previous release runs there beside this tree's dist/.
#
#   bash scripts/build-release.sh <commit> [<dir>]      prints the built directory on its last line
#
# <dir> defaults to node_modules/.cache/consig-releases/<full commit>: on node_modules' own file
# system, so its node_modules can be a hard-link copy of the current one (`cp -al` cannot link
# across file systems, and /tmp is often a tmpfs); out of git, prettier, eslint and jest's way like
# every node_modules/.cache; and gone with node_modules, so a CI run's `npm ci` never leaves a
# build made against other dependencies behind.
#
# The commit's files come from `git archive` (no checkout, the work tree is untouched). Its
# node_modules: a hard-link copy of this tree's when the commit's package-lock.json is byte-equal
# to this tree's (the same packages, seconds instead of minutes; the files are shared, so nothing may
# write into them in place: the build writes dist/ only), else `npm ci` there. Then its own
# `npm run build`. Idempotent: a finished build (the marker, written last) is reused; an unfinished
# one is started again. Runs one at a time per directory (flock), so jest workers may call it at
# once. A commit missing from the clone (a shallow CI clone) is fetched from origin once; when that
# fails too it stops with an error — it never skips.
set -euo pipefail

usage="usage: bash scripts/build-release.sh <commit> [<dir>]"
commit="${1:?$usage}"
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
say() { echo "build-release: $*" >&2; }

resolve() { git rev-parse --verify --quiet "$1^{commit}"; }
if ! sha="$(resolve "$commit")"; then
  say "$commit is not in this clone; trying \`git fetch origin $commit\` once"
  if ! git fetch --quiet origin "$commit" >&2 || ! sha="$(resolve "$commit")"; then
    say "cannot build $commit: it is not in this clone (a shallow clone? CI must fetch the history, e.g. fetch-depth: 0, or the commit itself) and fetching it from origin failed. Name it by its full 40-character id in test/upgrade/previous-release.json (or UPGRADE_FROM): an abbreviated one cannot be fetched."
    exit 1
  fi
fi

dir="${2:-$here/node_modules/.cache/consig-releases/$sha}"
marker="$dir/.consig-release-built"
mkdir -p "$(dirname "$dir")"
exec 9> "$dir.lock"
flock 9

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$sha" ]; then
  say "$sha already built in $dir"
  echo "$dir"
  exit 0
fi

started=$(date +%s)
rm -rf "$dir"
mkdir -p "$dir"
git archive "$sha" | tar -x -C "$dir"

if ! cmp -s "$dir/package-lock.json" "$here/package-lock.json"; then
  say "$sha has another package-lock.json than this tree: npm ci in $dir"
  (cd "$dir" && npm ci --no-audit --no-fund >&2)
elif [ ! -d "$here/node_modules" ]; then
  say "$sha has this tree's package-lock.json, but this tree has no node_modules to link: npm ci in $dir"
  (cd "$dir" && npm ci --no-audit --no-fund >&2)
else
  say "$sha has this tree's package-lock.json: node_modules as a hard-link copy of this tree's"
  mkdir "$dir/node_modules"
  # Everything but .cache, which holds the releases themselves (this one among them).
  find "$here/node_modules" -mindepth 1 -maxdepth 1 ! -name .cache -exec cp -al {} "$dir/node_modules/" \;
fi

say "npm run build in $dir"
(cd "$dir" && npm run build >&2)
echo "$sha" > "$marker"
say "built $sha in $(($(date +%s) - started)) s"
echo "$dir"

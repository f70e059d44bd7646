# consig-receiver: webhook receiver (Express + better-sqlite3), built in two stages so the image
# carries no devDependencies and no native code it does not load.
#
# Build:  docker build -t consig-receiver .
# Run:    docker run -e WEBHOOK_SECRETS=... -p 3000:3000 -v consig-data:/data consig-receiver
# Other commands on the same volume (migrate, events, deliveries, stats):
#         docker run --rm -v consig-data:/data consig-receiver node dist/src/cli/bin.js stats
# Read the log with SQLite's shell, in the running container:
#         docker exec -it <container> sqlite3 -readonly /data/consig.db 'SELECT * FROM events LIMIT 5'
#
# test/dockerfile/dockerfile.test.ts parses this file and runs the build stage's RUN lines and the
# CMD outside Docker (npm run test:dockerfile): keep RUN lines plain shell commands, relative to
# WORKDIR, with apt-get only on its own RUN line (the test skips those).

# ---- build: compile TypeScript; keep only the native code the runtime loads ---------------------
# Node 26 is the active LTS (24 is in maintenance). On Node >= 22 the receiver loads better-sqlite3 13
# (`better-sqlite3-napi`: Node-API, prebuilt binaries in its package), so nothing is compiled here: no
# toolchain, and `npm ci --ignore-scripts` (12.x, for Node 20 only, would compile for nothing; no other
# dependency has an install script).
FROM node:26-bookworm-slim AS build

WORKDIR /app

# Manifests first: the install layer is reused until they change.
COPY package.json package-lock.json .npmrc ./
# All dependencies (the build needs typescript and @types/*), exactly as locked.
RUN npm ci --no-audit --no-fund --ignore-scripts

COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY migrations ./migrations
COPY migrations-pg ./migrations-pg
RUN npm run build

# Drop devDependencies (typescript, jest, eslint, ...), then the better-sqlite3 this Node does not
# load, and of the one it loads everything but its binary for this platform (sources, other
# platforms' prebuilt binaries); the script checks the driver still opens a database.
RUN npm prune --omit=dev
COPY scripts/slim-node-modules.js ./scripts/
RUN node scripts/slim-node-modules.js

# ---- runtime ---------------------------------------------------------------------------------------
FROM node:26-bookworm-slim AS runtime

# WEBHOOK_SECRETS (comma-separated) is required at run time and deliberately has no default here:
# pass it with -e or a secret manager, never bake it into the image.
ENV NODE_ENV=production \
    DATABASE_PATH=/data/consig.db \
    PORT=3000 \
    HOST=0.0.0.0

WORKDIR /app

# sqlite3, the command-line shell, for an operator to read the log where it lives:
#   docker exec -it <container> sqlite3 -readonly /data/consig.db
RUN apt-get update \
 && apt-get install -y --no-install-recommends sqlite3 \
 && rm -rf /var/lib/apt/lists/*

# Application files stay owned by root: the process cannot modify its own code.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/migrations ./migrations
COPY --from=build /app/migrations-pg ./migrations-pg

# The SQLite database (and its -wal/-shm files) lives on a volume writable by the node user.
RUN mkdir -p /data && chown node:node /data
VOLUME /data

# Unprivileged user from the base image (uid 1000).
USER node

EXPOSE 3000

# Health via node itself (slim images have no curl): /readyz, which takes a write on the database
# (/healthz only says the process runs, and keeps saying so when the volume's disk is dead or
# read-only while every delivery is refused). A busy or slow disk does not flap it: each check may
# take 9 s, and only three failures in a row (1.5 min) make the container unhealthy.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/readyz', { signal: AbortSignal.timeout(9000) }).then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))"]

# node runs as PID 1 without an init: serve handles SIGTERM/SIGINT itself (drains in-flight
# deliveries, then exits 0) and spawns no child processes to reap.
CMD ["node", "--max-semi-space-size=4", "dist/src/cli/bin.js", "serve"]

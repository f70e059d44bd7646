# consig-receiver: webhook receiver (Express + better-sqlite3), built in two stages so the image
# carries neither the C++ toolchain nor devDependencies.
#
# Build:  docker build -t consig-receiver .
# Run:    docker run -e WEBHOOK_SECRETS=... -p 3000:3000 -v consig-data:/data consig-receiver
# Other commands on the same volume (migrate, events, deliveries, stats):
#         docker run --rm -v consig-data:/data consig-receiver node dist/src/cli/bin.js stats
#
# test/dockerfile/dockerfile.test.ts parses this file and runs the build stage's RUN lines and the
# CMD outside Docker (npm run test:dockerfile): keep RUN lines plain shell commands, relative to
# WORKDIR, with apt-get only on its own RUN line.

# ---- build: compile TypeScript and the native addon ----------------------------------------------
# Node 26 is the active LTS (24 is in maintenance). On Node >= 22 the receiver loads better-sqlite3 13
# (Node-API, prebuilt in its package); 12.x, still installed and compiled for Node 20, is unused here.
FROM node:26-bookworm-slim AS build

# better-sqlite3 is a native addon: when no prebuilt binary can be fetched, node-gyp compiles it,
# which needs python3, make and a C++ compiler. They stay in this stage.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Manifests first: the install layer (the slow native build) is reused until they change.
COPY package.json package-lock.json .npmrc ./
# All dependencies (the build needs typescript and @types/*), exactly as locked.
RUN npm ci --no-audit --no-fund

COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY migrations ./migrations
COPY migrations-pg ./migrations-pg
RUN npm run build

# Drop devDependencies (typescript, jest, eslint, ...) but keep the compiled better-sqlite3:
# pruning does not rebuild it, so the runtime stage needs no toolchain.
RUN npm prune --omit=dev

# ---- runtime ---------------------------------------------------------------------------------------
FROM node:26-bookworm-slim AS runtime

# WEBHOOK_SECRETS (comma-separated) is required at run time and deliberately has no default here:
# pass it with -e or a secret manager, never bake it into the image.
ENV NODE_ENV=production \
    DATABASE_PATH=/data/consig.db \
    PORT=3000 \
    HOST=0.0.0.0

WORKDIR /app

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

# Liveness via node itself (slim images have no curl): /healthz must answer 200 within 4 s.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/healthz', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))"]

# node runs as PID 1 without an init: serve handles SIGTERM/SIGINT itself (drains in-flight
# deliveries, then exits 0) and spawns no child processes to reap.
CMD ["node", "dist/src/cli/bin.js", "serve"]

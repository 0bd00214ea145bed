# calbridge container image: compile in a full build stage, run the compiled daemon on node:24-bookworm-slim as the
# unprivileged `node` user, with its SQLite store on the /data volume.
#   docker build -t calbridge .
#   docker run -v calbridge-data:/data -v "$PWD/config:/config:ro" \
#     -e BOOKING_API_KEY -e BOOKING_WEBHOOK_SECRET -p 8080:8080 calbridge
#   (the folder holding calbridge.yaml, not the file, and every secret the file names, such as the Google key file:
#   README, Deployment)
# (publish 8080 only, behind TLS; never the admin port 9090).

# --- build stage: every dependency (TypeScript, the native sqlite3 addon, built from source when no prebuilt
# binary can be fetched), `tsc` into dist/, then the dev dependencies (typescript, biome, vitest, the `node`
# binary package) pruned away so node_modules holds production packages only.
# bookworm by name: sqlite3's bundled node-gyp imports distutils, which Python 3.12 (trixie's) no longer has, so the
# build from source would fail on an image whose default tag moved on.
FROM node:24-bookworm-slim AS build
RUN apt-get update \
  && apt-get install -y --no-install-recommends python3 make g++ \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build \
  && npm prune --omit=dev --no-audit --no-fund

# --- runtime stage: a clean slim image with the compiled code, production node_modules and the reference config.
# Application files stay root-owned (read-only for the daemon); only /data is writable by `node`.
FROM node:24-bookworm-slim AS runtime
# Memory: V8 sizes its heap from the machine (a quarter of RAM, up to 4 GB) and, with a limit of 2 GB or more, lets
# the heap grow to four times what is live before a full collection: a cold reconciliation of 10,000 appointments
# (about 50 MB live) then peaks above 300 MB of RSS. A 1 GB limit makes V8 collect at about 1.6 times (with the
# malloc settings below the peak is 140-151 MB) and is still ~20 times that live set; raise it for windows of more
# than ~100,000 appointments (see README, Deployment). A 1 MB young generation promotes fewer short-lived request
# objects.
# MALLOC_ARENA_MAX=2: glibc gives each thread that allocates (libuv's pool running SQLite and crypto, V8's helpers)
# an arena of its own, up to 8 per core, and each keeps what it freed; JavaScript runs on one thread, so two arenas
# are enough, and keep about 10 MB less resident (1,000 therapists idle, bench/scale-thousand.ts: 184 MB on average
# over four runs, against 196 MB over six without; single runs vary by +-15 MB).
# MALLOC_MMAP_THRESHOLD_=131072: glibc serves a block of 128 KB or more with mmap, given back to the system when freed,
# but each time such a block is freed it raises that threshold to the block's size (up to 32 MB), and later blocks
# under it come from the arenas, where what is freed stays resident in pieces (mallopt(3), M_MMAP_THRESHOLD). Fixed
# at its initial 128 KB, as other long-running services do (sigp/lighthouse#2937), the cold reconciliation of 10,000
# appointments peaks at 140-151 MB, 143 on average, instead of 144-159, 150 on average (9 runs each, CPU time
# unchanged); socket reads (64 KB) stay under it, so the webhook receiver's rate is unchanged too (ingestion benchmark).
ENV NODE_ENV=production \
  NODE_OPTIONS="--enable-source-maps --max-semi-space-size=1 --max-old-space-size=1024" \
  MALLOC_ARENA_MAX=2 \
  MALLOC_MMAP_THRESHOLD_=131072 \
  CALBRIDGE_CONFIG=/config/calbridge.yaml
WORKDIR /app
COPY --from=build /app/package.json /app/package-lock.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY config/example.yaml ./config/example.yaml
# The default store (sqlite://./data/calbridge.sqlite, relative to /app) lands on the volume through the link;
# sqlite:///data/calbridge.sqlite in the config says the same explicitly.
# /data is 0700 (a named volume takes the image folder's mode at first use): the store's files are the daemon's alone.
RUN mkdir -p /data /config \
  && chown node:node /data \
  && chmod 700 /data \
  && ln -s /data /app/data
VOLUME /data
USER node
# Only the public listener (webhooks.listen: booking webhook, Google push, /healthz, and the connect pages when
# connect is configured) is exposed; the admin listener (admin.listen, default 127.0.0.1:9090: /status, /metrics,
# /readyz) stays inside (see README, Deployment).
EXPOSE 8080
# Liveness through node itself (slim has no curl), on the admin listener's /healthz: it runs inside the container, so
# the loopback admin port is reachable, it needs no token, and it is not subject to the public listener's connection
# cap, so a flood of connections to the public port cannot get a healthy daemon marked unhealthy and restarted. Set
# CALBRIDGE_HEALTHCHECK_URL when admin.listen is not on 127.0.0.1:9090.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch(process.env.CALBRIDGE_HEALTHCHECK_URL||'http://127.0.0.1:9090/healthz',{signal:AbortSignal.timeout(4000)}).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["run"]

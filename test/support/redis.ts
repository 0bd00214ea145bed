// Owns real Redis for tests: throwaway redis-server processes on free ports, the CI rule (missing redis-server fails
// under CI=true, skips locally), and a TCP proxy that can freeze to cut one client off as a network partition would.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll } from "vitest";
import { freePort } from "./ports.ts";

export interface RedisServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

const INSTALL_HINT = "install it with `apt-get install -y redis-server` (the CI script does the same)";
const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export function hasRedis(): boolean {
  const probe = spawnSync("redis-server", ["--version"], { stdio: "ignore" });
  return probe.error === undefined && probe.status === 0;
}

/**
 * Whether the Redis tests should run: yes when redis-server exists, and also under CI=true, where a missing
 * redis-server must fail the run (startRedis throws) instead of quietly skipping.
 */
export function redisTestsEnabled(suite: string): boolean {
  if (hasRedis() || process.env.CI === "true") return true;
  console.warn(`[${suite}] skipped: redis-server not found; ${INSTALL_HINT}`);
  return false;
}

/**
 * One redis-server for the calling describe block. The getter throws the start error, so under CI=true every test
 * fails on its own (a failing beforeAll alone would leave the tests merely "skipped" in the summary line).
 */
export function useRedisServer(): () => RedisServer {
  let server: RedisServer | undefined;
  let startError: unknown;
  beforeAll(async () => {
    try {
      server = await startRedis();
    } catch (err) {
      startError = err;
    }
  });
  afterAll(async () => {
    await server?.stop();
  });
  return () => {
    if (!server) throw startError ?? new Error("redis-server was not started");
    return server;
  };
}

/**
 * Starts redis-server without persistence on a free port and resolves once it answers PING. `args` are added to its
 * command line (e.g. ["--requirepass", "..."]: the returned url then carries no password).
 */
export async function startRedis(args: string[] = []): Promise<RedisServer> {
  if (!hasRedis()) throw new Error(`redis-server not found: ${INSTALL_HINT}`);
  let lastError: unknown;
  // A port found free can be taken before redis-server binds it; try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startOn(await freePort(), args);
    } catch (err) {
      lastError = err;
    }
  }
  throw lastError;
}

async function startOn(port: number, extra: string[]): Promise<RedisServer> {
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...extra];
  const child = spawn("redis-server", args, { stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  let output = "";
  child.stdout?.on("data", (d) => {
    output = (output + String(d)).slice(-4000);
  });
  child.stderr?.on("data", (d) => {
    output = (output + String(d)).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
      await exited;
      clearTimeout(timer);
    }
    running.delete(child);
  };
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) break;
    if (await answersPing(port)) return { url: `redis://127.0.0.1:${port}`, port, stop };
    await new Promise((r) => setTimeout(r, 25));
  }
  await stop();
  throw new Error(`redis-server on port ${port} did not answer PING:\n${output}`);
}

function answersPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: "127.0.0.1" });
    let reply = "";
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once("error", () => done(false));
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.on("data", (d) => {
      reply += String(d);
      // -NOAUTH: it answers, and wants a password (--requirepass).
      if (reply.includes("\r\n")) done(reply.startsWith("+PONG") || reply.startsWith("-NOAUTH"));
    });
  });
}

export interface FreezableProxy {
  /** redis:// address of the proxy; clients connected through it can be cut off. */
  url: string;
  /** Stops forwarding in both directions; connections stay open, so commands hang as in a partition. */
  freeze(): void;
  /** Forwards again, including what was held back. */
  thaw(): void;
  close(): Promise<void>;
}

/** A TCP proxy in front of 127.0.0.1:targetPort. */
export async function startProxy(targetPort: number): Promise<FreezableProxy> {
  let frozen = false;
  const held: (() => void)[] = [];
  const sockets = new Set<Socket>();
  const forward = (from: Socket, to: Socket) => {
    from.on("data", (chunk) => {
      if (frozen) held.push(() => to.write(chunk));
      else to.write(chunk);
    });
    from.on("close", () => to.destroy());
    from.on("error", () => to.destroy());
  };
  const server: Server = createServer((client) => {
    const upstream = createConnection({ port: targetPort, host: "127.0.0.1" });
    sockets.add(client);
    sockets.add(upstream);
    client.on("close", () => sockets.delete(client));
    upstream.on("close", () => sockets.delete(upstream));
    forward(client, upstream);
    forward(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("proxy: no address");
  return {
    url: `redis://127.0.0.1:${address.port}`,
    freeze: () => {
      frozen = true;
    },
    thaw: () => {
      frozen = false;
      for (const send of held.splice(0)) send();
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// Owns choosing a port for a server that a test starts later (a daemon whose address must be known before its
// configuration is written, a redis-server, a daemon restarted on the address the simulators deliver to).
//
// Asking the kernel for port 0 and closing the probe hands back a port from the ephemeral range, the range the
// kernel also takes source ports of outgoing connections from. Tests run in parallel workers that open thousands of
// connections to 127.0.0.1, so such a port can be taken by one of them before the server listens on it (seen in CI:
// EADDRINUSE for the connect pages' daemon), or while a daemon restarts on it. A port below that range is never
// handed out as a source port; one is picked at random, probed, and another tried when something listens there.
import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/** Where ports are picked when the kernel's range cannot be read: below Linux's default 32768-60999. */
const FALLBACK_EPHEMERAL_START = 32768;
const LOWEST = 20000;
const ATTEMPTS = 50;

/** The first port of the kernel's ephemeral range. */
function ephemeralStart(): number {
  try {
    const [start] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/);
    const n = Number(start);
    return Number.isInteger(n) && n > LOWEST + 1000 ? n : FALLBACK_EPHEMERAL_START;
  } catch {
    return FALLBACK_EPHEMERAL_START;
  }
}

/** Whether nothing listens on `port` of 127.0.0.1 now. */
function probe(port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", (err: NodeJS.ErrnoException) =>
      err.code === "EADDRINUSE" || err.code === "EACCES" ? resolve(false) : reject(err),
    );
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** A port of 127.0.0.1 that nothing listens on, outside the range outgoing connections take theirs from. */
export async function freePort(): Promise<number> {
  const end = ephemeralStart();
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (end - LOWEST));
    if (await probe(port)) return port;
  }
  throw new Error(`freePort: no free port of 127.0.0.1 between ${LOWEST} and ${end} after ${ATTEMPTS} tries`);
}

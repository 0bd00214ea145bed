// The ports tests start their servers on later: never one the kernel may hand to an outgoing connection meanwhile.
import { existsSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { freePort } from "./ports.ts";

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise<void>((r) => s.close(() => r()));
});

/** The first port the kernel hands to outgoing connections (Linux's default where the setting cannot be read). */
const RANGE = "/proc/sys/net/ipv4/ip_local_port_range";
const start = existsSync(RANGE) ? Number(readFileSync(RANGE, "utf8").trim().split(/\s+/)[0]) : 32768;

const listenOn = (port: number) =>
  new Promise<Server>((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(server));
  });

describe("freePort", () => {
  it("answers ports below the kernel's ephemeral range that a server can then listen on", async () => {
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      expect(port).toBeGreaterThanOrEqual(20000);
      expect(port).toBeLessThan(start);
      servers.push(await listenOn(port));
    }
  });

  it("skips a port something listens on and tries another", async () => {
    const taken = await freePort();
    servers.push(await listenOn(taken));
    const other = taken === 20000 ? taken + 1 : taken - 1;
    // The pick is 20000 + floor(random x (start - 20000)): the first draw lands on the taken port, the second next to it.
    const draw = (port: number) => (port - 20000 + 0.5) / (start - 20000);
    const random = vi.spyOn(Math, "random").mockReturnValueOnce(draw(taken)).mockReturnValueOnce(draw(other));
    try {
      expect(await freePort()).toBe(other);
      expect(random).toHaveBeenCalledTimes(2);
    } finally {
      random.mockRestore();
    }
  });
});

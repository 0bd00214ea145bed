// Tests `calbridge doctor`'s clock check: the booking service's Date header is compared with this clock as it was
// while the check's own request was out, so a doctor run made slow by other checks (a slow or unreachable Google) or
// by a slow booking service does not read as a clock that is off; a clock that is off is still found, and the check's
// request keeps to booking.timeout_ms.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import { runCli, writeConfig } from "./support.ts";

const worlds: World[] = [];
const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  for (const w of worlds.splice(0)) await w.close();
});

async function world(options: Parameters<typeof startWorld>[0] = {}): Promise<World> {
  const w = await startWorld({ therapists: ["th_anna"], ...options });
  worlds.push(w);
  await (await openStore(w.config.store.url)).close(); // the daemon has run: its store is there
  return w;
}

/**
 * A booking service in front of `w`'s that answers as it does, with its Date header `offsetMs` off; the clock check's
 * request (the one without an API key) is answered after `clockDelayMs`.
 */
async function relay(w: World, offsetMs: number, clockDelayMs = 0): Promise<string> {
  const server = createServer(async (req, res) => {
    try {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const headers = { ...req.headers };
      delete headers.host;
      const up = await request(new URL(req.url ?? "/", w.booking.url), {
        method: req.method as "GET",
        headers,
        ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}),
      });
      const body = Buffer.from(await up.body.arrayBuffer());
      if (req.headers.authorization === undefined) await new Promise((r) => setTimeout(r, clockDelayMs));
      for (const [k, v] of Object.entries(up.headers)) {
        if (v !== undefined && !["date", "connection", "keep-alive", "transfer-encoding"].includes(k))
          res.setHeader(k, v);
      }
      res.setHeader("date", new Date(Date.now() + offsetMs).toUTCString());
      res.writeHead(up.statusCode).end(body);
    } catch {
      res.destroy();
    }
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const clockLine = (stdout: string) => stdout.split("\n").find((l) => / clock: /.test(l));

describe("calbridge doctor: clock", () => {
  it("a slow Google does not make a correct clock read as off, nor send the admin to run NTP", async () => {
    // Google answers slowly (an unreachable token endpoint made doctor take ~200 s): the run takes longer than the
    // skew allowed (tolerance_seconds/2 = 5 s) before the clock check's request goes out. Both clocks are the same.
    const w = await world({ google: { latencyMs: 4_000 } });
    const file = writeConfig(w, (c) => {
      c.webhooks.tolerance_seconds = 10;
    });
    const t0 = Date.now();
    const r = await runCli("doctor", "--config", file);
    expect(Date.now() - t0).toBeGreaterThan(6_000);
    expect(clockLine(r.stdout), r.stdout).toMatch(/^ok +clock: within [01] s of the booking service$/);
    expect(r.stdout).not.toMatch(/run NTP/);
  }, 60_000);

  it("a slow booking service does not make a correct clock read as off", async () => {
    // Each booking request takes 2.5 s: the run is ~7.5 s old when the clock check's answer is written.
    const w = await world();
    w.booking.faults.latencyMs = 2_500;
    const file = writeConfig(w, (c) => {
      c.webhooks.tolerance_seconds = 8;
    });
    const r = await runCli("doctor", "--config", file);
    expect(clockLine(r.stdout), r.stdout).toMatch(/^ok +clock: within [01] s of the booking service$/);
  }, 60_000);

  it("still finds a clock that is off, either way", async () => {
    const w = await world();
    for (const [offsetMs, skew] of [
      [-60_000, 60],
      [45_000, -45],
    ] as const) {
      const base = await relay(w, offsetMs);
      const file = writeConfig(w, (c) => {
        c.booking.base_url = base;
        c.webhooks.tolerance_seconds = 60;
      });
      const r = await runCli("doctor", "--config", file);
      expect(clockLine(r.stdout), r.stdout).toBe(`FAIL clock: this clock is ${skew} s off the booking service's`);
      expect(r.stdout).toMatch(/^ {5}fix: run NTP: webhook signatures older than 60 s are refused$/m);
      expect(r.code).toBe(1);
    }
  }, 60_000);

  it("gives up on the clock after booking.timeout_ms", async () => {
    const w = await world();
    const base = await relay(w, 0, 5_000);
    const file = writeConfig(w, (c) => {
      c.booking.base_url = base;
      c.booking.timeout_ms = 1_000;
    });
    const t0 = Date.now();
    const r = await runCli("doctor", "--config", file);
    expect(clockLine(r.stdout), r.stdout).toBe(
      "WARN clock: could not compare clocks: no answer within 1000 ms (booking.timeout_ms)",
    );
    expect(Date.now() - t0).toBeLessThan(5_000);
  }, 60_000);
});

// The open port under a flood: the real daemon as a child process (default limits), 300 concurrent uploads of just
// under webhooks.max_body_bytes with plausible but forged signatures, held open at once, plus 60 uploads of 1 MiB
// with missing, stale or forged signatures (some chunked, read to their end without being held). The daemon's
// resident memory, read from /proc/<pid>/status, must stay under 250 MB (the image is sized for 512 MB), and genuine
// deliveries sent in the middle of it are still accepted and applied.
import { readFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { Agent, request } from "undici";
import { afterAll, describe, expect, it } from "vitest";
import { imageNodeOptions } from "../../bench/support.ts";
import { ConfigSchema } from "../../src/config/schema.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { sign } from "../../src/webhooks/signature.ts";
import { type Daemon, daemonFor } from "../chaos/daemon.ts";
import { eventually, stateProblems } from "../chaos/expected.ts";

const MB = 1024 * 1024;
const RSS_LIMIT_MB = 250;
const DAY = 86_400_000;

/** VmRSS (now) or VmHWM (peak since exec) of a process, in MiB. */
function memoryOf(pid: number, field: "VmRSS" | "VmHWM"): number {
  const m = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error(`no ${field} for ${pid}`);
  return Number(m[1]) / 1024;
}

interface Upload {
  socket: Socket;
  /** Status of the answer, or undefined when the connection ended without one. */
  status: Promise<number | undefined>;
}

/** A POST on a raw socket: request line and headers at once; the body is the caller's to write. */
function upload(port: number, path: string, headers: Record<string, string | number>): Upload {
  const socket = connect(port, "127.0.0.1");
  socket.on("error", () => {});
  const status = new Promise<number | undefined>((resolve) => {
    let head = "";
    socket.on("data", (d) => {
      head += d.toString("latin1");
      const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
      if (m) resolve(Number(m[1]));
    });
    socket.once("close", () => resolve(undefined));
  });
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  socket.write(`POST ${path} HTTP/1.1\r\nHost: calbridge\r\n${lines.join("")}\r\n`);
  return { socket, status };
}

/** Resolves once everything written so far has left this process. */
const flushed = (socket: Socket) => new Promise<void>((resolve) => socket.write("", () => resolve()));

describe("a flood of large uploads at the public port", () => {
  let world: World | undefined;
  let daemon: Daemon | undefined;
  afterAll(async () => {
    await daemon?.kill9();
    await world?.close();
  });

  it("keeps the daemon under 250 MB of RSS with 300 concurrent near-limit uploads, and genuine webhooks get through", async () => {
    world = await startWorld({
      therapists: ["th_1", "th_2"],
      configure: (c) => {
        // Only webhooks may bring the new bookings over while the test runs: no reconciliation after the first.
        c.sync = { ...c.sync, reconcile_cron: "0 0 1 1 *" };
      },
    });
    const w = world;
    const now = Date.now();
    w.booking.seed({ therapists: w.therapists, count: 10, from: now + DAY, to: now + 10 * DAY });
    daemon = await daemonFor(w, {
      name: "flooded daemon",
      env: { NODE_OPTIONS: imageNodeOptions(), LOG_LEVEL: "info" },
    });
    await daemon.start();
    expect(await eventually(() => stateProblems(w), 30_000)).toEqual([]);
    const pid = daemon.child.pid!;
    const port = Number(new URL(daemon.url).port);
    const path = w.config.webhooks.path;
    const limit = ConfigSchema.shape.webhooks.parse({ signing_secrets: ["x"] }).max_body_bytes;
    expect(limit).toBe(w.config.webhooks.max_body_bytes); // the defaults, as an admin who set nothing gets them
    const before = memoryOf(pid, "VmRSS");

    let peakSampled = before;
    const sampler = setInterval(() => {
      peakSampled = Math.max(peakSampled, memoryOf(pid, "VmRSS"));
    }, 20);
    const fresh = () => Math.floor(Date.now() / 1000);
    const forgedHeader = () => `t=${fresh()},v1=${"0".repeat(64)}`;
    const body = Buffer.alloc(MB, 0x20);
    try {
      // --- 300 uploads of max_body_bytes - 1, plausible headers (so each is read), all but the last byte sent.
      const near = Array.from({ length: 300 }, () =>
        upload(port, path, {
          "content-type": "application/json",
          "content-length": limit - 1,
          "x-service-signature": forgedHeader(),
        }),
      );
      for (const u of near) u.socket.write(body.subarray(0, limit - 2));
      // --- 60 uploads of 1 MiB: no signature, a stale one, or a plausible one with or without a Content-Length.
      const big = Array.from({ length: 60 }, (_, i) => {
        const kind = i % 3;
        const headers: Record<string, string | number> =
          kind === 0
            ? { "content-length": MB }
            : kind === 1
              ? { "content-length": MB, "x-service-signature": `t=${fresh() - 3600},v1=${"0".repeat(64)}` }
              : { "transfer-encoding": "chunked", "x-service-signature": forgedHeader() };
        const u = upload(port, path, { "content-type": "application/json", ...headers });
        u.socket.write(
          kind === 2 ? Buffer.concat([Buffer.from("100000\r\n"), body, Buffer.from("\r\n0\r\n\r\n")]) : body,
        );
        return u;
      });
      await Promise.all(near.map((u) => flushed(u.socket)));
      await new Promise((r) => setTimeout(r, 500)); // the daemon takes in what was sent
      const holding = memoryOf(pid, "VmRSS");

      // --- genuine deliveries in the middle of it: new bookings, their signed appointment.created events.
      const agent = new Agent({ connections: 4 });
      const genuine: string[] = [];
      const statuses: number[] = [];
      try {
        for (let i = 0; i < 10; i++) {
          const start = new Date(now + (2 + i) * DAY);
          start.setUTCHours(14, 0, 0, 0);
          const appt = w.booking.create(
            { therapist_id: `th_${1 + (i % 2)}`, start_time: start.toISOString() },
            { force: true },
          );
          genuine.push(String(appt.id));
        }
        const events = w.booking.events.filter(
          (e) => e.type === "appointment.created" && genuine.includes((e.data as { object: { id: string } }).object.id),
        );
        expect(events).toHaveLength(10);
        await Promise.all(
          events.map(async (e) => {
            const payload = JSON.stringify(e);
            const res = await request(daemon!.webhookUrl, {
              method: "POST",
              headers: {
                "content-type": "application/json",
                "x-service-signature": sign(payload, WORLD_WEBHOOK_SECRET, fresh()),
              },
              body: payload,
              dispatcher: agent,
            });
            await res.body.dump();
            statuses.push(res.statusCode);
          }),
        );
      } finally {
        await agent.close();
      }
      expect(statuses).toEqual(Array(10).fill(200));

      // --- the near-limit uploads end: forged, so 401 each.
      for (const u of near) u.socket.end(body.subarray(0, 1));
      const nearStatuses = await Promise.all(near.map((u) => u.status));
      const bigStatuses = await Promise.all(big.map((u) => u.status));
      clearInterval(sampler);
      for (const u of [...near, ...big]) u.socket.destroy();
      const peak = memoryOf(pid, "VmHWM");
      console.log(
        `[flood] RSS ${before.toFixed(0)} MB before, ${holding.toFixed(0)} MB holding 300 uploads, ` +
          `${peakSampled.toFixed(0)} MB sampled peak, ${peak.toFixed(0)} MB VmHWM (limit ${RSS_LIMIT_MB} MB)`,
      );
      expect(peak).toBeLessThan(RSS_LIMIT_MB);
      const tally = (xs: (number | undefined)[]) => {
        const counts: Record<string, number> = {};
        for (const x of xs) counts[String(x)] = (counts[String(x)] ?? 0) + 1;
        return counts;
      };
      expect(tally(nearStatuses)).toEqual({ 401: 300 });
      // Refused unread: no signature 400, stale 401. A plausible header over max_body_bytes is read to its end without
      // being held (the peak above includes them), and refused as forged: 401.
      expect(tally(bigStatuses.filter((_, i) => i % 3 === 0))).toEqual({ 400: 20 });
      expect(tally(bigStatuses.filter((_, i) => i % 3 === 1))).toEqual({ 401: 20 });
      expect(tally(bigStatuses.filter((_, i) => i % 3 === 2))).toEqual({ 401: 20 });

      // The genuine deliveries were applied, and the daemon is still healthy and alive.
      expect(await eventually(() => stateProblems(w), 20_000)).toEqual([]);
      for (const id of genuine) expect(w.booking.get(id)?.status).toBe("confirmed");
      expect((await fetch(`${daemon.url}/healthz`)).status).toBe(200);
      expect(daemon.alive()).toBe(true);
      expect(daemon.unexpectedExits).toEqual([]);
      const metrics = await (await fetch(`${daemon.adminUrl}/metrics`)).text();
      expect(metrics).toMatch(/^calbridge_webhooks_total\{result="accepted"\} 10$/m);
      expect(metrics).toMatch(/^calbridge_webhooks_total\{result="rejected_signature"\} 340$/m);
      // The flood is a handful of log lines, not one per request.
      const refusedLines = daemon
        .lines()
        .filter((l) => l.includes('"component":"webhooks"') && l.includes('"level":40'));
      expect(refusedLines.length).toBeLessThan(10);
    } finally {
      clearInterval(sampler);
    }
  }, 120_000);
});

// Booking times without a designator on a server whose TZ is a local zone. The spec: "Timestamps are ISO 8601 strings
// in UTC", so `2026-11-23T10:00:00` is 10:00 UTC; Date.parse reads that form as the process's local time, which placed
// every appointment off by the zone's offset and judged a therapist's move, taken by the service, "not applied".
// The booking simulator is reached through a proxy on 127.0.0.1 that only drops the "Z" of start_time/end_time.
// This file's process runs in America/Los_Angeles (vitest runs each file in its own process: pool "forks").
process.env.TZ = "America/Los_Angeles";

import { createServer, type Server } from "node:http";
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { ManualClock } from "../../src/clock.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";

const HOUR = 3_600_000;
let cleanup: (() => Promise<void>) | undefined;
afterEach(async () => {
  await cleanup?.();
  cleanup = undefined;
});

/** A proxy to `target` that writes every start_time/end_time of its answers without the "Z". */
async function withoutDesignator(target: string): Promise<{ url: string; server: Server }> {
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const headers = Object.fromEntries(
      Object.entries(req.headers).filter(([k]) => !["host", "content-length", "connection"].includes(k)),
    ) as Record<string, string>;
    const up = await fetch(`${target}${req.url}`, {
      method: req.method ?? "GET",
      headers,
      ...(chunks.length ? { body: Buffer.concat(chunks) } : {}),
    });
    const text = (await up.text()).replace(/"(start_time|end_time)":"([0-9T:.-]+)Z"/g, '"$1":"$2"');
    const out: Record<string, string> = {};
    up.headers.forEach((v, k) => {
      if (!["content-length", "content-encoding", "transfer-encoding", "connection"].includes(k)) out[k] = v;
    });
    res.writeHead(up.status, out);
    res.end(text);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server };
}

async function setup(): Promise<{ world: World; app: App }> {
  const clock = new ManualClock(Date.parse("2026-11-20T12:00:00Z"));
  const world = await startWorld({
    therapists: 1,
    clock,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  const proxy = await withoutDesignator(world.config.booking.base_url);
  const config = { ...world.config, booking: { ...world.config.booking, base_url: proxy.url } };
  const app = await createApp(config, { clock, logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  cleanup = async () => {
    await app.stop(2000).catch(() => {});
    proxy.server.close();
    await world.close();
  };
  return { world, app };
}

const startOf = (event: Record<string, unknown> | undefined) =>
  new Date(Date.parse(String((event?.start as { dateTime?: string } | undefined)?.dateTime))).toISOString();

it("a booking time without a designator is placed at that UTC instant, and a therapist's move is taken as applied", async () => {
  expect(new Date(Date.parse("2026-11-23T00:00:00Z")).getTimezoneOffset()).toBe(480); // the process runs 8 h behind
  const { world, app } = await setup();
  const cal = world.calendarOf("th_1");
  const created = world.booking.create({ therapist_id: "th_1", start_time: "2026-11-23T10:00:00Z" }, { force: true });
  const id = String(created.id);
  const eventId = eventIdFor(id);

  await app.reconcile();
  await app.engine.idle();
  expect(startOf(world.google.event(cal, eventId))).toBe("2026-11-23T10:00:00.000Z");
  // Read back the same way: a second run sees nothing to change (no event moved by the offset and back).
  expect((await app.reconcile()).plan).toEqual([]);

  await app.poller.poll("th_1");
  await app.engine.idle();
  // The therapist drags the event one day later.
  world.google.userEdit(cal, eventId, {
    start: { dateTime: "2026-11-24T10:00:00Z" },
    end: { dateTime: new Date(Date.parse("2026-11-24T10:00:00Z") + HOUR).toISOString() },
  });
  await app.poller.poll("th_1");
  await app.engine.idle();
  const after = world.google.event(cal, eventId);
  expect({
    booking: new Date(Date.parse(String(world.booking.get(id)?.start_time))).toISOString(),
    event: startOf(after),
    notice: /not applied/.test(String(after?.description ?? "")),
  }).toEqual({ booking: "2026-11-24T10:00:00.000Z", event: "2026-11-24T10:00:00.000Z", notice: false });
  expect((await app.reconcile()).plan).toEqual([]);
});

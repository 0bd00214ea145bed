// A renewal Google refuses (a 5xx, a usageLimits 403, the address itself) leaves the calendar polled at the short
// interval (Google quota) once its channel expires. It was a warning per calendar per hour in the log and nothing
// else: /status said nothing of any calendar's channel, /metrics had no channel gauge nor renewal counter (push2
// audit). Over real HTTP: the daemon's admin listener, the emulator delivering to its public listener.
import { createServer, request as forward } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import type { StatusSnapshot, TherapistPushStatus } from "../../src/daemon/status-page.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { freePort } from "../support/ports.ts";
import { liveDaemon, until } from "./push-live.ts";

const WEEK = 7 * 86_400_000;
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

async function status(app: App): Promise<StatusSnapshot> {
  return (await (await request(`${app.admin!.url}/status`)).body.json()) as StatusSnapshot;
}
async function pushOf(app: App, therapistId: string): Promise<TherapistPushStatus | undefined> {
  return (await status(app)).therapists.find((t) => t.therapistId === therapistId)?.push;
}
/** The values of one metric on /metrics, by its label's value. */
async function metric(app: App, name: string, label: string): Promise<Record<string, number>> {
  const text = await (await request(`${app.admin!.url}/metrics`)).body.text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(new RegExp(`^${name}\\{${label}="([^"]*)"\\} (\\S+)$`, "gm")))
    out[m[1]!] = Number(m[2]);
  return out;
}
const literal = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
/** The watch calls of one calendar, as the emulator's faults match them ("METHOD /path"). */
const watchOf = (cal: string) => new RegExp(`/calendars/${literal(encodeURIComponent(cal))}/events/watch$`);

describe("push channels on /status and /metrics", () => {
  it("a renewal Google refuses shows in /status (error and when) and in the renewal counter, until one succeeds", async () => {
    const d = await liveDaemon(2);
    closers.push(d.close);
    const { world, app } = d;
    const opened = await pushOf(app, "th_1");
    expect(opened).toMatchObject({ state: "confirmed", lastRenewalError: null });
    expect(Date.parse(opened!.expiresAt!)).toBeGreaterThan(Date.now() + WEEK - 3_600_000);
    expect(await metric(app, "calbridge_push_renewals_total", "result")).toEqual({
      opened: 2,
      refused_address: 0,
      failed: 0,
    });

    // th_1's renewal meets Google's 500s (retries included); th_2's goes through.
    world.google.faults.next(50, {
      status: 500,
      reason: "backendError",
      match: watchOf(world.config.therapists[0]!.calendar_id),
    });
    const before = Date.now();
    await app.push.renew(Date.now() + WEEK); // both channels due
    world.google.faults.reset();
    await world.google.settleNotifications();
    const failed = await pushOf(app, "th_1");
    // The channel it was to replace goes on, confirmed, until it expires; the failure is there beside it.
    expect(failed).toMatchObject({
      state: "confirmed",
      expiresAt: opened!.expiresAt,
      lastRenewalError: { message: "Google answered backendError (HTTP 500)", result: "failed" },
    });
    const at = Date.parse(failed!.lastRenewalError!.at);
    expect(at).toBeGreaterThanOrEqual(before);
    expect(at).toBeLessThanOrEqual(Date.now());
    expect((await pushOf(app, "th_2"))?.lastRenewalError).toBeNull();
    expect(await metric(app, "calbridge_push_renewals_total", "result")).toEqual({
      opened: 3,
      refused_address: 0,
      failed: 1,
    });
    const html = await (await request(`${app.admin!.url}/status.html`)).body.text();
    expect(html).toContain("renewal failed: Google answered backendError (HTTP 500)");

    // The address refused (a domain not verified): said apart.
    world.google.unverifiedPushHosts.add("127.0.0.1");
    await app.push.renew(Date.now() + WEEK);
    expect((await pushOf(app, "th_2"))?.lastRenewalError).toMatchObject({
      message: "Google answered push.webhookUrlUnauthorized (HTTP 401)",
      result: "refused_address",
    });
    expect(await metric(app, "calbridge_push_renewals_total", "result")).toEqual({
      opened: 3,
      refused_address: 2,
      failed: 1,
    });

    // The next renewal that opens a channel clears it.
    world.google.unverifiedPushHosts.clear();
    await app.push.renew(Date.now() + WEEK);
    await world.google.settleNotifications();
    for (const t of ["th_1", "th_2"]) {
      const p = await pushOf(app, t);
      expect(p).toMatchObject({ state: "confirmed", lastRenewalError: null });
      expect(p!.expiresAt).not.toBe(opened!.expiresAt);
    }
    expect(await metric(app, "calbridge_push_renewals_total", "result")).toEqual({
      opened: 5,
      refused_address: 2,
      failed: 1,
    });
    expect(await (await request(`${app.admin!.url}/status.html`)).body.text()).not.toContain("renewal failed");
  }, 120_000);

  it("calbridge_push_channels counts mapped calendars by their channel's state, and /status names each", async () => {
    const world: World = await startWorld({ therapists: 3 });
    closers.push(() => world.close());
    const [, second, third] = world.config.therapists.map((t) => t.calendar_id);
    // In front of the daemon: Google's first message for th_2's channels is answered but never reaches it (a proxy
    // that swallowed it), so that channel stays unconfirmed; everything else is passed on.
    const port = await freePort();
    const front = createServer((req, res) => {
      const uri = String(req.headers["x-goog-resource-uri"] ?? "");
      if (req.headers["x-goog-resource-state"] === "sync" && uri.includes(encodeURIComponent(second!))) {
        req.resume();
        res.writeHead(200).end();
        return;
      }
      const fwd = forward(
        { host: "127.0.0.1", port, path: req.url, method: req.method, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      req.pipe(fwd);
    });
    await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
    closers.push(() => new Promise<void>((r) => front.close(() => r())));
    world.config.google.push = {
      public_url: `http://127.0.0.1:${(front.address() as AddressInfo).port}/webhooks/google`,
      ttl_seconds: 604_800,
    };
    world.google.requireHttpsChannels = false;
    // th_3's watch is refused (not retried: a 403), at the start and at every check until the fault is lifted.
    world.google.faults.next(1000, { status: 403, reason: "forbidden", match: watchOf(third!) });
    const app = await createApp(structuredClone(world.config), {
      logger: silentLogger,
      listen: `127.0.0.1:${port}`,
      adminListen: "127.0.0.1:0",
    });
    closers.push(() =>
      app.stop(3000).then(
        () => {},
        () => {},
      ),
    );
    await app.start();
    expect(await until(() => world.google.channels.size === 2)).toBe(true);
    await world.google.settleNotifications();
    expect(await until(() => app.push.knownChannels === 2)).toBe(true);
    // th_3's refusal comes after the others' channels (one calendar after another).
    for (let i = 0; i < 500 && !(await metric(app, "calbridge_push_renewals_total", "result")).failed; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(await metric(app, "calbridge_push_renewals_total", "result")).toEqual({
      opened: 2,
      refused_address: 0,
      failed: 1,
    });

    expect(await metric(app, "calbridge_push_channels", "state")).toEqual({
      confirmed: 1,
      unconfirmed: 1,
      suspect: 0,
      none: 1,
    });
    const s = await status(app);
    expect(s.therapists.map((t) => [t.therapistId, t.push?.state, t.push?.lastRenewalError?.result ?? null])).toEqual([
      ["th_1", "confirmed", null],
      ["th_2", "unconfirmed", null],
      ["th_3", "none", "failed"],
    ]);
    expect(s.therapists[2]!.push).toMatchObject({
      expiresAt: null,
      lastRenewalError: { message: "Google answered forbidden (HTTP 403)" },
    });
    // Nothing that would help forge a notification: no channel id, token or digest.
    const body = JSON.stringify(s);
    for (const ch of world.google.channels.values()) expect(body).not.toContain(ch.id);
    expect(body).not.toMatch(/token|hash/i);

    // A notification confirms th_2's channel and is shown; th_3's channel opens at the next check.
    world.google.faults.reset();
    await world.google.notify(second!);
    await world.google.settleNotifications();
    await app.push.renew();
    await world.google.settleNotifications();
    expect(await metric(app, "calbridge_push_channels", "state")).toEqual({
      confirmed: 3,
      unconfirmed: 0,
      suspect: 0,
      none: 0,
    });
    const th2 = await pushOf(app, "th_2");
    expect(th2?.state).toBe("confirmed");
    expect(th2?.lastNotificationAt).not.toBeNull();
    expect((await pushOf(app, "th_3"))?.lastRenewalError).toBeNull();
  }, 120_000);
});

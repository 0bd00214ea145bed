// Google push channels: opened per calendar when google.push is configured, a notification with the channel's
// token triggers an immediate incremental sync (and the write-back), a forged one does nothing. Each channel has a
// random token of its own, and the store keeps only its SHA-256.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, describe, expect, it, vi } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import type { Channel } from "../../src/daemon/push.ts";
import { tokenDigest } from "../../src/store/secrets.ts";
import { captureLog } from "../support/log-capture.ts";
import { DAY, type Harness, harness, iso } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

describe("push channels", () => {
  it("a notification triggers the incremental sync that pushes the therapist's move back", async () => {
    h = await harness({
      therapists: 2,
      configure: (c) => {
        c.google.push = { public_url: "https://sync.example/webhooks/google", token: "channel-token-0123456789" };
        c.sync = { writeback: { reschedule_grace_seconds: 0 } };
      },
    });
    await h.app.start();
    // The emulator delivers to this daemon over plain HTTP on loopback.
    h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
    h.world.google.requireHttpsChannels = false;
    await h.app.push.start();
    expect([...h.world.google.channels.values()].map((c) => c.calendarId).sort()).toEqual(
      h.world.therapists.map((t) => h!.world.calendarOf(t)).sort(),
    );

    const start = new Date(Date.now() + 3 * DAY);
    start.setUTCHours(10, 0, 0, 0);
    const a = h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
    await h.app.reconcile();
    for (const t of h.world.therapists) await h.app.poller.poll(t); // take the sync tokens
    const cal = h.world.calendarOf("th_1");
    const eventId = eventIdFor(String(a.id));
    h.world.google.userEdit(cal, eventId, {
      start: { dateTime: iso(start.getTime() + 3_600_000) },
      end: { dateTime: iso(start.getTime() + 7_200_000) },
    });
    await h.world.google.notify(cal);
    for (let i = 0; i < 50 && !h.world.booking.requests.some((r) => r.method === "PATCH"); i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    await h.app.engine.idle();
    expect(Date.parse(String(h.world.booking.get(String(a.id))!.start_time))).toBe(start.getTime() + 3_600_000);
  });

  it("a notification with a wrong token or an unknown channel is refused and triggers nothing", async () => {
    h = await harness({
      therapists: 1,
      configure: (c) => {
        c.google.push = { public_url: "https://sync.example/webhooks/google", token: "channel-token-0123456789" };
      },
    });
    await h.app.start();
    h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
    h.world.google.requireHttpsChannels = false;
    await h.app.push.start();
    const [channel] = [...h.world.google.channels.values()];
    const before = h.world.google.requestLog.length;
    for (const headers of [
      {
        "x-goog-channel-id": channel!.id,
        "x-goog-channel-token": "wrong-token-0000000",
        "x-goog-resource-state": "exists",
      },
      {
        "x-goog-channel-id": "unknown",
        "x-goog-channel-token": "channel-token-0123456789",
        "x-goog-resource-state": "exists",
      },
    ]) {
      const res = await request(`${h.app.http!.url}/webhooks/google`, { method: "POST", headers });
      await res.body.dump();
      expect(res.statusCode).toBe(404);
    }
    await new Promise((r) => setTimeout(r, 100));
    expect(h.world.google.requestLog.length).toBe(before);
  });

  it("refuses a body unread and headers over Google's limits, and logs a flood of forged notifications in one line", async () => {
    const log = captureLog("debug");
    h = await harness({
      therapists: 1,
      logger: log.logger,
      configure: (c) => {
        c.google.push = { public_url: "https://sync.example/webhooks/google", token: "channel-token-0123456789" };
      },
    });
    await h.app.start();
    h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
    h.world.google.requireHttpsChannels = false;
    await h.app.push.start();
    const [channel] = [...h.world.google.channels.values()];
    const url = `${h.app.http!.url}/webhooks/google`;
    const headers = {
      "x-goog-channel-id": channel!.id,
      "x-goog-channel-token": "channel-token-0123456789",
      "x-goog-resource-state": "exists",
    };
    const before = h.world.google.requestLog.length;
    // Google's notifications have no body: one with a body is refused before it is read, and the connection closed.
    const withBody = await request(url, { method: "POST", headers, body: "x".repeat(100_000) });
    await withBody.body.dump();
    expect(withBody.statusCode).toBe(413);
    expect(withBody.headers.connection).toBe("close");
    // Google's channel ids are at most 64 characters and tokens at most 256: longer ones are refused unlooked-up.
    for (const extra of [
      { "x-goog-channel-id": "c".repeat(65) },
      { "x-goog-channel-token": "t".repeat(257) },
      { "x-goog-channel-id": "" },
    ]) {
      const res = await request(url, { method: "POST", headers: { ...headers, ...extra } });
      await res.body.dump();
      expect(res.statusCode).toBe(400);
    }
    for (let i = 0; i < 30; i++) {
      const res = await request(url, { method: "POST", headers: { ...headers, "x-goog-channel-id": `forged-${i}` } });
      await res.body.dump();
      expect(res.statusCode).toBe(404);
    }
    await new Promise((r) => setTimeout(r, 100));
    expect(h.world.google.requestLog.length).toBe(before); // nothing was synced
    const warned = log.lines.filter((l) => l.component === "push" && l.level === 40);
    expect(warned.map((l) => l.reason)).toEqual(["body", "bad_headers", "unknown_channel"]);
    const metrics = await h.app.registry.metrics();
    expect(metrics).toContain('calbridge_push_notifications_total{result="unknown_channel"} 30');
    expect(metrics).toContain('calbridge_push_notifications_total{result="bad_headers"} 3');
    // The real channel still works.
    const ok = await request(url, { method: "POST", headers: { ...headers, "x-goog-resource-state": "sync" } });
    await ok.body.dump();
    expect(ok.statusCode).toBe(200);
  });

  it("Google's first message, and a change, arriving before the watch call's answer: both acknowledged, the channel confirmed and stored so, and the change polled", async () => {
    h = await harness({
      therapists: 1,
      configure: (c) => {
        c.google.push = { public_url: "https://sync.example/webhooks/google", token: "channel-token-0123456789" };
      },
    });
    await h.app.start();
    h.world.google.requireHttpsChannels = false;
    // Google's address for the channel: passes each notification on to the daemon, and behind the sync message sends
    // a change, both before the emulator answers the watch call (it waits for the sync message's answer).
    const daemon = `${h.app.http!.url}/webhooks/google`;
    const answered: string[] = [];
    const relay = createServer((req, res) => {
      req.resume();
      const pass = async (state: string) => {
        const out = await request(daemon, {
          method: "POST",
          headers: {
            "x-goog-channel-id": String(req.headers["x-goog-channel-id"]),
            "x-goog-channel-token": String(req.headers["x-goog-channel-token"]),
            "x-goog-resource-state": state,
          },
        });
        await out.body.dump();
        answered.push(`${state} ${out.statusCode}`);
        return out.statusCode;
      };
      void (async () => {
        const status = await pass(String(req.headers["x-goog-resource-state"]));
        if (req.headers["x-goog-resource-state"] === "sync") await pass("exists");
        res.writeHead(status).end();
      })();
    });
    await new Promise<void>((r) => relay.listen(0, "127.0.0.1", r));
    try {
      h.world.config.google.push!.public_url = `http://127.0.0.1:${(relay.address() as AddressInfo).port}/`;
      expect(h.app.poller.lastPollAt("th_1")).toBeUndefined();
      await h.app.push.start();
      h.app.push.stop();
      expect(answered).toEqual(["sync 200", "exists 200"]);
      expect(h.world.google.deliveries.map((d) => [d.state, d.status])).toEqual([["sync", 200]]);
      // The change that came while the channel was opening is polled once the channel is stored.
      await vi.waitFor(() => expect(h!.app.poller.lastPollAt("th_1")).toBeDefined(), { timeout: 5_000 });
      // The confirmation is stored after the channel, not overwritten by it: a restart trusts the channel.
      const channel = [...h.world.google.channels.values()][0]!;
      const channels = h.app.store.table<Channel>("channels");
      await vi.waitFor(async () => {
        expect(await channels.get("th_1")).toMatchObject({ channelId: channel.id, confirmed: true });
        expect(await channels.get(`channel-id:${channel.id}`)).toMatchObject({ confirmed: true });
      });
      expect(h.app.poller.intervalFor("th_1")).toBeGreaterThan(h.world.config.sync.calendar_poll_seconds * 1000);
    } finally {
      relay.close();
    }
  });

  it("renews a channel before it expires: the new one opens first, then the old one is stopped", async () => {
    h = await harness({
      therapists: 1,
      configure: (c) => {
        c.google.push = {
          public_url: "https://sync.example/webhooks/google",
          token: "channel-token-0123456789",
          ttl_seconds: 3600,
        };
      },
    });
    await h.app.start();
    h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
    h.world.google.requireHttpsChannels = false;
    await h.app.push.start();
    const [first] = [...h.world.google.channels.values()];
    await h.app.push.renew(Date.now() + 50 * 60_000); // 10 minutes before expiry: renew
    const after = [...h.world.google.channels.values()];
    expect(after).toHaveLength(1);
    expect(after[0]!.id).not.toBe(first!.id);
    await h.app.push.renew(Date.now()); // fresh enough: nothing happens
    expect([...h.world.google.channels.values()][0]!.id).toBe(after[0]!.id);
  });

  it("gives each channel a random token of its own and stores only its SHA-256; a forged token is refused", async () => {
    h = await harness({
      therapists: 2,
      configure: (c) => {
        c.google.push = { public_url: "https://sync.example/webhooks/google" };
      },
    });
    await h.app.start();
    h.world.config.google.push!.public_url = `${h.app.http!.url}/webhooks/google`;
    h.world.google.requireHttpsChannels = false;
    await h.app.push.start();
    const opened = [...h.world.google.channels.values()] as unknown as {
      id: string;
      token: string;
      calendarId: string;
    }[];
    expect(opened).toHaveLength(2);
    const [one, two] = opened as [(typeof opened)[0], (typeof opened)[0]];
    expect(one.token).not.toBe(two.token);
    expect(one.token.length).toBeGreaterThanOrEqual(43);

    const stored: Channel[] = [];
    for await (const [key, ch] of h.app.store.table<Channel>("channels").entries()) {
      if (!key.startsWith("channel-id:")) stored.push(ch);
    }
    expect(stored.map((c) => c.tokenHash).sort()).toEqual([tokenDigest(one.token), tokenDigest(two.token)].sort());
    expect(stored.every((c) => c.token === undefined)).toBe(true);
    expect(JSON.stringify(stored)).not.toContain(one.token);
    expect(await h.app.store.table("meta").get("push_token")).toBeUndefined();

    expect((await h.world.google.notify(one.calendarId)).map((d) => d.status)).toEqual([200]);
    const forged = await request(`${h.app.http!.url}/webhooks/google`, {
      method: "POST",
      headers: { "x-goog-channel-id": one.id, "x-goog-channel-token": two.token, "x-goog-resource-state": "exists" },
    });
    await forged.body.dump();
    expect(forged.statusCode).toBe(404);
  });

  it("rewrites an earlier build's channel, token in clear, as a digest at start; the token still verifies", async () => {
    h = await harness({
      therapists: 1,
      configure: (c) => {
        c.google.push = { public_url: "https://sync.example/webhooks/google" };
      },
    });
    await h.app.start();
    const legacyToken = "legacy-channel-token-0123456789";
    const channels = h.app.store.table<Channel>("channels");
    await channels.set("th_1", {
      therapistId: "th_1",
      channelId: "legacy-channel",
      resourceId: "res-1",
      token: legacyToken,
      expiration: Date.now() + 6 * DAY, // far from renewal: kept as it is
    });
    await h.app.store.table("meta").set("push_token", legacyToken);
    await h.app.push.start();
    expect(await channels.get("th_1")).toEqual({
      therapistId: "th_1",
      channelId: "legacy-channel",
      resourceId: "res-1",
      tokenHash: tokenDigest(legacyToken),
      expiration: expect.any(Number),
    });
    expect(await h.app.store.table("meta").get("push_token")).toBeUndefined();
    const send = async (token: string) => {
      const res = await request(`${h!.app.http!.url}/webhooks/google`, {
        method: "POST",
        headers: {
          "x-goog-channel-id": "legacy-channel",
          "x-goog-channel-token": token,
          "x-goog-resource-state": "sync",
        },
      });
      await res.body.dump();
      return res.statusCode;
    };
    expect(await send(legacyToken)).toBe(200);
    expect(await send("legacy-channel-token-0123456780")).toBe(404);
  });
});

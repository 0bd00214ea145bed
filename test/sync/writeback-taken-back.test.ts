// A calendar change taken back while its write-back was on its way, past the grace period: the therapist presses Undo
// or restores the deleted event from the Bin, or drags the moved event back, while calbridge looks for the event in the
// other calendars (seconds), reads the appointment a last time, or waits to send the write again (a 503's backoff, a
// 429's pause). Nothing the therapist no longer asks for is taken by the booking service: the event is read right
// before each send of the cancel or the PATCH (CallOptions.beforeSend), and a change taken back is decided again.
import { afterEach, describe, expect, it } from "vitest";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import { WORLD_WEBHOOK_SECRET } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";
import { daemonHarness, type Harness, harness, liveOf, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const HOUR = 3_600_000;
const CANCEL = "POST /v1/appointments/:id/cancel";
const PATCH = "PATCH /v1/appointments/:id";
/** Requests the booking service took (answered 2xx), by route. */
const taken = (x: Harness, route: string) =>
  x.world.booking.requests.filter((r) => r.route === route && (r.status ?? 0) >= 200 && (r.status ?? 0) < 300).length;
const sent = (x: Harness, route: string) => x.world.booking.requests.filter((r) => r.route === route).length;
// A drag in the UI keeps the event's time zone.
const at = (ms: number) => ({
  start: { dateTime: new Date(ms).toISOString(), timeZone: "Europe/Berlin" },
  end: { dateTime: new Date(ms + HOUR).toISOString(), timeZone: "Europe/Berlin" },
});
const startOf = (ev: Record<string, unknown> | undefined) =>
  Date.parse(String((ev?.start as { dateTime?: string } | undefined)?.dateTime));

async function world(guard: Record<string, unknown> = {}): Promise<Harness> {
  return daemonHarness({
    therapists: 1,
    configure: (c) => {
      c.sync = {
        ...c.sync,
        writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
        ...guard,
      } as typeof c.sync;
    },
    engine: { maxAttempts: 1, baseMs: 10 },
  });
}

/** The next write to `route` is answered `status` (the service did not apply it); `act` runs as it arrives. */
function failWrite(x: Harness, route: RegExp, method: string, status: 503 | 429, act: () => void): void {
  let done = false;
  const when = () => {
    if (!done) act();
    done = true;
    return true;
  };
  if (status === 503) x.world.booking.faults.failNext(1, 503, { method, path: route, when });
  else
    x.world.booking.faults.refuseNext(1, "rate_limited", {
      status: 429,
      retryAfter: 1,
      match: { method, path: route, when },
    });
}

describe("a deletion taken back while its cancellation is on its way", () => {
  it.each([
    ["Undo", "userUndoDelete"],
    ["a restore from the Bin", "userRestoreFromBin"],
  ] as const)(
    "%s while the other calendars are looked at: no cancellation sent, the appointment stays booked",
    async (_, how) => {
      h = await world();
      const m = await mirrored(h);
      const x = h;
      let undone = false;
      // The write-back's look at the account's own calendars (calendarList.list) is held while the therapist acts.
      x.world.google.faults.holdNext(/^GET .*\/users\/me\/calendarList/, async () => {
        x.world.google[how](m.cal, m.eventId);
        undone = true;
      });
      x.world.google.userDelete(m.cal, m.eventId);
      await settle(x);
      expect(undone).toBe(true);
      expect(sent(x, CANCEL)).toBe(0);
      expect(x.world.booking.get(m.id)?.status).toBe("confirmed");
      expect(x.world.google.event(m.cal, m.eventId)?.status).toBe("confirmed");
      // Quiet afterwards: nothing is sent later for the deletion that was taken back.
      await x.app.reconcile();
      await settle(x);
      expect(sent(x, CANCEL)).toBe(0);
      expect(x.world.booking.get(m.id)?.status).toBe("confirmed");
    },
  );

  it.each([
    [503, "userUndoDelete"],
    [429, "userUndoDelete"],
    [503, "userRestoreFromBin"],
  ] as const)(
    "the first cancel answered %s, then %s before it is sent again: not sent again, the event stays",
    async (status, how) => {
      h = await world();
      const m = await mirrored(h);
      const x = h;
      failWrite(x, /\/cancel$/, "POST", status, () => x.world.google[how](m.cal, m.eventId));
      x.world.google.userDelete(m.cal, m.eventId);
      await settle(x);
      expect(sent(x, CANCEL)).toBe(1); // the one answered with the failure
      expect(taken(x, CANCEL)).toBe(0);
      expect(x.world.booking.get(m.id)?.status).toBe("confirmed");
      expect(x.world.google.event(m.cal, m.eventId)?.status).toBe("confirmed");
    },
  );

  it("writeback held --apply: an Undo while the cancel waits out a 429 is not followed by the cancel, and --apply says so", async () => {
    h = await world({ writeback_guard: { floor: 0, max_ratio: 0 } }); // every write-back held
    const m = await mirrored(h);
    const x = h;
    x.world.google.userDelete(m.cal, m.eventId);
    await settle(x);
    expect((await x.app.sync.guard.held("th_1")).map((w) => w.appointmentId)).toEqual([m.id]);
    failWrite(x, /\/cancel$/, "POST", 429, () => x.world.google.userUndoDelete(m.cal, m.eventId));
    const r = await writebackHeld(x.app, { decision: "apply" });
    expect(r.decided).toEqual([
      { appointmentId: m.id, ok: false, did: expect.stringMatching(/^not sent: there is nothing to send now/) },
    ]);
    expect(taken(x, CANCEL)).toBe(0);
    expect(x.world.booking.get(m.id)?.status).toBe("confirmed");
    expect(x.world.google.event(m.cal, m.eventId)?.status).toBe("confirmed");
    expect(await x.app.sync.guard.held("th_1")).toEqual([]);
  });
});

describe("a move dragged back while its reschedule is on its way", () => {
  it.each(["last look", 503, 429] as const)("dragged back at the %s: the booking keeps its time", async (moment) => {
    h = await world();
    const m = await mirrored(h);
    const x = h;
    const path = `/v1/appointments/${m.id}`;
    let back = false;
    const dragBack = () => {
      x.world.google.userEdit(m.cal, m.eventId, at(m.start));
      back = true;
    };
    if (moment === "last look") {
      // The sync's read of the appointment is the first GET after the move, the last look the second.
      const gets = () => x.world.booking.requests.filter((r) => r.method === "GET" && r.path === path).length;
      const base = gets();
      x.world.booking.faults.raceNext({ method: "GET", path, when: () => gets() === base + 2 }, dragBack);
    } else failWrite(x, /^\/v1\/appointments\/[^/]+$/, "PATCH", moment, dragBack);
    x.world.google.userEdit(m.cal, m.eventId, at(m.start + 2 * HOUR));
    await settle(x);
    expect(back).toBe(true);
    expect(taken(x, PATCH)).toBe(0);
    expect(sent(x, PATCH)).toBe(moment === "last look" ? 0 : 1);
    expect(Date.parse(String(x.world.booking.get(m.id)?.start_time))).toBe(m.start);
    expect(startOf(x.world.google.event(m.cal, m.eventId))).toBe(m.start);
    // Quiet afterwards.
    await x.app.reconcile();
    await settle(x);
    expect(taken(x, PATCH)).toBe(0);
  });
});

describe("the last look at the event", () => {
  /** The therapist deletes or moves the event; `atLastLook` runs when the booking's last look (second GET) arrives. */
  function change(
    x: Harness,
    m: Awaited<ReturnType<typeof mirrored>>,
    kind: "cancel" | "reschedule",
    atLastLook: () => void,
  ) {
    const path = `/v1/appointments/${m.id}`;
    const gets = () => x.world.booking.requests.filter((r) => r.method === "GET" && r.path === path).length;
    const base = gets();
    x.world.booking.faults.raceNext({ method: "GET", path, when: () => gets() === base + 2 }, atLastLook);
    if (kind === "cancel") x.world.google.userDelete(m.cal, m.eventId);
    else x.world.google.userEdit(m.cal, m.eventId, at(m.start + 2 * HOUR));
  }

  it.each(["cancel", "reschedule"] as const)(
    "%s: a replica that loses the lease while it reads the event sends nothing",
    async (kind) => {
      let lead = true;
      h = await harness({
        therapists: 1,
        configure: (c) => {
          c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } } as typeof c.sync;
        },
        engine: { maxAttempts: 1, baseMs: 10 },
        app: { leading: () => lead } as never,
      });
      await h.app.start();
      h.world.booking.addWebhookEndpoint({
        url: `${h.app.http!.url}${h.world.config.webhooks.path}`,
        secret: WORLD_WEBHOOK_SECRET,
        events: ["*"],
      });
      const m = await mirrored(h);
      const x = h;
      let lost = false;
      change(x, m, kind, () => {
        // The next read of the linked event is the last look's: the lease is lost while it is out.
        x.world.google.faults.holdNext(new RegExp(`^GET .*/events/${m.eventId}`), async () => {
          lead = false;
          lost = true;
        });
      });
      await settle(x).catch(() => {}); // calendar writes after the loss are refused too (LeadershipLostError)
      expect(lost).toBe(true);
      expect(sent(x, CANCEL) + sent(x, PATCH)).toBe(0);
      expect(x.world.booking.get(m.id)?.status).toBe("confirmed");
      expect(Date.parse(String(x.world.booking.get(m.id)?.start_time))).toBe(m.start);
    },
  );

  it.each(["cancel", "reschedule"] as const)(
    "%s: a read of the event that fails waits (nothing put back with a 'not applied' note), then is sent",
    async (kind) => {
      const log = captureLog("info");
      h = await daemonHarness({
        therapists: 1,
        logger: log.logger,
        configure: (c) => {
          c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } } as typeof c.sync;
        },
        engine: { maxAttempts: 1, baseMs: 10 },
      });
      const m = await mirrored(h);
      const x = h;
      // Google fails the last look's read with an error the call does not retry (a 5xx outlasting the call's six
      // tries, half a minute of backoff, takes the same way).
      change(x, m, kind, () =>
        x.world.google.faults.next(1, {
          status: 400,
          reason: "badRequest",
          match: new RegExp(`^GET .*/events/${m.eventId}`),
        }),
      );
      await settle(x);
      expect(log.lines.find((l) => l.msg === "calendar not available; the sync waits")).toBeDefined();
      expect(
        log.lines.find((l) => l.msg === "write-back not applied; event restored from the booking"),
      ).toBeUndefined();
      // Once Google answers, the change that still stands is written back, once.
      await x.app.engine.idle();
      for (let i = 0; i < 50 && taken(x, kind === "cancel" ? CANCEL : PATCH) === 0; i++) {
        await new Promise((r) => setTimeout(r, 100));
        await x.app.engine.idle();
      }
      expect(taken(x, kind === "cancel" ? CANCEL : PATCH)).toBe(1);
      const live = liveOf(x, m.cal, m.id);
      if (kind === "cancel") {
        expect(x.world.booking.get(m.id)?.status).toBe("cancelled");
        expect(live).toEqual([]);
      } else {
        expect(Date.parse(String(x.world.booking.get(m.id)?.start_time))).toBe(m.start + 2 * HOUR);
        expect(startOf(live[0])).toBe(m.start + 2 * HOUR);
      }
      expect(live.map((e) => String(e.description ?? ""))).not.toContainEqual(expect.stringContaining("not applied"));
    },
  );
});

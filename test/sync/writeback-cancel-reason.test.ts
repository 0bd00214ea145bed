// Who cancelled the appointment, as the history tells it: calbridge's cancellation is "ok", someone else's "already".
// It is told by the cancellation reason the booking service keeps, which need not be calbridge's byte for byte: a
// service may trim it (a YAML block scalar ends in "\n") or collapse its whitespace.
import { afterEach, expect, it } from "vitest";
import { BookingApiError } from "../../src/booking/errors.ts";
import { BookingStore } from "../../src/simulator/booking/store.ts";
import type { HistoryEntry } from "../../src/sync/history-entry.ts";
import { daemonHarness, type Harness, mirrored, settle } from "./support.ts";

let h: Harness | undefined;
const original = BookingStore.prototype.cancel;
afterEach(async () => {
  BookingStore.prototype.cancel = original;
  await h?.close();
  h = undefined;
});

const CANCEL = /^\/v1\/appointments\/[^/]+\/cancel$/;

async function world(reason: string, maxAttempts = 3): Promise<Harness> {
  return daemonHarness({
    therapists: 1,
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0, reason } };
    },
    engine: { maxAttempts, baseMs: 10 },
  });
}

async function lastWriteback(x: Harness, id: string): Promise<HistoryEntry | undefined> {
  await x.app.sync.history.log.flush();
  return (await x.app.sync.history.log.read(id)).entries.filter((e) => e.kind === "writeback").at(-1);
}

/** The booking service keeps cancellation reasons trimmed, their whitespace collapsed. */
function normalisingService(): void {
  BookingStore.prototype.cancel = function (this: BookingStore, id: string, body: unknown = {}) {
    const b = (body ?? {}) as Record<string, unknown>;
    const reason = typeof b.reason === "string" ? b.reason.trim().replace(/\s+/g, " ") : b.reason;
    return original.call(this, id, { ...b, reason });
  };
}

it("calbridge's cancellation, answered with its reason trimmed, is calbridge's ('ok')", async () => {
  normalisingService();
  h = await world("Cancelled  by the\ntherapist\n");
  const m = await mirrored(h);
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(h.world.booking.get(m.id)?.status).toBe("cancelled");
  expect(h.world.booking.get(m.id)?.cancellation_reason).toBe("Cancelled by the therapist");
  expect(h.world.booking.requests.filter((r) => r.method === "POST" && CANCEL.test(r.path))).toHaveLength(1);
  expect(await lastWriteback(h, m.id)).toMatchObject({ writeback: "cancel", result: "ok" });
});

it("calbridge's cancellation applied on the last attempt, its answer lost, is calbridge's ('ok')", async () => {
  h = await world("Cancelled by the therapist", 1);
  const m = await mirrored(h);
  // The cancel is applied, and the client gives up on it without an answer it could check (the answer lost, the looks
  // after it failed too): read again after the last attempt, the booking is cancelled with calbridge's reason.
  const client = h.app.booking;
  const cancel = client.cancelAppointment.bind(client);
  client.cancelAppointment = async (...args) => {
    await cancel(...args);
    throw new BookingApiError({ code: "server_error", message: "answer lost", status: 503, method: "POST" });
  };
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(h.world.booking.get(m.id)?.status).toBe("cancelled");
  expect(h.world.booking.get(m.id)?.cancellation_reason).toBe("Cancelled by the therapist");
  expect(await lastWriteback(h, m.id)).toMatchObject({ writeback: "cancel", result: "ok" });
});

it("a cancellation with another reason, found after calbridge's last attempt failed, is someone else's ('already')", async () => {
  h = await world("Cancelled by the therapist", 1);
  const m = await mirrored(h);
  h.world.booking.faults.failNext(1, 503, { method: "POST", path: CANCEL });
  h.world.booking.faults.raceNext({ method: "POST", path: CANCEL }, () =>
    h!.world.booking.cancel(m.id, "customer cancelled online"),
  );
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(h.world.booking.get(m.id)?.cancellation_reason).toBe("customer cancelled online");
  expect(await lastWriteback(h, m.id)).toMatchObject({ writeback: "cancel", result: "already" });
});

it("with no reason configured, calbridge's cancellation stored with the service's own default reason is calbridge's", async () => {
  // The spec leaves the reason optional and says nothing of a default: a service may fill one in.
  BookingStore.prototype.cancel = function (this: BookingStore, id: string, body: unknown = {}) {
    const b = (body ?? {}) as Record<string, unknown>;
    return original.call(this, id, { ...b, reason: b.reason ? b.reason : "Cancelled via the API" });
  };
  h = await world("");
  const m = await mirrored(h);
  h.world.google.userDelete(m.cal, m.eventId);
  await settle(h);
  expect(h.world.booking.get(m.id)?.cancellation_reason).toBe("Cancelled via the API");
  expect(await lastWriteback(h, m.id)).toMatchObject({ writeback: "cancel", result: "ok" });
});

// What a history entry says, as pure functions: who caused a request (and of two merged requests, the one that says
// most), the other side's answer as its code and never its message, and nothing at all for a step with nothing to do.
import { describe, expect, it } from "vitest";
import { BookingApiError } from "../../src/booking/errors.ts";
import { CalendarError } from "../../src/calendar/errors.ts";
import { actionEntry, answerOf, originOf } from "../../src/sync/history-entry.ts";
import { CalendarUnavailableError } from "../../src/sync/mapping.ts";
import type { Link, SyncRequest } from "../../src/sync/types.ts";
import { mergeRequest } from "../../src/sync/work.ts";

const req = (over: Partial<SyncRequest>): SyncRequest => ({ reason: "x", priority: "reconcile", ...over });
const base = { at: "2026-11-22T08:00:00.000Z", origin: "booking", trigger: "appointment.updated" } as const;

describe("origins", () => {
  it("an override is an administrator's; otherwise the request's own, else what its priority serves", () => {
    expect(originOf(req({ origin: "calendar", override: "restore" }))).toBe("admin");
    expect(originOf(req({ origin: "calendar" }))).toBe("calendar");
    expect(originOf(req({ priority: "webhook" }))).toBe("booking");
    expect(originOf(req({ priority: "writeback" }))).toBe("calendar");
    expect(originOf(req({}))).toBe("reconcile");
  });

  it("two merged requests keep the origin that says most, whichever came first", () => {
    const merged = (a: SyncRequest, b: SyncRequest) => mergeRequest(a, b).origin;
    const calendar = req({ origin: "calendar", priority: "writeback" });
    const reconcile = req({ origin: "reconcile" });
    const booking = req({ origin: "booking", priority: "webhook" });
    expect(merged(calendar, reconcile)).toBe("calendar");
    expect(merged(reconcile, calendar)).toBe("calendar");
    expect(merged(calendar, booking)).toBe("booking");
    expect(merged(reconcile, req({ origin: "admin" }))).toBe("admin");
    expect(merged(reconcile, req({}))).toBe("reconcile");
  });
});

describe("answers", () => {
  it("keep the code and status, never the message", () => {
    const refused = new BookingApiError({
      code: "slot_unavailable",
      message: "Zoe Secretpatient already has an appointment then",
      status: 409,
    });
    expect(answerOf(refused)).toEqual({ side: "booking", code: "slot_unavailable", httpStatus: 409 });
    const google = new CalendarError("Zoe's event: no <b>", { kind: "invalid", status: 403, reason: "forbidden" });
    expect(answerOf(google)).toMatchObject({ side: "google", code: "forbidden", httpStatus: 403 });
    expect(answerOf(new CalendarUnavailableError("th_1", "revoked"))).toEqual({
      side: "calbridge",
      code: "calendar_unavailable",
    });
    expect(answerOf(new TypeError("secret detail"))).toEqual({ side: "calbridge", code: "TypeError" });
    expect(JSON.stringify(answerOf(refused))).not.toContain("Zoe");
  });
});

describe("entries", () => {
  const link = { booking: { id: "apt_1", status: "confirmed" } } as Link;

  it("nothing to do is not recorded, unless the booking's status changed", () => {
    const none = { kind: "none", appointmentId: "apt_1", reason: "unchanged" } as const;
    expect(actionEntry(base, none, {}, { link, appt: { id: "apt_1", status: "confirmed" } })).toBeUndefined();
    expect(
      actionEntry(base, none, {}, { link: undefined, appt: { id: "apt_1", status: "cancelled" } }),
    ).toBeUndefined();
    expect(actionEntry(base, none, {}, { link, appt: { id: "apt_1", status: "cancelled" } })).toEqual({
      ...base,
      kind: "booking_changed",
      reason: "unchanged",
      status: "cancelled",
    });
  });

  it("a write-back records what was sent and the answer; a reassignment where the event went", () => {
    const cancel = {
      kind: "writeback_cancel",
      appointmentId: "apt_1",
      therapistId: "th_1",
      reason: "deleted",
    } as const;
    const refused = new BookingApiError({ code: "past_booking", message: "past", status: 422 });
    expect(
      actionEntry(
        base,
        cancel,
        { writeback: { kind: "reassign", result: "refused", error: refused, therapistId: "th_2" } },
        { link, appt: { id: "apt_1", status: "confirmed" } },
      ),
    ).toEqual({
      ...base,
      kind: "writeback",
      // The event was moved, not deleted: told as a move, whatever the action's reason.
      reason: "event moved to th_2's calendar",
      therapistId: "th_1",
      toTherapistId: "th_2",
      writeback: "reassign",
      result: "refused",
      side: "booking",
      code: "past_booking",
      httpStatus: 422,
      status: "confirmed",
    });
  });
});

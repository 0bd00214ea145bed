// Tests parseEventBody: what a verified body must be to enter the inbox, what it may leave out, and that it is kept
// as sent (unknown fields included); the route's tests cover what happens to a body refused here.
import { describe, expect, it } from "vitest";
import { parseEventBody } from "../../src/webhooks/event.ts";

const parse = (value: unknown) => parseEventBody(Buffer.from(JSON.stringify(value)));

describe("parseEventBody", () => {
  it("keeps the event as sent, unknown fields at every level included", () => {
    const sent = {
      id: "evt_1",
      type: "appointment.updated",
      created_at: "2026-11-23T09:00:00Z",
      livemode: false,
      data: {
        object: { id: "apt_1", status: "confirmed", customer: { id: "cus_1", tags: ["a"] } },
        previous_attributes: { start_time: "2026-11-23T08:00:00Z" },
        extra: 1,
      },
    };
    expect(parse(sent)).toEqual({ ok: true, event: sent });
  });

  it("takes an event without data (a customer or payment event) with an empty object", () => {
    expect(parse({ id: "evt_2", type: "payment.succeeded" })).toEqual({
      ok: true,
      event: { id: "evt_2", type: "payment.succeeded", data: { object: {} } },
    });
    expect(parse({ id: "evt_3", type: "customer.updated", data: {} })).toEqual({
      ok: true,
      event: { id: "evt_3", type: "customer.updated", data: { object: {} } },
    });
  });

  it("refuses a data.object that is not an object, saying where", () => {
    for (const object of [[], "apt_1", 7, null, true]) {
      const parsed = parse({ id: "evt_4", type: "customer.updated", data: { object } });
      expect(parsed).toEqual({
        ok: false,
        reason: "not a webhook event: data.object: Invalid input: expected an object",
      });
    }
    expect(parse({ id: "evt_6", type: "customer.updated", data: [] })).toMatchObject({ ok: false });
  });

  it("drops a hint-only field (created_at, data.previous_attributes) that is null or of another shape, keeping the event", () => {
    // A refused event is set aside and acknowledged: the change it announces would be lost until a reconciliation.
    for (const odd of [null, 7, true, "confirmed", ["start_time"]]) {
      const parsed = parse({
        id: "evt_5",
        type: "appointment.updated",
        created_at: typeof odd === "string" ? { at: odd } : odd,
        data: { object: { id: "apt_5" }, previous_attributes: odd },
      });
      expect(parsed.ok).toBe(true);
      if (!parsed.ok) continue;
      expect(parsed.event.created_at).toBeUndefined();
      expect(parsed.event.data.previous_attributes).toBeUndefined();
      expect(parsed.event.data.object).toEqual({ id: "apt_5" });
    }
    // A usable hint is still kept as sent.
    expect(
      parse({
        id: "evt_5b",
        type: "appointment.cancelled",
        created_at: "2026-11-23T09:00:00Z",
        data: { object: { id: "apt_5" }, previous_attributes: { status: "confirmed" } },
      }),
    ).toMatchObject({
      ok: true,
      event: { created_at: "2026-11-23T09:00:00Z", data: { previous_attributes: { status: "confirmed" } } },
    });
  });

  it("refuses an appointment event without the appointment's id, and ids that are empty or too long", () => {
    expect(parse({ id: "evt_7", type: "appointment.created", data: { object: { status: "confirmed" } } })).toEqual({
      ok: false,
      reason: "appointment.created without data.object.id",
    });
    expect(parse({ id: "", type: "appointment.created" })).toMatchObject({ ok: false });
    expect(parse({ id: "x".repeat(201), type: "appointment.created" })).toMatchObject({ ok: false });
    expect(parse({ id: "evt_8", type: 5 })).toMatchObject({ ok: false });
  });
});

// Appointment ids that would change the request path ("", ".", "..", a slash) are refused by the client before
// anything is sent, with a permanent error of that one appointment; ordinary ids with odd characters still work.
import { afterEach, describe, expect, it } from "vitest";
import { BookingApiError } from "../../src/booking/errors.ts";
import { isPermanent } from "../../src/sync/errors.ts";
import { type Pair, startPair } from "./support.ts";

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

describe("appointment ids in request paths", () => {
  it("WHATWG URL resolution collapses dot segments, encoded ones too: encoding is no defence", () => {
    const base = new URL("https://api.booking.example/");
    expect(new URL(`v1/appointments/${encodeURIComponent("..")}`, base).pathname).toBe("/v1/");
    expect(new URL("v1/appointments/%2e%2e", base).pathname).toBe("/v1/");
    expect(new URL("v1/appointments/.%2E/cancel", base).pathname).toBe("/v1/cancel");
  });

  it.each(["", ".", "..", "a/b", "../services", "a\\b"])(
    "refuses %j before sending, as a permanent error",
    async (id) => {
      pair = await startPair();
      const before = pair.sim.requests.length;
      for (const call of [
        () => pair!.client.getAppointment(id),
        () => pair!.client.patchAppointment(id, { start_time: "2026-11-23T10:00:00Z" }),
        () => pair!.client.cancelAppointment(id, { reason: "x" }),
      ]) {
        const err = await call().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(BookingApiError);
        expect(err).toMatchObject({ code: "invalid_appointment_id", kind: "invalid_request", retryable: false });
        expect((err as Error).message).toContain("cannot be used in a request path");
        // The engine dead-letters the appointment instead of retrying it.
        expect(isPermanent(err)).toBe(true);
      }
      expect(pair.sim.requests.length).toBe(before);
    },
  );

  it("still sends ids with other unusual characters, encoded, to their own path", async () => {
    pair = await startPair();
    for (const id of ["...", "a b?c#d", "%2e%2e", "apt_ü"]) {
      const err = await pair.client.getAppointment(id).then(
        () => undefined,
        (e: unknown) => e,
      );
      // Unknown to the simulator: its own 404 envelope, for that id's path.
      expect(err, id).toMatchObject({ kind: "not_found" });
      const last = pair.sim.requests.filter((r) => r.route !== "GET /v1/services").at(-1)!;
      expect(last.path, id).toBe(`/v1/appointments/${encodeURIComponent(id)}`);
    }
  });
});

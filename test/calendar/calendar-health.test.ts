// Tests CalendarHealth.forgetStanding, which a replica calls when it starts leading: the standing it kept from an
// earlier term goes back to unknown (calls are sent, the notifications keep what was told), and a refusal known then
// is doubted, not forgotten: evidence that could not disprove it (a new token, a read) leaves the credentials unknown.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { CalendarHealth } from "../../src/calendar/calendar-health.ts";
import { CalendarError } from "../../src/calendar/errors.ts";
import { gatewayMetrics } from "../../src/calendar/metrics.ts";
import { ManualClock } from "../../src/clock.ts";
import { silentLogger } from "../../src/log.ts";

function health() {
  return new CalendarHealth({
    therapistId: "th_1",
    calendarId: "th_1@clinic.test",
    clock: new ManualClock(),
    logger: silentLogger,
    metrics: gatewayMetrics(new Registry()),
    quotaPauseMs: 3_600_000,
    credentialProbeMs: 600_000,
  });
}

const refusal = (reason: string, status = 403) =>
  new CalendarError(`events.insert: ${status} ${reason}`, { kind: "auth", status, reason });

describe("CalendarHealth.forgetStanding", () => {
  it("a broken credential, a quota pause and a missing calendar go back to unknown, and calls are sent at once", () => {
    const h = health();
    h.markBroken(refusal("invalid_grant", 400));
    h.pause(new CalendarError("quota", { kind: "quota", status: 403, reason: "quotaExceeded" }));
    h.calendarMissing(new CalendarError("404", { kind: "calendar_not_found", status: 404 }));
    expect(() => h.admit("events.list")).toThrow(/paused/);

    h.forgetStanding();
    expect(h.snapshot()).toEqual({ credentials: "unknown", lastError: "404" });
    expect(h.admit("events.list")).toMatchObject({ probe: false });
    // A new token disproves invalid_grant.
    h.credentialsWork("token");
    expect(h.snapshot().credentials).toBe("ok");
  });

  it("a refused write still refused: reads that work leave the credentials unknown; the write tells", () => {
    const h = health();
    h.markBroken(refusal("requiredAccessLevel"));
    h.forgetStanding();
    h.succeeded(h.admit("events.list"));
    h.credentialsWork("token");
    expect(h.snapshot().credentials).toBe("unknown"); // not "ok": told "work again", then "stopped working"
    const write = h.admit("events.insert", false, true); // sent, not failed fast
    h.markBroken(refusal("requiredAccessLevel"));
    expect(h.snapshot()).toMatchObject({ credentials: "broken", reason: "requiredAccessLevel" });
    expect(write.probe).toBe(false);
  });

  it("a refused write fixed meanwhile: the first write that succeeds shows it", () => {
    const h = health();
    h.markBroken(refusal("insufficientPermissions"));
    h.forgetStanding();
    h.succeeded(h.admit("events.insert", false, true));
    expect(h.snapshot().credentials).toBe("ok");
    h.forgetStanding(); // working credentials are doubted no more
    h.succeeded(h.admit("events.list"));
    expect(h.snapshot().credentials).toBe("ok");
  });

  it("an API refusal still there: a new token leaves the credentials unknown", () => {
    const h = health();
    h.markBroken(refusal("accessNotConfigured"));
    h.forgetStanding();
    h.credentialsWork("token");
    expect(h.snapshot().credentials).toBe("unknown");
  });
});

// Tests the per-therapist write-back count on /status (therapists[].counts.writebacks, the status page's
// "Write-backs" column): changes the booking service took from the therapist's calendar. It was counted before each
// attempt, so a cancellation that went through on its third try counted 3, and a move the booking service refused
// (the event put back) counted 1, while writebacks_total{result} told them apart.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, daemonHarness, type Harness, pollAll, quiet, settle } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function oneMirrored(x: Harness) {
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const a = x.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true });
  await settle(x);
  return String(a.id);
}

const writebacksOf = async (x: Harness, t: string) =>
  (await x.app.status()).therapists.find((s) => s.therapistId === t)!.counts.writebacks;

describe("per-therapist write-back count on /status", () => {
  it("one cancellation whose first tries fail (booking 503s) counts once", async () => {
    const x = await daemonHarness({
      therapists: 2,
      engine: { baseMs: 20, maxDelayMs: 100 },
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
      },
    });
    h = x;
    const id = await oneMirrored(x);
    expect(await writebacksOf(x, "th_1")).toBe(0);
    // The cancel is refused with 503 once more than the booking client retries on its own (4): the engine retries it.
    x.world.booking.faults.failNext(5, 503, { method: "POST", path: /\/cancel$/ });
    x.world.google.userDelete(x.world.calendarOf("th_1"), eventIdFor(id));
    for (let i = 0; i < 40 && x.world.booking.get(id)!.status !== "cancelled"; i++) {
      await pollAll(x);
      await new Promise((r) => setTimeout(r, 150));
      await x.app.engine.drained();
    }
    await quiet(x);
    expect(x.world.booking.get(id)!.status).toBe("cancelled");
    const metrics = await x.app.registry.metrics();
    expect(metrics).toMatch(/calbridge_writebacks_total\{kind="cancel",result="retry"\} [1-9]/);
    expect(await writebacksOf(x, "th_1")).toBe(1);
  }, 60_000);

  it("a move the booking service refuses (slot_unavailable) is not counted as a write-back made", async () => {
    const x = await daemonHarness({
      therapists: 2,
      configure: (c) => {
        c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
      },
    });
    h = x;
    const id = await oneMirrored(x);
    const cal = x.world.calendarOf("th_1");
    const ev = x.world.google.event(cal, eventIdFor(id))!;
    const shift = (t: unknown) => ({
      dateTime: new Date(Date.parse(String((t as { dateTime: string }).dateTime)) + 2 * 3_600_000).toISOString(),
    });
    x.world.booking.faults.refuseNext(1, "slot_unavailable", { match: { method: "PATCH" } });
    x.world.google.userEdit(cal, String(ev.id), { start: shift(ev.start), end: shift(ev.end) });
    await pollAll(x);
    await settle(x);
    expect(await x.app.registry.metrics()).toContain(
      'calbridge_writebacks_total{kind="reschedule",result="refused"} 1',
    );
    expect(await writebacksOf(x, "th_1")).toBe(0);
  }, 60_000);
});

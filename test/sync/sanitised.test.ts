// Customer text reaches the calendar inert and within Google's limits, through the real engine and the emulator:
// notes with a live link, control characters and 20,000 characters become an escaped description cut with an
// ellipsis (the emulator refuses descriptions over Google's limit, as Google does), and the event read back compares
// equal to what was written, so later passes write nothing.
import { afterEach, describe, expect, it } from "vitest";
import { DESCRIPTION_MAX_BYTES, SUMMARY_MAX_BYTES } from "../../src/calendar/render.ts";
import { DAY, type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const CONTROL = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/;

describe("sanitised rendering through the emulator", () => {
  it("writes escaped, cleaned, cut text, and leaves it alone afterwards", async () => {
    h = await harness({ therapists: 1 });
    const start = new Date(Date.now() + 2 * DAY);
    start.setUTCHours(9, 0, 0, 0);
    const notes = `<a href="https://evil.example/login">Reset your password</a>\u0007\u001b[2J ${"Back pain, left side. ".repeat(910)}`;
    expect(notes.length).toBeGreaterThan(20_000);
    const booked = h.world.booking.create({
      therapist_id: "th_1",
      start_time: start.toISOString(),
      customer: { name: `Max <i>Muster</i>\u0000 ${"M".repeat(400)}`, email: "max@example.com" },
      notes,
    });
    // As a webhook would have it: the engine reads the whole appointment (notes included) and writes its event.
    const outcome = await h.app.engine.syncAppointment(String(booked.id), { reason: "test", priority: "webhook" });
    expect(outcome).toMatchObject({ ok: true, action: { kind: "create" } });
    const [event, ...rest] = h.live("th_1") as { summary: string; description: string }[];
    expect(rest).toEqual([]);
    expect(event!.description).toContain(
      "&lt;a href=&quot;https://evil.example/login&quot;&gt;Reset your password&lt;/a&gt;",
    );
    expect(event!.description).not.toContain("<a");
    expect(event!.description).not.toMatch(CONTROL);
    expect(event!.description.endsWith("…")).toBe(true);
    expect(Buffer.byteLength(event!.description)).toBeLessThanOrEqual(DESCRIPTION_MAX_BYTES);
    expect(event!.summary).not.toMatch(CONTROL);
    expect(event!.summary.endsWith("…")).toBe(true);
    expect(Buffer.byteLength(event!.summary)).toBeLessThanOrEqual(SUMMARY_MAX_BYTES);

    // Read back (reconciliation, then the calendar's incremental sync), it is what was written: no further writes.
    const writes = h.writes();
    const second = await h.app.reconcile();
    expect(second.failed).toBe(0);
    await h.app.poller.poll("th_1");
    await h.app.poller.poll("th_1");
    await h.app.engine.idle();
    expect(h.writes()).toBe(writes);
    expect(h.world.booking.requests.filter((r) => r.method !== "GET")).toEqual([]);
  });
});

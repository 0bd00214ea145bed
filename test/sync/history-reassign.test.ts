// A therapist moves the event to a colleague's calendar ("Change calendar"): calbridge reassigns the appointment. The
// history (CLI and /history page) gave as the reason "event deleted in the calendar", and told the write-back waiting
// out its grace period as "the cancellation": in a "who cancelled this?" dispute the lines read as a cancellation,
// though the event was moved, never deleted, and nothing was cancelled.
import { afterEach, expect, it } from "vitest";
import { historyCommand } from "../../src/cli/history.ts";
import { type Harness, mirrored, settle, twoWay } from "./support.ts";

let x: Harness | undefined;
afterEach(async () => {
  await x?.close();
});

it("a reassignment from the calendar is not told as a deletion", async () => {
  x = await twoWay({ reassign: true });
  const m = await mirrored(x);
  x.world.google.userMove(m.cal, m.eventId, x.world.calendarOf("th_2"));
  await settle(x);
  expect(x.world.booking.get(m.id)!.therapist_id).toBe("th_2");
  await x.app.sync.history.log.flush();
  const r = await historyCommand(x.world.config, m.id, false);
  const line = r.output.split("\n").find((l) => l.includes("reassigned to th_2"));
  expect(line, r.output).toBeDefined();
  expect(line).toContain("(event moved to th_2's calendar)");
});

it("a reassignment waiting out its grace period is not told as a cancellation", async () => {
  x = await twoWay({ reassign: true, cancel_grace_seconds: 1 });
  const m = await mirrored(x);
  x.world.google.userMove(m.cal, m.eventId, x.world.calendarOf("th_2"));
  await settle(x);
  await new Promise((r) => setTimeout(r, 1500));
  await settle(x);
  expect(x.world.booking.get(m.id)!.therapist_id).toBe("th_2");
  expect(x.world.booking.get(m.id)!.status).toBe("confirmed");
  await x.app.sync.history.log.flush();
  const r = await historyCommand(x.world.config, m.id, false);

  expect(r.output).toContain("reassigned to th_2 in the booking service (event moved to th_2's calendar)");
  expect(r.output).toMatch(
    /the deletion's write-back \(a cancellation, unless the event turns up in another calendar\) waits out/,
  );
  expect(r.output).not.toMatch(/cancelled|the cancellation/);
});

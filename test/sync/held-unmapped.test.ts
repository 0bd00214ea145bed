// Tests the held write-backs of a therapist removed from the mapping: they stay until a person decides. A booking
// webhook (a note edited by the front desk) or a reconciliation of one of the appointments ended its sync with
// "therapist th_1 is not mapped", and that dropped its hold: gone from `writeback held`, the deletion neither sent nor
// put back, the appointment confirmed with its event deleted. So did a --restore the daemon ran itself, which said "the
// hold stays". Now only an action that settles the calendar change ends a hold; once th_1 is mapped again, --restore
// puts every event back.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { writebackHeld } from "../../src/cli/writeback-held.ts";
import { ManualClock } from "../../src/clock.ts";
import { cancels, daemonHarness, type Harness, mirroredMany, pass, pollAll, quiet } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it("holds of a therapist removed from the mapping stay until a person decides, and are decided once mapped again", async () => {
  const clock = new ManualClock(Date.now());
  const x = await daemonHarness({ therapists: 2, clock });
  h = x;
  const original = structuredClone(x.world.config);
  const ids = await mirroredMany(x, clock, 10);
  const cal = x.world.calendarOf("th_1");
  for (const id of ids) x.world.google.userDelete(cal, eventIdFor(id));
  await pollAll(x);
  await pass(x, clock, 90_000);
  const heldIds = async () => (await x.app.sync.guard.held("th_1")).map((w) => w.appointmentId).sort();
  expect(await heldIds()).toEqual([...ids].sort());

  const unmapped = structuredClone(original);
  unmapped.therapists = unmapped.therapists.filter((t) => t.therapist_id !== "th_1");
  await x.app.reload(unmapped);
  await quiet(x);
  // The front desk edits a note of one appointment (webhook), and the reconciliation runs.
  x.world.booking.setNotes(ids[0]!, "bring the referral letter");
  await quiet(x);
  await x.app.reconcile();
  await quiet(x);
  expect(await heldIds()).toEqual([...ids].sort());
  // A restore the daemon runs itself can put no event back while th_1 is not mapped: it says so and keeps the hold.
  const refused = await writebackHeld(x.app, { therapistId: "th_1", appointmentId: ids[1]!, decision: "restore" });
  expect(refused.decided).toMatchObject([{ ok: false, did: expect.stringContaining("the hold stays") }]);
  expect(await heldIds()).toEqual([...ids].sort());
  expect(cancels(x)).toBe(0);

  await x.app.reload(original);
  await quiet(x);
  const restored = await writebackHeld(x.app, { therapistId: "th_1", decision: "restore" });
  expect(restored.decided.map((d) => d.ok)).toEqual(ids.map(() => true));
  await quiet(x);
  expect(await x.app.sync.guard.held()).toEqual([]);
  expect(x.world.google.events(cal).filter((e) => e.status !== "cancelled")).toHaveLength(10);
  expect(cancels(x)).toBe(0);
  for (const id of ids) expect(x.world.booking.get(id)?.status).toBe("confirmed");
});

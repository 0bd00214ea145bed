// `calbridge writeback held --apply` for a held deletion whose appointment the customer rescheduled since: nothing is
// sent (the booking changed: sync.conflict booking_wins decides), the hold is released, and the answer says there was
// nothing to send and why, not that "the calendar no longer asks for it" (the calendar still shows the deletion).
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
let world: World | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

it("a held deletion whose appointment was rescheduled since is not sent, and the answer says why", async () => {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  world = w;
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 20, from: now + DAY, to: now + 20 * DAY });
  const file = writeConfig(w);
  expect((await runCli("reconcile", "--config", file)).code).toBe(0);
  const anna = w.booking.all().filter((a) => a.status === "confirmed" && a.therapist_id === "th_anna");
  for (const a of anna.slice(0, 6)) w.google.userDelete(w.calendarOf("th_anna"), eventIdFor(String(a.id)));
  await runCli("reconcile", "--force", "--config", file); // a burst: the guard holds what is over its limit
  const listed = await runCli("writeback", "held", "--json", "--config", file);
  const held = (JSON.parse(listed.stdout) as { held: { appointmentId: string }[] }).held.map((h) => h.appointmentId);
  expect(held.length).toBeGreaterThan(0);
  const id = held[0]!;
  const cancels = () => w.booking.requests.filter((r) => r.route.endsWith("/cancel")).length;
  const before = cancels();
  w.booking.move(id, Date.parse(String(w.booking.get(id)!.start_time)) + 26 * 3_600_000, { force: true });

  const run = await runCli("writeback", "held", "--apply", "--appointment", id, "--config", file);
  expect(run.code).toBe(1);
  expect(run.stdout).toMatch(new RegExp(`FAIL ${id}: not sent: there is nothing to send now \\(`));
  expect(run.stdout).not.toContain("the calendar no longer asks for it");
  expect(cancels()).toBe(before);
  expect(w.booking.get(id)!.status).toBe("confirmed");
  const still = await runCli("writeback", "held", "--appointment", id, "--config", file);
  expect(still.stdout).toContain(`nothing held for appointment ${id}`);
}, 60_000);

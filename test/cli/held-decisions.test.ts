// Tests what an administrator reads while the write-back guard holds a therapist's deletions:
// - `reconcile` listed the held cancellations as `writeback_cancel ... POST cancel`, like the ones sent, and a dry run
//   afterwards said "calendars and bookings agree" with the events gone and the appointments confirmed;
// - `writeback held --apply --appointment <typo>` answered "no write-backs are held" with exit 0;
// - `--restore` of a therapist removed from the mapping said "ok" for each hold, put no event back and released the
//   holds, so nothing was left to decide.
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds.splice(0)) await w.close();
});

/** th_anna deleted 6 of her events; a forced reconcile sent some cancellations and the guard held the rest. */
async function heldWorld() {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  worlds.push(w);
  const now = Date.now();
  w.booking.seed({ therapists: w.therapists, count: 20, from: now + DAY, to: now + 20 * DAY });
  const file = writeConfig(w);
  expect((await runCli("reconcile", "--config", file)).code).toBe(0);
  const anna = w.booking.all().filter((a) => a.status === "confirmed" && a.therapist_id === "th_anna");
  for (const a of anna.slice(0, 6)) w.google.userDelete(w.calendarOf("th_anna"), eventIdFor(String(a.id)));
  const cancels = () => w.booking.requests.filter((r) => r.route.endsWith("/cancel")).length;
  const before = cancels();
  const run = await runCli("reconcile", "--force", "--config", file);
  const listed = await runCli("writeback", "held", "--json", "--config", file);
  const held = (JSON.parse(listed.stdout) as { held: { appointmentId: string }[] }).held.map((h) => h.appointmentId);
  expect(held.length).toBeGreaterThan(0);
  expect(cancels() - before + held.length).toBe(6);
  return { w, file, run, held };
}

it("reconcile reports held cancellations as held, not sent, and a dry run does not call the sides in agreement", async () => {
  const { file, run, held } = await heldWorld();
  expect(run.code, run.stderr).toBe(0);
  for (const id of held) expect(run.stdout).not.toMatch(new RegExp(`writeback_cancel +${id} `));
  expect(run.stdout).toContain(`HELD: ${held.length} calendar change(s) held by the write-back guard`);
  const dry = await runCli("reconcile", "--dry-run", "--config", file);
  expect(dry.stdout).not.toContain("calendars and bookings agree");
  expect(dry.stdout).toContain("nothing planned besides the calendar changes held");
  expect(dry.stdout).toContain(`HELD: ${held.length} calendar change(s)`);
});

it("an --appointment nothing holds is named, and a decision about it is refused (exit 2), not answered 'none held'", async () => {
  const { file, held } = await heldWorld();
  const typo = await runCli("writeback", "held", "--apply", "--appointment", "apt_typo", "--config", file);
  expect(typo.code).toBe(2);
  expect(typo.stderr).toContain("--appointment apt_typo: nothing held for it; nothing done");
  const listed = await runCli("writeback", "held", "--appointment", "apt_typo", "--config", file);
  expect(listed.stdout.trim()).toBe("nothing held for appointment apt_typo");
  const still = await runCli("writeback", "held", "--json", "--config", file);
  expect((JSON.parse(still.stdout) as { held: unknown[] }).held).toHaveLength(held.length);
});

it("--restore that can put no event back (the therapist left the mapping) fails and keeps the holds", async () => {
  const { w, held } = await heldWorld();
  const unmapped = writeConfig(
    w,
    (c) => {
      c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_anna");
    },
    "unmapped.yaml",
  );
  const restore = await runCli("writeback", "held", "--restore", "--therapist", "th_anna", "--config", unmapped);
  expect(restore.code).toBe(1);
  expect(restore.stdout).not.toMatch(/^ok /m);
  expect(restore.stdout).toMatch(/^FAIL \S+: not restored, the hold stays: /m);
  const after = await runCli("writeback", "held", "--json", "--therapist", "th_anna", "--config", unmapped);
  expect((JSON.parse(after.stdout) as { held: unknown[] }).held).toHaveLength(held.length);
});

it("a held deletion whose appointment was rescheduled since is not sent, and --apply says why, not 'the calendar no longer asks'", async () => {
  // The calendar still shows the deletion: it was the booking that changed (sync.conflict booking_wins decides).
  const { w, file, held } = await heldWorld();
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
});

// `calbridge purge` through main(argv) against the simulators (#15): for a therapist no longer mapped it finds the
// calendar from the links and acts as its address through the service account; the dry run lists calbridge's events
// (past and future) and changes nothing; the real run is held by the mass-deletion guard unless --force, then deletes
// exactly calbridge's events (never the therapist's own, never a copy carrying calbridge's mark), forgets their links,
// and never calls the booking service. It also offboards a therapist still mapped, with the mapping's credentials.
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { openStore } from "../../src/store/store.ts";
import type { Link } from "../../src/sync/types.ts";
import { runCli, writeConfig } from "./support.ts";

const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();

const worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds.splice(0)) await w.close();
});

/** Anna and Ben with four appointments each (one 20 days ago), mirrored by the daemon, which is then stopped. */
async function mirroredWorld(): Promise<{ world: World; ids: Record<string, string[]> }> {
  const world = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.sync = { ...c.sync, window: { past_days: 30, future_days: 90 } };
    },
  });
  worlds.push(world);
  const ids: Record<string, string[]> = {};
  for (const t of ["th_anna", "th_ben"]) {
    ids[t] = [-20, 1, 2, 3].map((d) =>
      String(world.booking.create({ therapist_id: t, start_time: iso(Date.now() + d * DAY) }, { force: true }).id),
    );
  }
  const app = await createApp(world.config, { logger: silentLogger, oneShot: true, listen: "127.0.0.1:0" });
  await app.reconcile();
  await app.stop(2000);
  return { world, ids };
}

const live = (world: World, t: string) =>
  world.google
    .events(world.calendarOf(t))
    .filter((e) => e.status !== "cancelled")
    .map((e) => String(e.id))
    .sort();

async function linksOf(world: World, therapistId: string): Promise<Link[]> {
  const store = await openStore(world.config.store.url);
  const out: Link[] = [];
  for await (const [, l] of store.table<Link>("links").entries()) if (l.therapistId === therapistId) out.push(l);
  await store.close();
  return out;
}

describe("calbridge purge", () => {
  it("removes only calbridge's events of a therapist no longer mapped: dry run, guard, then for real", async () => {
    const { world, ids } = await mirroredWorld();
    const benCal = world.calendarOf("th_ben");
    // Ben's own appointment, and a copy of a calbridge event (its mark, another id): neither is calbridge's.
    const own = world.google.userInsert(benCal, {
      summary: "dentist",
      start: { dateTime: iso(Date.now() + DAY) },
      end: { dateTime: iso(Date.now() + DAY + 3_600_000) },
    });
    const copy = world.google.userInsert(benCal, {
      summary: "copy",
      start: { dateTime: iso(Date.now() + 2 * DAY) },
      end: { dateTime: iso(Date.now() + 2 * DAY + 3_600_000) },
      extendedProperties: { private: { calbridge_appointment_id: ids.th_ben![1]!, calbridge_managed: "1" } },
    });
    const file = writeConfig(world, (c) => {
      c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
    });
    const calbridgeEvents = ids.th_ben!.map((id) => eventIdFor(id)).sort();
    const bookingRequests = world.booking.requests.length;

    const dry = await runCli("purge", "--therapist", "th_ben", "--dry-run", "--config", file);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain(`calbridge purge th_ben: calendar ${benCal}, as ${benCal}`);
    expect(dry.stdout).toContain("4 calbridge events to delete (past and future), 4 links to forget");
    for (const id of calbridgeEvents) expect(dry.stdout).toContain(id);
    expect(dry.stdout).toContain(
      `left alone: ${String(copy.id)}: carries calbridge's mark, but calbridge did not make it`,
    );
    expect(dry.stdout).not.toContain(String(own.id));
    // 4 of calbridge's 8 events is more than max_delete_ratio (0.2) allows: the real run will need --force.
    expect(dry.stdout).toContain("mass-deletion guard: 4 events are more than sync.max_delete_ratio");
    expect(live(world, "th_ben")).toEqual([...calbridgeEvents, String(own.id), String(copy.id)].sort());

    const held = await runCli("purge", "--therapist", "th_ben", "--config", file);
    expect(held.code).toBe(1);
    expect(held.stdout).toContain("nothing was deleted. If this is intended, run it again with --force.");
    expect(live(world, "th_ben")).toHaveLength(6);

    const done = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file);
    expect(done.code, done.stdout + done.stderr).toBe(0);
    expect(done.stdout).toContain("deleted 4 events (0 were gone already), forgot 4 links");
    expect(live(world, "th_ben")).toEqual([String(own.id), String(copy.id)].sort());
    expect(await linksOf(world, "th_ben")).toEqual([]);
    // Anna's events and links are untouched; the booking service was never asked anything.
    expect(live(world, "th_anna")).toHaveLength(4);
    expect(await linksOf(world, "th_anna")).toHaveLength(4);
    expect(world.booking.requests.length).toBe(bookingRequests);

    // Nothing left to report or purge.
    const doctor = await runCli("doctor", "--json", "--config", file);
    const checks = (JSON.parse(doctor.stdout) as { checks: { name: string; status: string }[] }).checks;
    expect(checks.find((c) => c.name.startsWith("mapping"))).toEqual(expect.objectContaining({ status: "ok" }));
    const again = await runCli("purge", "--therapist", "th_ben", "--config", file);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain("no links name a calendar of theirs; give --calendar");
  });

  it("offboards a therapist who is still mapped, with the mapping's credentials, and says what follows", async () => {
    const { world } = await mirroredWorld();
    const file = writeConfig(world);
    const r = await runCli("purge", "--therapist", "th_anna", "--force", "--config", file);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain("deleted 4 events");
    expect(r.stdout).toContain("th_anna is still in therapists::");
    expect(live(world, "th_anna")).toEqual([]);
    expect(live(world, "th_ben")).toHaveLength(4);
  });

  it("a therapist whose calendar is no address needs --impersonate", async () => {
    const { world } = await mirroredWorld();
    const file = writeConfig(world, (c) => {
      c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
    });
    const r = await runCli(
      "purge",
      "--therapist",
      "th_ben",
      "--calendar",
      "abc@group.calendar.google.com",
      "--config",
      file,
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("give --impersonate <address>");
    const ok = await runCli(
      "purge",
      "--therapist",
      "th_ben",
      "--impersonate",
      world.calendarOf("th_ben"),
      "--force",
      "--config",
      file,
    );
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(live(world, "th_ben")).toEqual([]);
  });

  it("deletes calbridge's event whose marks another client's full update stripped, not one naming another appointment", async () => {
    const { world, ids } = await mirroredWorld();
    const benCal = world.calendarOf("th_ben");
    const [, stripped, renamed] = ids.th_ben!;
    // What a PUT without calbridge's private properties leaves (kewisch/gdata-provider #747): the listing by the
    // mark misses the event, but it is under the id calbridge gave the appointment's event, and its link names it.
    world.google.userEdit(benCal, eventIdFor(stripped!), {
      extendedProperties: {
        private: { calbridge_appointment_id: null, calbridge_managed: null, "X-MOZ-LASTACK": "20260101T000000Z" },
      },
    });
    // Under calbridge's id, but naming another appointment: not this one's, so left alone.
    world.google.userEdit(benCal, eventIdFor(renamed!), {
      extendedProperties: { private: { calbridge_appointment_id: "apt_other" } },
    });
    const file = writeConfig(world, (c) => {
      c.therapists = c.therapists.filter((t) => t.therapist_id !== "th_ben");
    });
    const dry = await runCli("purge", "--therapist", "th_ben", "--dry-run", "--config", file);
    expect(dry.stdout).toContain("3 calbridge events to delete (past and future), 4 links to forget");
    expect(dry.stdout).toContain(eventIdFor(stripped!));
    const done = await runCli("purge", "--therapist", "th_ben", "--force", "--config", file);
    expect(done.code, done.stdout + done.stderr).toBe(0);
    expect(done.stdout).toContain("deleted 3 events (0 were gone already)");
    expect(live(world, "th_ben")).toEqual([eventIdFor(renamed!)]);
  });
});

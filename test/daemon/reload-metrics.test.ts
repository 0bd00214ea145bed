// Per-therapist series on /metrics across a reload (SIGHUP): a therapist the reload removes leaves no series behind
// (a critical CalbridgeCredentialsBroken or a CalbridgeCalendarPaused would otherwise fire until a restart), also when
// their old gateway is still used afterwards (a request in flight, the leader stopping its push channel); a therapist
// re-pointed to another account starts without the old account's series, as at start-up; held write-backs of a
// removed therapist stay visible while they are held. The harness's app is oneShot, so the reload runs as on a replica
// that does not lead: each replica retires the series of its own registry.
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import type { Config } from "../../src/config/schema.ts";
import type { HeldWriteback } from "../../src/sync/writeback-guard.ts";
import { type Harness, harness } from "../sync/support.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function setup(): Promise<{ h: Harness; clock: ManualClock }> {
  const clock = new ManualClock(Date.now());
  const h = await harness({ therapists: ["th_1", "th_2", "th_3"], app: { clock } });
  cleanups.push(() => h.close());
  await h.app.start();
  expect((await h.app.reconcile()).ok).toBe(true);
  return { h, clock };
}

/** The /metrics lines (the registry the admin listener serves) that name the therapist; no status snapshot needed. */
async function seriesOf(h: Harness, therapist: string): Promise<string[]> {
  const text = await h.app.registry.metrics();
  return text.split("\n").filter((l) => !l.startsWith("#") && l.includes(`therapist="${therapist}"`));
}

async function waitFor(what: string, predicate: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function without(config: Config, ...ids: string[]): Config {
  const next = structuredClone(config) as Config;
  next.therapists = next.therapists.filter((t) => !ids.includes(t.therapist_id));
  return next;
}

describe("per-therapist metrics across a reload", () => {
  it("a removed therapist's credentials, pause and held-count series leave /metrics, and the old gateway sets none again", async () => {
    const { h, clock } = await setup();
    // Ben's account was closed (his token revoked); Cleo's calendar ran out of quota.
    h.world.google.revokeTokens("th_2@clinic.test");
    await h.app.poller.poll("th_2").catch(() => {});
    h.world.google.faults.next(1, { status: 403, reason: "quotaExceeded", match: /th_3/ });
    await h.app.poller.poll("th_3").catch(() => {});
    const ben = await seriesOf(h, "th_2");
    expect(ben).toContain('calbridge_google_credentials_ok{therapist="th_2"} 0');
    expect(ben).toContain('calbridge_therapist_credentials_ok{therapist="th_2"} 0');
    expect(ben.some((l) => l.startsWith("calbridge_google_credentials_broken{") && l.endsWith(" 1"))).toBe(true);
    expect(ben).toContain('calbridge_writebacks_held{therapist="th_2"} 0');
    expect(await seriesOf(h, "th_3")).toContain('calbridge_google_paused{therapist="th_3"} 1');
    const oldBen = h.app.calendars.get("th_2")!;
    const oldCleo = h.app.calendars.get("th_3")!;

    const changes = await h.app.reload(without(h.world.config, "th_2", "th_3"));
    expect(changes.removed.sort()).toEqual(["th_2", "th_3"]);

    const gauges =
      /^calbridge_(google_credentials_ok|google_credentials_broken|google_paused|therapist_credentials_ok)\{/;
    expect((await seriesOf(h, "th_2")).filter((l) => gauges.test(l))).toEqual([]);
    expect((await seriesOf(h, "th_3")).filter((l) => gauges.test(l))).toEqual([]);
    // Nothing held for them: the held count goes too (the reload recounts at once).
    await waitFor("the held gauge of the removed therapists to go", async () =>
      [...(await seriesOf(h, "th_2")), ...(await seriesOf(h, "th_3"))].every(
        (l) => !l.startsWith("calbridge_writebacks_held"),
      ),
    );

    // The old gateways are still used after the swap (the leader stops their push channels with them, a request may
    // be in flight): a failed credentials probe and a success after the pause set no series again.
    await clock.advance(2 * 3_600_000);
    await oldBen.get("no_such_event").catch(() => {});
    await oldCleo.get("no_such_event");
    expect(oldBen.health().credentials).toBe("broken");
    expect(oldCleo.health().quotaPause).toBeUndefined();
    expect((await seriesOf(h, "th_2")).filter((l) => !l.startsWith("calbridge_writeback_guard_tripped"))).toEqual([]);
    expect((await seriesOf(h, "th_3")).filter((l) => !l.startsWith("calbridge_writeback_guard_tripped"))).toEqual([]);

    // The therapists who stay keep theirs.
    const anna = await seriesOf(h, "th_1");
    expect(anna).toContain('calbridge_google_credentials_ok{therapist="th_1"} 1');
    expect(anna).toContain('calbridge_therapist_credentials_ok{therapist="th_1"} 1');
    expect(anna).toContain('calbridge_writebacks_held{therapist="th_1"} 0');
  });

  it("a removed therapist with held write-backs keeps the held count while they are held", async () => {
    const { h } = await setup();
    // A hold as the guard records it (here, or on another replica sharing the store).
    const hold: HeldWriteback = {
      appointmentId: "apt_held",
      therapistId: "th_2",
      kind: "cancel",
      heldAt: Date.now(),
      reason: "test",
    };
    await h.app.store.table<HeldWriteback>("holds").set(hold.appointmentId, hold);
    await h.app.sync.guard.refreshAll(h.world.config.therapists.map((t) => t.therapist_id));
    expect(await seriesOf(h, "th_2")).toContain('calbridge_writebacks_held{therapist="th_2"} 1');

    await h.app.reload(without(h.world.config, "th_2", "th_3"));
    await waitFor("the held gauge of th_3 to go", async () =>
      (await seriesOf(h, "th_3")).every((l) => !l.startsWith("calbridge_writebacks_held")),
    );
    expect(await seriesOf(h, "th_2")).toContain('calbridge_writebacks_held{therapist="th_2"} 1');
  });

  it("a therapist re-pointed to another, working account starts without the old account's series", async () => {
    const { h } = await setup();
    h.world.google.revokeTokens("th_2@clinic.test");
    await h.app.poller.poll("th_2").catch(() => {});
    expect(h.app.calendars.get("th_2")!.health().credentials).toBe("broken");
    h.world.google.createCalendar("th_2.new@clinic.test", "th_2.new@clinic.test", { timeZone: "Europe/Berlin" });

    const next = structuredClone(h.world.config) as Config;
    const t2 = next.therapists.find((t) => t.therapist_id === "th_2")!;
    t2.calendar_id = "th_2.new@clinic.test";
    t2.impersonate = "th_2.new@clinic.test";
    await h.app.reload(next);
    // Right after the swap: no Google series of the old account, none yet of the new one (as at start-up); the new
    // gateway's credentials are not refused (therapist_credentials_ok is read from the state at each scrape).
    const text = await h.app.registry.metrics();
    expect(text.split("\n").filter((l) => /^calbridge_(google|therapist)_.*therapist="th_2"/.test(l))).toEqual([
      'calbridge_therapist_credentials_ok{therapist="th_2"} 1',
    ]);

    await h.app.poller.poll("th_2");
    expect(h.app.calendars.get("th_2")!.health().credentials).toBe("ok");
    const series = await seriesOf(h, "th_2");
    expect(series).toContain('calbridge_google_credentials_ok{therapist="th_2"} 1');
    expect(series).toContain('calbridge_therapist_credentials_ok{therapist="th_2"} 1');
    expect(series.filter((l) => l.startsWith("calbridge_google_credentials_broken"))).toEqual([]);
  });
});

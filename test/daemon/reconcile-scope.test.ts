// Only a full reconciliation is "the reconciliation": a run of one therapist (the daemon's backfill after a connect or
// a reload, `calbridge reconcile --therapist`) that succeeded moved the last-success gauge, /status and /readyz's
// check, and reset the failure streak of CalbridgeReconcileFailing and the notifications, while every full run kept
// failing. And a full run asked for during one therapist's run waits for it and runs, rather than joining it. A copy
// the run removes itself is counted as any other calendar write is.
import { afterEach, expect, it } from "vitest";
import { DAY, daemonHarness, type Harness, mirrored, quiet } from "../sync/support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const gauge = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);

it("a run of one therapist neither resets the failure streak nor counts as the last successful reconciliation", async () => {
  const x = await daemonHarness({ therapists: 2, engine: { baseMs: 20, maxDelayMs: 100 } });
  h = x;
  await quiet(x);
  // th_2's calendar refuses every write (a permanent 400): each full run has an appointment that fails.
  x.world.google.faults.next(100_000, {
    status: 400,
    reason: "invalid",
    match: /^(POST|PUT|PATCH) .*th_2(%40|@)clinic/,
  });
  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  for (const t of ["th_1", "th_2"]) x.world.booking.create({ therapist_id: t, start_time: start.toISOString() });
  await quiet(x);
  for (let i = 0; i < 3; i++) expect((await x.app.reconcile()).failed).toBeGreaterThan(0);
  const before = await x.app.registry.metrics();
  expect(gauge(before, "calbridge_reconcile_consecutive_failures")).toBe(3);
  const lastAt = (await x.app.status()).lastReconcileAt;

  expect((await x.app.reconcile({ therapistId: "th_1" })).ok).toBe(true);
  const after = await x.app.registry.metrics();
  expect(gauge(after, "calbridge_reconcile_consecutive_failures")).toBe(3);
  expect(gauge(after, "calbridge_last_reconcile_success_timestamp_seconds")).toBe(
    gauge(before, "calbridge_last_reconcile_success_timestamp_seconds"),
  );
  expect((await x.app.status()).lastReconcileAt).toBe(lastAt);
  expect((await x.app.reconcile()).failed).toBeGreaterThan(0);
  expect(gauge(await x.app.registry.metrics(), "calbridge_reconcile_consecutive_failures")).toBe(4);
}, 60_000);

it("a full run asked for during one therapist's run waits for it, then runs in full", async () => {
  const x = await daemonHarness({ therapists: 2 });
  h = x;
  await quiet(x);
  const listings = () => x.world.booking.requests.filter((r) => r.route === "GET /v1/appointments");
  const since = listings().length;
  const one = x.app.reconcile({ therapistId: "th_1" });
  const all = x.app.reconcile();
  const [a, b] = await Promise.all([one, all]);
  expect(b).not.toBe(a); // joined, it answered th_1's report: the tick was skipped
  const asked = listings()
    .slice(since)
    .map((r) => new URLSearchParams(r.query).get("therapist_id") ?? "all");
  expect(asked).toContain("th_1");
  expect(asked.filter((t) => t !== "th_1").length).toBeGreaterThan(0);
}, 60_000);

it("a copy the run removes itself (a stray) counts as a delete, in the metric and the therapist's /status counts", async () => {
  const x = await daemonHarness({ therapists: 2 });
  h = x;
  const { id } = await mirrored(x);
  const cal1 = x.world.calendarOf("th_1");
  // The reassignment's removal of th_1's event fails once: the copy stays for the reconciliation to remove.
  x.world.google.faults.next(1, { status: 400, reason: "invalid", match: /^DELETE .*th_1(%40|@)clinic/ });
  x.world.booking.reassign(id, "th_2", { force: true });
  await quiet(x);
  const deletes = async () =>
    Number(
      /^calbridge_sync_operations_total\{kind="delete",result="ok"\} (\S+)$/m.exec(
        await x.app.registry.metrics(),
      )?.[1] ?? 0,
    );
  const mirroredOf = async () =>
    (await x.app.status()).therapists.find((t) => t.therapistId === "th_1")!.counts.eventsMirrored;
  const before = { deletes: await deletes(), th1: await mirroredOf() };
  await x.app.reconcile();
  await quiet(x);
  expect(x.world.google.events(cal1).filter((e) => e.status !== "cancelled")).toEqual([]);
  expect(await deletes()).toBe(before.deletes + 1);
  expect(await mirroredOf()).toBe(before.th1 + 1);
}, 60_000);

// A stop (SIGTERM: app.stop) while one therapist's syncs wait at the Google quota gate for their per-user minute to
// free up: nothing of those syncs was sent, so the stop gives them up at once instead of waiting its whole grace for
// them; their webhook events stay in the inbox (no failed sync, no dead letter), and nothing is sent after the stop.
import { afterEach, describe, expect, it } from "vitest";
import { captureLog } from "../support/log-capture.ts";
import { DAY, daemonHarness, type Harness } from "../sync/support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function stopWhileWaiting(perUser: number) {
  const log = captureLog();
  h = await daemonHarness({
    therapists: 2,
    logger: log.logger,
    google: { limits: { perUserPerMinute: perUser, perProjectPerMinute: 1_000 } },
    configure: (c) => {
      c.google.quota = { user_per_minute: perUser, project_per_minute: 1_000 };
    },
  });
  const x = h;
  const inserts = () => x.world.google.requestLog.filter((r) => r.method === "POST" && r.path.endsWith("/events"));
  const held = async () => {
    const metric = await x.app.registry.getSingleMetric("calbridge_google_quota_waits_total")?.get();
    return (metric?.values ?? []).reduce((n, v) => n + v.value, 0);
  };
  await sleep(300);
  const base = Date.now() + 3 * DAY;
  for (let i = 0; i < 8; i++) {
    x.world.booking.create({ therapist_id: "th_1", start_time: new Date(base + i * 3_600_000).toISOString() });
  }
  // th_1's minute is spent after its first inserts: its next syncs wait at the gate (the rest queued behind them).
  const t0 = Date.now();
  while (Date.now() - t0 < 10_000) {
    await sleep(100);
    if (inserts().length >= Math.min(perUser, 8) && (perUser >= 8 || (await held()) > 0)) break;
  }
  await sleep(300);
  const sentBefore = inserts().length;
  const began = Date.now();
  await x.app.stop(4_000);
  const took = Date.now() - began;
  await sleep(300);
  const exceeded = log.lines.find((l) => String(l.msg).includes("stop grace exceeded"));
  return {
    took,
    sentBefore,
    sentAfter: inserts().length,
    unfinished: (exceeded?.unfinished as string[] | undefined) ?? [],
    msgs: log.lines.map((l) => String(l.msg)),
  };
}

describe("a stop while syncs wait for Google's per-user quota", () => {
  it("control: with budget to spare, every sync is done before the stop", async () => {
    const r = await stopWhileWaiting(600);
    expect(r.sentBefore).toBe(8);
    expect(r.unfinished).toEqual([]);
  }, 30_000);

  it("gives up the syncs waiting at the quota gate at once; their events stay in the inbox, nothing failed or sent", async () => {
    const r = await stopWhileWaiting(3);
    expect(r.sentBefore, "th_1's minute is spent: the other 5 syncs wait, at the gate or queued").toBe(3);
    expect(r.unfinished, "work the stop waited for until its grace ran out").toEqual([]);
    expect(r.took, "ms the stop took").toBeLessThan(2_000);
    expect(r.sentAfter, "nothing sent for the syncs given up").toBe(3);
    expect(r.msgs.filter((m) => m.startsWith("webhook event not finished")).length).toBe(5);
    expect(r.msgs.filter((m) => /sync failed|dead letter|calendar not available/.test(m))).toEqual([]);
  }, 30_000);
});

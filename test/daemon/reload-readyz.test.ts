// A reload that runs the reconciliation more often (a daily cron made every 15 minutes) lowers /readyz's limit on the
// last successful run from three days to 45 minutes. The runs before the reload were made on the old schedule: the
// new limit counts from the reload, so a settings-only change does not pull the pod before the new cron ran once; a
// new schedule that then fails to produce a run within the limit does fail it.
import { afterEach, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import type { Config } from "../../src/config/schema.ts";
import { type Harness, harness } from "../sync/support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function readyz(x: Harness): Promise<{ status: number; detail: string }> {
  const res = await fetch(`${x.app.admin!.url}/readyz`);
  const body = (await res.json()) as { checks: { reconcile: { detail: string } } };
  return { status: res.status, detail: body.checks.reconcile.detail };
}

it("a cron made more frequent by a reload counts /readyz's new limit from the reload", async () => {
  const clock = new ManualClock(Date.now());
  h = await harness({
    therapists: ["th_1"],
    configure: (c) => {
      c.sync = { ...c.sync, reconcile_cron: "0 3 * * *" }; // daily: /readyz allows three days
    },
    app: { clock },
  });
  await h.app.start();
  expect((await h.app.reconcile()).ok).toBe(true);
  await clock.advance(2 * 3_600_000);
  expect((await readyz(h)).status).toBe(200);

  const next = structuredClone(h.world.config) as Config;
  next.sync.reconcile_cron = "*/15 * * * *";
  expect((await h.app.reload(next)).settings).toEqual(["sync.reconcile_cron"]);
  // Was: 503 "last successful reconciliation 7200s ago, older than 2700s", until the next tick.
  expect(await readyz(h)).toEqual({
    status: 200,
    detail: "reconciliation schedule changed 0s ago (the last 7200s ago); limit 2700s from then",
  });
  // No run on the new schedule within its limit: not ready.
  await clock.advance(45 * 60_000 + 1000);
  expect(await readyz(h)).toMatchObject({ status: 503, detail: expect.stringMatching(/older than 2700s$/) });
});

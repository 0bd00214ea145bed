// A Google that does not answer (a hung connection, an outage that accepts and never replies) does not hold a one-shot
// command for minutes: its calls retry 30 s a request, five tries. The one-shot start gives up identifying an OAuth
// `primary` calendar after its wait (that therapist is held for the run, and says why), and each of doctor's calendar
// checks fails after its own wait with "Google did not answer", while the other checks go on.
import { afterEach, expect, it } from "vitest";
import { runDoctor } from "../../src/cli/doctor.ts";
import { createApp } from "../../src/daemon/app.ts";
import { startWorld } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";
import { connectByOAuth } from "./support.ts";

const KEY = "key-a-0123456789abcdef0123456789abcdef";
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

it("doctor answers while Google keeps requests unanswered: the silent calendars fail, the rest is checked", async () => {
  const w = await startWorld({
    therapists: ["th_anna", "th_ben", "th_cleo"],
    configure: (c) => {
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.store = { ...c.store, encryption_key: KEY, previous_encryption_keys: [] };
      // th_anna connected her own Google account, mapped as its `primary`.
      const anna = c.therapists[0]!;
      anna.auth = { type: "oauth" };
      delete anna.impersonate;
      anna.calendar_id = "primary";
    },
  });
  cleanups.push(() => w.close());
  await connectByOAuth(w, "th_anna", KEY);

  // Google takes the first question about th_anna's `primary`, and the first about th_ben's calendar, and never answers.
  let answer = () => {};
  const never = new Promise<void>((resolve) => {
    answer = resolve;
  });
  cleanups.push(async () => answer());
  w.google.faults.holdNext(/^GET .*\/calendars\/primary$/, () => never);
  w.google.faults.holdNext(new RegExp(`^GET .*/calendars/${encodeURIComponent(w.calendarOf("th_ben"))}$`), () => never);

  const app = await createApp(w.config, { logger: captureLog("error").logger, oneShot: true, resolveWaitMs: 500 });
  cleanups.push(() => app.stop(2000));
  const checks = await runDoctor(app, { googleWaitMs: 500 });
  const calendar = (id: string) => checks.find((c) => c.name === `calendar of ${id}`);
  expect(calendar("th_anna")).toMatchObject({
    status: "fail",
    detail: expect.stringContaining("Google did not tell within 1 s which calendar this is"),
  });
  expect(calendar("th_ben")).toMatchObject({ status: "fail", detail: "Google did not answer within 0.5 s" });
  expect(calendar("th_cleo")?.status).toBe("ok");
  expect(checks.find((c) => c.name === "store")?.status).toBe("ok");
});

// A push notification answered 5xx (the daemon's store did not answer, or a proxy in front of it failed) is not lost:
// Google sends it again with exponential backoff (modelled by the emulator), and the daemon's answer to the retry
// triggers the sync that writes the therapist's move back. No periodic poll runs here: only the retry can.
import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { DAY, type Harness, harness, iso } from "../sync/support.ts";

let h: Harness | undefined;
const closers: (() => void)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) close();
  h?.app.push.stop();
  await h?.close();
  h = undefined;
});

async function until(done: () => boolean, ms = 10_000): Promise<boolean> {
  for (let t = 0; t < ms && !done(); t += 20) await new Promise((r) => setTimeout(r, 20));
  return done();
}

it("a change notification answered 503 is sent again by Google and its retry triggers the sync", async () => {
  h = await harness({
    therapists: 1,
    configure: (c) => {
      c.google.push = { public_url: "https://sync.example/webhooks/google" };
      c.sync = { writeback: { reschedule_grace_seconds: 0 } };
    },
  });
  await h.app.start();
  const daemon = new URL(h.app.http!.url);
  // In front of the daemon: answers the first change notification 503 (as the daemon does when its store does not
  // answer), forwards everything else.
  let failNext = true;
  const front = createServer((req, res) => {
    if (failNext && req.headers["x-goog-resource-state"] === "exists") {
      failNext = false;
      req.resume();
      res.writeHead(503).end();
      return;
    }
    const fwd = request(
      { host: daemon.hostname, port: daemon.port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    req.pipe(fwd);
  });
  await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
  closers.push(() => front.close());
  h.world.config.google.push!.public_url = `http://127.0.0.1:${(front.address() as AddressInfo).port}/webhooks/google`;
  h.world.google.requireHttpsChannels = false;
  await h.app.push.start();
  await h.world.google.settleNotifications();

  const start = new Date(Date.now() + 3 * DAY);
  start.setUTCHours(10, 0, 0, 0);
  const id = String(
    h.world.booking.create({ therapist_id: "th_1", start_time: start.toISOString() }, { force: true }).id,
  );
  await h.app.reconcile();
  const cal = h.world.calendarOf("th_1");
  h.world.google.userEdit(cal, eventIdFor(id), {
    start: { dateTime: iso(start.getTime() + 3_600_000) },
    end: { dateTime: iso(start.getTime() + 7_200_000) },
  });
  expect((await h.world.google.notify(cal)).map((d) => d.status)).toEqual([503]);
  expect(
    await until(() => Date.parse(String(h!.world.booking.get(id)!.start_time)) === start.getTime() + 3_600_000),
  ).toBe(true);
  expect(h.world.google.deliveries.filter((d) => d.state === "exists").map((d) => [d.attempt, d.status])).toEqual([
    [1, 503],
    [2, 200],
  ]);
});

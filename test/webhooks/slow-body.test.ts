// Tests a body trickled a byte at a time, each inside the idle timeout (a slowloris upload). The listener's request
// limit ended it, and the route took that for a client that went away: counted "aborted", logged at debug only, so a
// flood of them was invisible. The route now ends a body that is not whole within its total time itself: 408, counted
// "timeout" and logged as a stalled body, before the listener's limit.
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { createHttpServer, type HttpServer } from "../../src/daemon/http.ts";
import { SecretRegistry } from "../../src/log.ts";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { createWebhookHandler } from "../../src/webhooks/route.ts";
import { sign } from "../../src/webhooks/signature.ts";
import { captureLog } from "../support/log-capture.ts";
import { openTestStore, PATH, rawUpload, SECRET, tmpStorePath } from "./support.ts";

let server: HttpServer | undefined;
afterEach(async () => {
  await server?.close(100);
});

describe("slowloris body on the daemon's listener", () => {
  it("a body trickled under the idle timeout until the request time limit is counted as stalled", async () => {
    const store = await openTestStore(tmpStorePath());
    const registry = new Registry();
    const log = captureLog("debug", new SecretRegistry());
    const clock = new ManualClock(Date.now());
    const handler = createWebhookHandler({
      path: PATH,
      secrets: [SECRET],
      inbox: new WebhookInbox({ store, clock }),
      clock,
      logger: log.logger,
      registry,
      bodyIdleTimeoutMs: 1000,
      bodyTotalTimeoutMs: 1500,
    });
    server = await createHttpServer({
      name: "public",
      listen: "127.0.0.1:0",
      routes: [(req, res) => handler(req, res)],
      requestTimeoutMs: 3000,
      headersTimeoutMs: 1000,
      logger: log.logger,
    });
    const body = JSON.stringify({ id: "evt_slow", type: "appointment.created", data: { object: { id: "a" } } });
    const up = rawUpload(server.url, PATH, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      "x-service-signature": sign(body, SECRET, Math.floor(clock.now() / 1000)),
    });
    let i = 0;
    const timer = setInterval(() => up.write(body[i++] ?? " "), 300);
    await Promise.race([up.closed, new Promise((r) => setTimeout(r, 6000))]);
    clearInterval(timer);
    up.destroy();
    await new Promise((r) => setTimeout(r, 100));
    const m = await registry.getSingleMetric("calbridge_webhooks_total")!.get();
    const results = Object.fromEntries(m.values.map((v) => [v.labels.result, v.value]));
    await store.close();
    expect(results).toMatchObject({ timeout: 1 });
    expect(results["aborted"]).toBeUndefined();
    expect(log.lines.find((l) => String(l.msg).includes("webhook body stalled"))).toMatchObject({ level: 40 });
  }, 20_000);
});

// A renewal whose events.watch could not be sent with a working access token opened no channel: Google refused the
// old token (401, nothing opened) and the token endpoint then did not answer, failed or refused the credentials; or the
// credentials were already known broken and nothing was sent. Nothing is kept as lost (push-lost.test.ts), and the
// warning does not say that Google's answer to the watch was lost. The call runner marks a token failure
// (CalendarError.tokenEndpoint), which has no HTTP status when the endpoint did not answer, and the token endpoint's
// 5xx when it failed: either would otherwise read as a watch that may have been carried out. /status says the token
// endpoint failed (push.lastRenewalError): it said "Google answered transient" when nothing answered, and a token
// endpoint's 503 as if the watch had met it.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, expect, it } from "vitest";
import type { Clock } from "../../src/clock.ts";
import type { Channel } from "../../src/daemon/push.ts";
import { captureLog } from "../support/log-capture.ts";
import { type Harness, harness } from "../sync/support.ts";

let h: Harness | undefined;
let proxy: Server | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
  proxy?.closeAllConnections();
  await new Promise<void>((r) => (proxy ? proxy.close(() => r()) : r()));
  proxy = undefined;
});

/** Real time, but each of the Google calls' backoff sleeps lasts a thousandth as long (six tries of a token failure). */
const hasty: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      setTimeout(resolve, ms / 1000);
    }),
};

/** The token endpoint, behind a proxy that passes requests on while `reachable`, else drops their connection. */
async function tokenProxy(): Promise<{ url: string; reachable: boolean; target: string }> {
  const state = { url: "", reachable: true, target: "" };
  proxy = createServer((req, res) => {
    if (!state.reachable) {
      req.socket.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      void request(state.target, {
        method: "POST",
        headers: { "content-type": String(req.headers["content-type"]) },
        body: Buffer.concat(chunks),
      })
        .then(async (out) => res.writeHead(out.statusCode, out.headers).end(Buffer.from(await out.body.arrayBuffer())))
        .catch(() => res.writeHead(502).end());
    });
  });
  await new Promise<void>((r) => proxy!.listen(0, "127.0.0.1", r));
  state.url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/token`;
  return state;
}

const REFUSED = "Google's token endpoint answered unauthorized_client (HTTP 401)";
/** Each failure, and what /status says of it (push.lastRenewalError.message). */
const failures: Record<string, [(x: Harness, token: { reachable: boolean }) => unknown, string]> = {
  "the token endpoint unreachable": [
    (_, token) => {
      token.reachable = false;
    },
    "no answer from Google's token endpoint (a network error or a timeout)",
  ],
  "the token endpoint answering 503": [
    (x) => {
      x.world.google.faults.next(100, { target: "token", status: 503, reason: "backendError" });
    },
    "Google's token endpoint answered backendError (HTTP 503)",
  ],
  "the credentials refused (delegation revoked)": [(x) => x.world.google.revokeTokens(), REFUSED],
  "the credentials already found broken by a sync (nothing is sent)": [
    async (x) => {
      x.world.google.revokeTokens();
      const gw = x.app.calendars.get("th_1")!;
      await gw.get("abcdef0123").catch(() => {});
      expect(gw.health().credentials).toBe("broken");
    },
    REFUSED,
  ],
};

for (const [name, [fail, shown]] of Object.entries(failures)) {
  it(`a watch that no access token could be had for (${name}) is not kept as a lost channel; /status names the token endpoint`, async () => {
    const log = captureLog();
    const token = await tokenProxy();
    const x = await harness({
      therapists: 1,
      logger: log.logger,
      app: { clock: hasty },
      configure: (c) => {
        token.target = c.google.token_url ?? "";
        c.google.token_url = token.url;
        c.google.push = { public_url: "https://sync.example/webhooks/google" };
      },
    });
    h = x;
    await x.app.start();
    x.app.poller.stop();
    x.world.config.google.push!.public_url = `${x.app.http!.url}/webhooks/google`;
    x.world.google.requireHttpsChannels = false;
    // The access token the start obtained no longer works (401): the watch needs a new one.
    x.world.google.expireAccessTokens();
    await fail(x, token);

    await x.app.push.renew();
    const warned = log.find((l) => l.msg === "push channel not opened; polling covers this calendar");
    expect(String(warned?.err)).toMatch(/token endpoint|credentials of therapist th_1 are broken/);
    expect(log.find((l) => String(l.msg).includes("answer to the watch was lost"))).toBeUndefined();
    expect(x.world.google.channels.size).toBe(0);
    const stored: string[] = [];
    for await (const [key] of x.app.store.table<Channel>("channels").entries()) stored.push(key);
    expect(stored).toEqual([]);
    expect(x.app.push.knownChannels).toBe(0);
    // /status says what failed: the token endpoint, not Google's answer to the watch (there was none).
    expect((await x.app.status()).therapists[0]?.push?.lastRenewalError).toMatchObject({
      result: "failed",
      message: shown,
    });
  }, 30_000);
}

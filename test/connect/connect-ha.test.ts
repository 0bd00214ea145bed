// The connect flow with two replicas over a real redis-server: any replica can answer any step (the consent attempt
// and the used links live in the shared store), a link is used once even when its two callbacks reach two replicas,
// and the replica that did not store the token takes it up at once all the same (a notice), the leader backfilling.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { answerConsent } from "../support/consent.ts";
import { redisTestsEnabled, useRedisServer } from "../support/redis.ts";
import { type ConnectWorld, startConnectWorld } from "./support.ts";

describe.skipIf(!redisTestsEnabled("connect-ha"))("connect pages with two replicas sharing one Redis store", () => {
  const redis = useRedisServer();
  let cw: ConnectWorld | undefined;
  let b: App | undefined;
  afterEach(async () => {
    await b?.stop(3000).catch(() => {});
    await cw?.close();
    cw = undefined;
    b = undefined;
  });

  /** Replica a (the public address) and replica b on another port, one store; a flushed Redis per test. */
  async function twoReplicas() {
    const { createClient } = await import("redis");
    const client = createClient({ url: redis().url });
    await client.connect();
    await client.flushAll();
    await client.quit();
    cw = await startConnectWorld({
      storeUrl: redis().url,
      configure: (c) => (c.store = { ...c.store, url: redis().url, lease_seconds: 2 }),
    });
    b = await createApp(cw.world.config, { logger: silentLogger, listen: "127.0.0.1:0" });
    await b.start();
    return { a: cw.app, b, bOrigin: b.http!.url };
  }

  /** Opens the link on replica a and answers Google's page: the callback address (on the public address, replica a). */
  async function consentOnA(link: string): Promise<URL> {
    const landing = await (await request(link)).body.text();
    const google = landing.match(/id="continue" href="([^"]+)"/)?.[1]?.replace(/&amp;/g, "&");
    return new URL(await answerConsent(google!));
  }

  const on = (origin: string, url: URL) => `${origin}${url.pathname}${url.search}`;
  const get = async (url: string) => {
    const res = await request(url);
    return { status: res.statusCode, html: await res.body.text() };
  };

  it("a callback answered by the other replica: both replicas use the new token at once; one link, one use", async () => {
    const { a, bOrigin } = await twoReplicas();
    const w = cw!;
    const link = await w.invite();
    // Two consents started from the same link (two tabs): their callbacks reach different replicas.
    const first = await consentOnA(link);
    const second = await consentOnA(link);
    const onB = await get(on(bOrigin, first));
    expect(onB.status).toBe(200);
    expect(onB.html).toContain("Your calendar is connected");
    const onA = await get(second.toString());
    expect(onA.status).toBe(410);
    expect(onA.html).toContain("This link was already used");

    // Replica b stored the token; replica a (whichever leads) takes it up through the notice, without a restart.
    await expect.poll(() => a.calendars.has("th_ben") && b!.calendars.has("th_ben"), { timeout: 10_000 }).toBe(true);
    await expect.poll(() => w.live().length, { timeout: 15_000 }).toBe(w.expected().length);
  });
});

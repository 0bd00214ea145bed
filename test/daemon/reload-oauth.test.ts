// A reload that adds the first OAuth therapist together with google.oauth: google.* is read at start only, so the
// running daemon has no OAuth client for that therapist. Its credentials said "google.oauth is required for OAuth
// therapists", while the file an admin had just edited has it: the message now says that a restart takes it up.
import { afterEach, describe, expect, it } from "vitest";
import type { Config } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld } from "../../src/simulator/world.ts";

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

describe("a reload adding google.oauth", () => {
  it("names the restart the new OAuth therapist waits for", async () => {
    const world = await startWorld({ therapists: ["th_anna", "th_ben"], mapped: ["th_anna"] });
    cleanups.push(() => world.close());
    expect(world.config.google.oauth).toBeUndefined();
    const app: App = await createApp(world.config, { logger: silentLogger });
    cleanups.push(() => app.stop(3000));
    await app.start();

    const client = world.google.registerOAuthClient();
    const next = structuredClone(world.config) as Config;
    next.google.oauth = { client_id: client.client_id, client_secret: client.client_secret };
    next.therapists.push({ therapist_id: "th_ben", calendar_id: "primary", auth: { type: "oauth" } } as never);
    const changes = await app.reload(next);
    expect(changes.added).toEqual(["th_ben"]);
    expect(changes.restartNeeded).toEqual(["google.oauth"]);

    const ben = (await app.status()).therapists.find((t) => t.therapistId === "th_ben")!;
    expect(ben.credentials.ok).toBe(false);
    expect(ben.credentials.detail).toMatch(/google\.oauth .*restart/);
  });
});

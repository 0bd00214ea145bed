// `calbridge authorize`: the OAuth consent flow against the emulator's consent page, the refresh token stored, and a
// therapist with no token in the file then syncs with the stored one.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { main } from "../../src/cli.ts";
import { createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { answerConsent } from "../support/consent.ts";

let world: World | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

describe("calbridge authorize", () => {
  it("runs the consent flow, stores the refresh token, and the daemon uses it", async () => {
    let client = { client_id: "", client_secret: "" };
    world = await startWorld({
      therapists: ["th_ben"],
      configure: (c) => {
        c.therapists[0] = {
          therapist_id: "th_ben",
          calendar_id: "primary",
          timezone: "Europe/Berlin",
          auth: { type: "oauth" },
        };
        c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      },
    });
    client = world.google.registerOAuthClient();
    world.config.google.oauth = client;
    world.google.consent.subject = "ben@personal.test";
    const file = join(world.dir, "calbridge.yaml");
    writeFileSync(file, stringify(world.config));

    // The consent address is printed on stderr; "the therapist" opens it (the emulator approves and redirects).
    const original = process.stderr.write.bind(process.stderr);
    let printed = "";
    process.stderr.write = ((chunk: string | Uint8Array) => {
      printed += String(chunk);
      const url = printed.match(/https?:\/\/\S+authorize\S*/)?.[0];
      if (url) {
        printed = "";
        void answerConsent(url).then(async (location) => {
          await (await request(location)).body.dump();
        });
      }
      return true;
    }) as typeof process.stderr.write;
    let code: number;
    try {
      code = await main(["node", "calbridge", "--config", file, "authorize", "--therapist", "th_ben"]);
    } finally {
      process.stderr.write = original;
    }
    expect(code).toBe(0);

    const app = await createApp(world.config, { logger: silentLogger, oneShot: true });
    try {
      expect(app.calendars.has("th_ben")).toBe(true);
      const ok = await app.calendars.get("th_ben")!.checkAccess();
      expect(ok.ok).toBe(true);
      world.booking.create(
        { therapist_id: "th_ben", start_time: new Date(Date.now() + 86_400_000).toISOString() },
        { force: true },
      );
      await app.reconcile();
      const token = world.google.requestLog.find((r) => r.grantType === "refresh_token");
      expect(token?.clientId).toBe(client.client_id);
      // "primary" is the consenting user's own calendar.
      expect(world.google.events("ben@personal.test").filter((e) => e.status === "confirmed")).toHaveLength(1);
    } finally {
      await app.stop(1000);
    }
  });
});

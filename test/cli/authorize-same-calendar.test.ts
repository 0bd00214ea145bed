// `calbridge authorize` for th_ben (OAuth, `primary`) answered in a browser signed in as th_anna, whose calendar the
// configuration names: th_ben's `primary` would be Anna's calendar, two therapists on one calendar (each would take
// the other's events for deletions, written back as cancellations). Refused: nothing stored, exit not 0, the message
// names Anna's calendar and says to sign in with th_ben's own account.
import { request } from "undici";
import { afterEach, expect, it } from "vitest";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { CredentialStore, SecretBox } from "../../src/store/secrets.ts";
import { openStore } from "../../src/store/store.ts";
import { answerConsent } from "../support/consent.ts";
import { runCliWatching, writeConfig } from "./support.ts";

const KEY = "authorize-test-key-0123456789abcdef";
let world: World | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

it("authorize refuses a consent whose account's primary calendar is already another therapist's calendar", async () => {
  world = await startWorld({
    therapists: ["th_anna", "th_ben"],
    configure: (c) => {
      c.therapists[1] = {
        therapist_id: "th_ben",
        calendar_id: "primary",
        timezone: "Europe/Berlin",
        auth: { type: "oauth" },
      };
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
    },
  });
  world.config.google.oauth = world.google.registerOAuthClient();
  const annaCalendar = world.config.therapists[0]!.calendar_id;
  world.google.consent.subject = annaCalendar; // the browser is signed in as Anna
  const file = writeConfig(world, (c) => {
    c.store.encryption_key = KEY;
  });
  let printed = "";
  let browser: Promise<unknown> | undefined;
  const r = await runCliWatching(
    (text) => {
      printed += text;
      const url = printed.match(/https?:\/\/\S+authorize\S*/)?.[0];
      if (!url || browser) return;
      browser = answerConsent(url, { tick: "all" }).then(async (location) => (await request(location)).body.text());
    },
    "--config",
    file,
    "authorize",
    "--therapist",
    "th_ben",
  );
  await browser;
  expect(r.code).not.toBe(0);
  expect(r.stderr + r.stdout).toMatch(
    new RegExp(
      `calendar ${annaCalendar} is already the calendar of th_anna.*nothing was stored.*th_ben's own Google account`,
    ),
  );
  const store = await openStore(world.config.store.url);
  try {
    expect(await new CredentialStore({ store, box: new SecretBox(KEY) }).loadRefreshToken("th_ben")).toBeUndefined();
  } finally {
    await store.close();
  }
});

// The connect link opened in a browser signed in as another mapped therapist (th_anna, whose calendar the
// configuration names): th_ben's `primary` would be Anna's calendar, two therapists on one calendar (each would take
// the other's events for deletions, written back as cancellations). The callback refuses it: nothing stored, the page
// says to sign in with the therapist's own account, and the link still works for the right account.
import { request } from "undici";
import { afterEach, expect, it } from "vitest";
import { answerConsent } from "../support/consent.ts";
import { type ConnectWorld, startConnectWorld } from "./support.ts";

let cw: ConnectWorld | undefined;
afterEach(async () => {
  await cw?.close();
  cw = undefined;
});

async function get(url: string) {
  const res = await request(url);
  return { status: res.statusCode, html: await res.body.text() };
}
const hrefOf = (html: string, id: string) =>
  html.match(new RegExp(`id="${id}" href="([^"]+)"`))?.[1]?.replace(/&amp;/g, "&");

it("connect refuses an account whose calendar is already another therapist's mapped calendar", async () => {
  cw = await startConnectWorld();
  const anna = cw.world.config.therapists.find((t) => t.therapist_id === "th_anna")!;
  const ben = cw.world.google.consent.subject;
  cw.world.google.consent.subject = anna.calendar_id; // the browser is signed in as Anna
  const link = await cw.invite();
  const page = await get(await answerConsent(hrefOf((await get(link)).html, "continue")!));
  expect(page.status).toBe(409);
  expect(page.html).not.toContain("Your calendar is connected");
  expect(page.html).toContain(anna.calendar_id);
  expect(page.html).toContain("sign in with your own Google account");
  expect(hrefOf(page.html, "retry")).toBe(link);
  expect((await cw.app.credentials.loadRefreshToken("th_ben"))?.token).toBeUndefined();
  expect(cw.app.calendars.has("th_ben")).toBe(false);

  // The link is not spent: signed in as Ben this time, it connects.
  cw.world.google.consent.subject = ben;
  const second = await get(await answerConsent(hrefOf((await get(link)).html, "continue")!));
  expect(second.html).toContain("Your calendar is connected");
  expect((await cw.app.credentials.loadRefreshToken("th_ben"))?.token).toBeTruthy();
});

it("connect refuses an account whose primary calendar another OAuth therapist already connected", async () => {
  cw = await startConnectWorld({
    configure: (c) => {
      const anna = c.therapists[1]!;
      c.therapists[1] = { therapist_id: anna.therapist_id, calendar_id: "primary", timezone: "Europe/Berlin" };
      c.therapists[1].auth = { type: "oauth" };
    },
  });
  const ben = cw.world.google.consent.subject;
  const annaAccount = "anna.private@gmail.test";
  // Anna connects her own account: her `primary` is resolved by the daemon.
  cw.world.google.consent.subject = annaAccount;
  const annaLink = await cw.invite("th_anna");
  const first = await get(await answerConsent(hrefOf((await get(annaLink)).html, "continue")!));
  expect(first.html).toContain("Your calendar is connected");
  await expect.poll(() => cw!.app.calendars.has("th_anna"), { timeout: 10_000 }).toBe(true);
  // Ben's link opened in the same browser, still signed in as Anna.
  const link = await cw.invite();
  const page = await get(await answerConsent(hrefOf((await get(link)).html, "continue")!));
  expect(page.status).toBe(409);
  expect(page.html).toContain(annaAccount);
  expect((await cw.app.credentials.loadRefreshToken("th_ben"))?.token).toBeUndefined();
  cw.world.google.consent.subject = ben;
  const second = await get(await answerConsent(hrefOf((await get(link)).html, "continue")!));
  expect(second.html).toContain("Your calendar is connected");
});

it("the therapist who names the calendar can reconnect with her own account while a colleague refused on it", async () => {
  // th_anna names her calendar (OAuth); th_ben (OAuth, `primary`) holds a token of Anna's account (stored by an
  // earlier build): the daemon keeps Anna and refuses Ben. Anna's access then lapses and she reconnects as herself:
  // Ben's refused mapping must not make her own calendar "another therapist's".
  cw = await startConnectWorld({
    configure: (c) => {
      const anna = c.therapists[1]!;
      c.therapists[1] = { therapist_id: anna.therapist_id, calendar_id: anna.calendar_id, timezone: "Europe/Berlin" };
      c.therapists[1].auth = { type: "oauth" };
    },
  });
  const annaCal = cw.world.config.therapists.find((t) => t.therapist_id === "th_anna")!.calendar_id;
  cw.world.google.consent.subject = annaCal;
  const first = await get(await answerConsent(hrefOf((await get(await cw.invite("th_anna"))).html, "continue")!));
  expect(first.html).toContain("Your calendar is connected");
  await expect.poll(() => cw!.app.calendars.has("th_anna"), { timeout: 10_000 }).toBe(true);
  const client = cw.world.config.google.oauth!;
  await cw.app.credentials.saveRefreshToken("th_ben", cw.world.google.issueRefreshToken(annaCal, client.client_id));
  await cw.app.credentialsChanged("th_ben");
  await expect
    .poll(async () => (await cw!.app.status()).therapists.find((t) => t.therapistId === "th_ben")?.credentials.detail, {
      timeout: 10_000,
    })
    .toMatch(/also the calendar of th_anna/);

  cw.world.google.revokeTokens(annaCal);
  cw.world.google.consent.subject = annaCal;
  const page = await get(await answerConsent(hrefOf((await get(await cw.invite("th_anna"))).html, "continue")!));
  expect(page.status).toBe(200);
  expect(page.html).toContain("Your calendar is connected");
});

// The account a therapist chooses on Google's page must open the calendar their mapping names: a shared calendar
// (calendar_id: ben-praxis@group.calendar.google.com) belongs to one account, and a browser signed in to another of
// the therapist's accounts gets a token for which Google answers that calendar 404. The callback checks the calendar
// with the fresh access token before it spends the link: nothing is stored for the wrong account, the page names the
// calendar and offers the link again, and the right account then connects. A check Google does not answer (5xx) stores
// nothing either and leaves the link usable.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { answerConsent } from "../support/consent.ts";
import { BEN, type ConnectWorld, startConnectWorld } from "./support.ts";

let cw: ConnectWorld | undefined;
afterEach(async () => {
  await cw?.close();
  cw = undefined;
});

const SHARED = "ben-praxis@group.calendar.google.com";
const PRIVATE = "ben.private@gmail.test";

async function get(url: string) {
  const res = await request(url);
  return { status: res.statusCode, html: await res.body.text() };
}

const hrefOf = (html: string, id: string) =>
  html.match(new RegExp(`id="${id}" href="([^"]+)"`))?.[1]?.replace(/&amp;/g, "&");

async function connectThrough(link: string) {
  const landing = await get(link);
  expect(landing.status).toBe(200);
  return get(await answerConsent(hrefOf(landing.html, "continue")!));
}

async function sharedCalendarWorld() {
  cw = await startConnectWorld({
    configure: (c) => {
      c.therapists[0]!.calendar_id = SHARED;
    },
  });
  cw.world.google.createCalendar(SHARED, BEN);
  return cw;
}

const stored = async (w: ConnectWorld) => (await w.app.credentials.loadRefreshToken("th_ben"))?.token;

describe("connect: the account chosen on Google's page", () => {
  it("one that cannot open the mapped calendar is told so, nothing is stored, and the link still works", async () => {
    const w = await sharedCalendarWorld();
    w.world.google.consent.subject = PRIVATE;
    const link = await w.invite();
    const page = await connectThrough(link);
    expect(page.status).toBe(403);
    expect(page.html).not.toContain("Your calendar is connected");
    expect(page.html).toContain("This Google account cannot open your calendar");
    expect(page.html).toContain(`<strong>${SHARED}</strong>`);
    expect(page.html).toContain("choose the account that owns this calendar");
    expect(hrefOf(page.html, "retry")).toBe(link);
    // Google was asked as the account chosen, and answered as it does for a calendar that account cannot see.
    const check = w.world.google.requestLog.find((r) => /\/calendars\/ben-praxis(@|%40)group/.test(r.path));
    expect(check).toMatchObject({ status: 404, subject: PRIVATE });
    expect(await stored(w)).toBeUndefined();
    expect(w.app.calendars.has("th_ben")).toBe(false);
    expect((await w.app.status()).therapists[0]?.credentials.ok).toBe(false);

    // The link is not spent: the account that owns the calendar connects with it.
    expect((await get(link)).status).toBe(200);
    w.world.google.consent.subject = BEN;
    const second = await connectThrough(link);
    expect(second.status).toBe(200);
    expect(second.html).toContain("Your calendar is connected");
    expect(await stored(w)).toBeTruthy();
    expect((await get(link)).status).toBe(410);
  });

  it("an account the calendar is shared with connects", async () => {
    const w = await sharedCalendarWorld();
    w.world.google.shareCalendar(SHARED, PRIVATE, "writer");
    w.world.google.consent.subject = PRIVATE;
    const page = await connectThrough(await w.invite());
    expect(page.status).toBe(200);
    expect(page.html).toContain("Your calendar is connected");
    expect(await stored(w)).toBeTruthy();
  });

  it("a check Google does not answer stores nothing, says so, and leaves the link usable", async () => {
    const w = await sharedCalendarWorld();
    const link = await w.invite();
    w.world.google.faults.next(5, {
      status: 503,
      reason: "backendError",
      match: /^GET \/calendar\/v3\/calendars\/ben-praxis(@|%40)group[^/]*$/,
    });
    const page = await connectThrough(link);
    expect(page.status).toBe(503);
    expect(page.html).toContain("Your calendar could not be checked");
    expect(page.html).toContain("Nothing was saved, and your link still works");
    expect(hrefOf(page.html, "retry")).toBe(link);
    expect(await stored(w)).toBeUndefined();
    expect(w.world.google.faults.pending).toBe(3); // asked twice (one retry), then the page
    w.world.google.faults.reset();
    const second = await connectThrough(link);
    expect(second.status).toBe(200);
    expect(await stored(w)).toBeTruthy();
  });
});

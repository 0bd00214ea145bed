// An account the mapped calendar is shared with only to look at ("See all event details", Google's reader role) opens
// it (calendars.get answers), but every write gets 403 requiredAccessLevel: the callback asks calendarList.get for the
// account's accessRole before it spends the link, and refuses a view-only role with a page that names the calendar and
// the permission the share needs ("Make changes to events"). Nothing is stored and the link still works. Where Google
// does not tell the role (the calendar is not on the account's calendar list: 404; an answer not understood), the
// account is accepted as before, and the log says so at info.
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { answerConsent } from "../support/consent.ts";
import { captureLog } from "../support/log-capture.ts";
import { BEN, type ConnectWorld, startConnectWorld } from "./support.ts";

let cw: ConnectWorld | undefined;
afterEach(async () => {
  await cw?.close();
  cw = undefined;
});

const SHARED = "ben-praxis@group.calendar.google.com";
const DESK = "desk@praxis.test";

async function get(url: string) {
  const res = await request(url);
  const html = await res.body.text();
  return { status: res.statusCode, html, words: html.replace(/\s+/g, " ") };
}

const hrefOf = (html: string, id: string) =>
  html.match(new RegExp(`id="${id}" href="([^"]+)"`))?.[1]?.replace(/&amp;/g, "&");

async function connectThrough(link: string) {
  const landing = await get(link);
  expect(landing.status).toBe(200);
  return get(await answerConsent(hrefOf(landing.html, "continue")!));
}

/** th_ben's mapping names a calendar DESK owns; Ben's account gets it shared with `role`, and Ben connects with it. */
async function sharedWith(role: "reader" | "writer", log = captureLog("info")) {
  cw = await startConnectWorld({
    logger: log.logger,
    configure: (c) => {
      c.therapists[0]!.calendar_id = SHARED;
    },
  });
  cw.world.google.createCalendar(SHARED, DESK);
  cw.world.google.shareCalendar(SHARED, BEN, role);
  return { w: cw, log };
}

const stored = async (w: ConnectWorld) => (await w.app.credentials.loadRefreshToken("th_ben"))?.token;
const listGets = (w: ConnectWorld) =>
  w.world.google.requestLog.filter((r) => /\/users\/me\/calendarList\/ben-praxis(@|%40)group/.test(r.path));

describe("connect: an account the mapped calendar is shared with", () => {
  it("view-only (reader) is refused before the link is spent, with the calendar and the permission named", async () => {
    const { w, log } = await sharedWith("reader");
    const link = await w.invite();
    const page = await connectThrough(link);
    expect(page.status).toBe(403);
    expect(page.html).not.toContain("Your calendar is connected");
    expect(page.html).toContain("This Google account can only see your calendar");
    expect(page.html).toContain(`<strong>${SHARED}</strong>`);
    expect(page.words).toContain('<strong>"Make changes to events"</strong>');
    expect(page.words).toContain("Nothing was saved, and your link still works");
    expect(hrefOf(page.html, "retry")).toBe(link);
    expect(listGets(w)).toMatchObject([{ status: 200, subject: BEN }]);
    expect(await stored(w)).toBeUndefined();
    expect(w.app.calendars.has("th_ben")).toBe(false);
    expect(
      log.find((l) => l.access_role === "reader" && /may only see the mapped calendar/.test(String(l.msg))),
    ).toMatchObject({ level: 40, calendar_id: SHARED });

    // The link is not spent: once the owner lets Ben's account make changes, the same link connects it.
    expect((await get(link)).status).toBe(200);
    w.world.google.shareCalendar(SHARED, BEN, "writer");
    const second = await connectThrough(link);
    expect(second.status).toBe(200);
    expect(second.html).toContain("Your calendar is connected");
    expect(await stored(w)).toBeTruthy();
  });

  it("with writer access connects, its role read from the calendar list", async () => {
    const { w } = await sharedWith("writer");
    const page = await connectThrough(await w.invite());
    expect(page.status).toBe(200);
    expect(page.html).toContain("Your calendar is connected");
    expect(listGets(w)).toMatchObject([{ status: 200, subject: BEN }]);
    expect(await stored(w)).toBeTruthy();
  });

  it("not on the account's calendar list (calendarList.get 404) connects: the role cannot be told, logged at info", async () => {
    const { w, log } = await sharedWith("reader");
    w.world.google.removeFromCalendarList(SHARED, BEN);
    const page = await connectThrough(await w.invite());
    expect(page.status).toBe(200);
    expect(page.html).toContain("Your calendar is connected");
    expect(listGets(w)).toMatchObject([{ status: 404, subject: BEN }]);
    expect(await stored(w)).toBeTruthy();
    expect(log.find((l) => /could not be told/.test(String(l.msg)))).toMatchObject({
      level: 30,
      calendar_id: SHARED,
      reason: "the calendar is not in the account's calendar list",
    });
  });

  it("a calendarList.get Google does not answer (503) connects as before: in doubt, not refused", async () => {
    const { w, log } = await sharedWith("reader");
    w.world.google.faults.next(5, {
      status: 503,
      reason: "backendError",
      match: /^GET \/calendar\/v3\/users\/me\/calendarList\//,
    });
    const page = await connectThrough(await w.invite());
    expect(page.status).toBe(200);
    expect(await stored(w)).toBeTruthy();
    expect(w.world.google.faults.pending).toBe(3); // asked twice (one retry)
    expect(log.find((l) => /could not be told/.test(String(l.msg)))).toMatchObject({ level: 30 });
  });
});

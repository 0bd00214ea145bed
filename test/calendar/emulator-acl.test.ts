// The emulator's calendar sharing as Google's acl.list shows it (through googleapis and the gateway): the users, the
// public ("default"), domain and group rules a person sets in the calendar's settings; writer access and an ACL scope
// needed to read them; the gateway's `sharing()` naming a refusal instead of throwing; and calendarList.get's
// accessRole (the account's own share), with 404 for a shared calendar that is not on the account's calendar list.
import { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { afterEach, describe, expect, it } from "vitest";
import { OAuthCredentials } from "../../src/calendar/auth.ts";
import { CalendarGateway } from "../../src/calendar/gateway.ts";
import { CALENDAR_ID, type Fixture, SUBJECT, setup } from "./helpers.ts";

/** The status and Google's error reason of a raw googleapis call that must fail. */
async function refusal(call: Promise<unknown>): Promise<{ status: unknown; reason: unknown }> {
  const err = (await call.then(
    () => expect.fail("expected a refusal"),
    (e: unknown) => e,
  )) as { status?: number; response?: { data?: { error?: { errors?: { reason?: string }[] } } } };
  return { status: err.status, reason: err.response?.data?.error?.errors?.[0]?.reason };
}

let f: Fixture | undefined;
const gateways: CalendarGateway[] = [];
afterEach(async () => {
  for (const g of gateways.splice(0)) g.close();
  await f?.close();
  f = undefined;
});

const EVENTS_SCOPE = "https://www.googleapis.com/auth/calendar.events";
const ACLS_READONLY = "https://www.googleapis.com/auth/calendar.acls.readonly";

function clientWith(fx: Fixture, scopes: string[]): calendar_v3.Calendar {
  const auth = new OAuthCredentials({
    clientId: fx.client.client_id,
    clientSecret: fx.client.client_secret,
    refreshToken: fx.emulator.issueRefreshToken(SUBJECT, fx.client.client_id, scopes),
    tokenUrl: fx.emulator.tokenUrl,
  });
  return new calendar_v3.Calendar({ auth, rootUrl: fx.emulator.rootUrl, retry: false });
}

describe("acl.list", () => {
  it("lists the users and the wider rules set in the calendar's settings, in Google's shape", async () => {
    f = await setup();
    f.emulator.shareCalendar(CALENDAR_ID, "desk@clinic.example", "writer");
    f.emulator.shareCalendarWith(CALENDAR_ID, { type: "default" }, "reader");
    f.emulator.shareCalendarWith(CALENDAR_ID, { type: "domain", value: "clinic.example" }, "freeBusyReader");
    f.emulator.shareCalendarWith(CALENDAR_ID, { type: "group", value: "team@clinic.example" }, "writer");
    const { data } = await f.api.acl.list({ calendarId: CALENDAR_ID });
    expect(data.kind).toBe("calendar#acl");
    expect(data.items?.map((r) => [r.id, r.scope, r.role])).toEqual([
      [`user:${SUBJECT}`, { type: "user", value: SUBJECT }, "owner"],
      ["user:desk@clinic.example", { type: "user", value: "desk@clinic.example" }, "writer"],
      ["default", { type: "default" }, "reader"],
      ["domain:clinic.example", { type: "domain", value: "clinic.example" }, "freeBusyReader"],
      ["group:team@clinic.example", { type: "group", value: "team@clinic.example" }, "writer"],
    ]);
    expect(data.items?.every((r) => r.kind === "calendar#aclRule" && typeof r.etag === "string")).toBe(true);

    // "See only free/busy" again: the public rule goes away with `none`.
    f.emulator.shareCalendarWith(CALENDAR_ID, { type: "default" }, "none");
    const again = await f.api.acl.list({ calendarId: CALENDAR_ID });
    expect(again.data.items?.map((r) => r.id)).not.toContain("default");
  });

  it("needs writer access (403 requiredAccessLevel) and an ACL scope (403 insufficientPermissions)", async () => {
    f = await setup();
    f.emulator.createCalendar("boss@clinic.example", "boss@clinic.example");
    f.emulator.shareCalendar("boss@clinic.example", SUBJECT, "reader");
    expect(await refusal(f.api.acl.list({ calendarId: "boss@clinic.example" }))).toEqual({
      status: 403,
      reason: "requiredAccessLevel",
    });
    expect(await refusal(clientWith(f, [EVENTS_SCOPE]).acl.list({ calendarId: CALENDAR_ID }))).toEqual({
      status: 403,
      reason: "insufficientPermissions",
    });
    const { data } = await clientWith(f, [ACLS_READONLY]).acl.list({ calendarId: CALENDAR_ID });
    expect(data.items?.length).toBe(1);
  });

  it("gateway.sharing() gives the calendar's address and every rule, or the refusal in words", async () => {
    f = await setup();
    f.emulator.shareCalendarWith(CALENDAR_ID, { type: "default" }, "reader");
    const primary = new CalendarGateway({
      therapistId: "th_anna",
      calendarId: "primary",
      apiRoot: f.emulator.rootUrl,
      auth: f.auth,
    });
    gateways.push(primary);
    const shared = await primary.sharing();
    expect(shared).toMatchObject({ calendarId: CALENDAR_ID });
    expect("rules" in shared && shared.rules.map((r) => r.id)).toEqual([`user:${SUBJECT}`, "default"]);

    f.emulator.createCalendar("boss@clinic.example", "boss@clinic.example");
    f.emulator.shareCalendar("boss@clinic.example", SUBJECT, "reader");
    const readerOnly = new CalendarGateway({
      therapistId: "th_x",
      calendarId: "boss@clinic.example",
      apiRoot: f.emulator.rootUrl,
      auth: f.auth,
    });
    gateways.push(readerOnly);
    const refused = await readerOnly.sharing();
    expect(refused).toMatchObject({ error: expect.stringMatching(/writer access/) });
  });
});

describe("calendarList.get", () => {
  it("answers the account's own role; a calendar not on its list answers 404 while calendars.get still reaches it", async () => {
    f = await setup();
    f.emulator.createCalendar("desk@clinic.example", "desk@clinic.example");
    f.emulator.shareCalendar("desk@clinic.example", SUBJECT, "reader");
    const reader = await f.api.calendarList.get({ calendarId: "desk@clinic.example" });
    expect(reader.data).toMatchObject({ kind: "calendar#calendarListEntry", accessRole: "reader" });
    f.emulator.shareCalendar("desk@clinic.example", SUBJECT, "writer");
    expect((await f.api.calendarList.get({ calendarId: "desk@clinic.example" })).data.accessRole).toBe("writer");
    expect((await f.api.calendarList.get({ calendarId: CALENDAR_ID })).data.accessRole).toBe("owner");

    f.emulator.removeFromCalendarList("desk@clinic.example", SUBJECT);
    expect(await refusal(f.api.calendarList.get({ calendarId: "desk@clinic.example" }))).toEqual({
      status: 404,
      reason: "notFound",
    });
    expect((await f.api.calendars.get({ calendarId: "desk@clinic.example" })).data.id).toBe("desk@clinic.example");
    // Not shared at all: 404 from both.
    f.emulator.createCalendar("boss@clinic.example", "boss@clinic.example");
    expect(await refusal(f.api.calendarList.get({ calendarId: "boss@clinic.example" }))).toEqual({
      status: 404,
      reason: "notFound",
    });
  });
});

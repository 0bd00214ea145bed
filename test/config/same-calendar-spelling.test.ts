// A calendar_id written another way for the same Google calendar is no re-point (review18): an address whose letters
// only change case (the schema itself takes A@X and a@x for one calendar), or an OAuth `primary` written as the
// account's own address once Google told which calendar `primary` is. The reload then deleted the sync token, read the
// calendar in full again and relocated every event from the calendar to itself.
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import { configChanges, describeChanges } from "../../src/config/changes.ts";
import { parseConfig } from "../../src/config/load.ts";
import { openStore } from "../../src/store/store.ts";
import { misplaced, sameCalendar } from "../../src/sync/placement.ts";
import { WatchedCalendars } from "../../src/sync/watched.ts";

const file = (cal: string, oauth = false) => `booking: { base_url: https://api.booking.example, api_key: k }
webhooks: { signing_secrets: [s] }
google:
  auth: { type: service_account, key_file: /k }
${oauth ? "  oauth: { client_id: c, client_secret: s }\n" : ""}therapists:
  - therapist_id: a
    calendar_id: ${cal}
${oauth ? "    auth: { type: oauth, refresh_token: r }\n" : "    impersonate: anna@clinic.example\n"}`;

describe("the same calendar written another way", () => {
  it("an address whose case changed: no re-point, the link is in place, the watch goes on", async () => {
    const before = parseConfig(file("Anna@Clinic.example"));
    const after = parseConfig(file("anna@clinic.example"));
    const changes = configChanges(before, after);
    expect(changes.repointed).toEqual([]);
    expect(changes.changed).toEqual([{ therapistId: "a", keys: ["calendar_id"] }]);
    expect(describeChanges(changes)).toBe("configuration reloaded: changed: a (calendar_id)");
    const link = { present: true, calendarId: "Anna@Clinic.example" } as never;
    expect(misplaced(link, after.therapists[0])).toBe(false);

    const clock = new ManualClock(1_000_000);
    const watched = new WatchedCalendars(await openStore("memory://"), clock);
    await watched.settle(before.therapists);
    await clock.advance(60_000);
    expect(await watched.settle(after.therapists)).toEqual([]);
  });

  it("OAuth `primary` → the account's own address: the same calendar when Google told what `primary` is", async () => {
    const before = parseConfig(file("primary", true));
    const after = parseConfig(file("anna@clinic.example", true));
    // Not told: another calendar as far as the names go (the relocation asks Google before deleting anything).
    expect(configChanges(before, after).repointed).toEqual([
      { therapistId: "a", from: "primary", to: "anna@clinic.example" },
    ]);
    const told = (was: { calendar_id: string }, now: { calendar_id: string }) =>
      was.calendar_id === "primary" && now.calendar_id === "anna@clinic.example";
    expect(configChanges(before, after, told).repointed).toEqual([]);
    // A link recorded on `primary` is in place when the mapping knows `primary` is this calendar.
    const t = after.therapists[0]!;
    expect(sameCalendar("primary", t)).toBe(false);
    expect(sameCalendar("primary", t, ["anna@clinic.example", "primary"])).toBe(true);
    // A link recorded on the address is in place once `primary` is resolved to it.
    expect(sameCalendar("Anna@clinic.example", before.therapists[0]!, ["anna@clinic.example"])).toBe(true);
  });
});

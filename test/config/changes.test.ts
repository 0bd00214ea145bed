// What a reloaded configuration changes (src/config/changes.ts): therapists added, removed, re-pointed (a new
// calendar_id, or a new delegated account behind `primary`) and otherwise changed; settings applied; settings only a
// restart takes up kept as they were; the one log line, which names paths and ids, never values.
import { describe, expect, it } from "vitest";
import { appliedConfig, configChanges, describeChanges } from "../../src/config/changes.ts";
import { type Config, ConfigSchema } from "../../src/config/schema.ts";
import { calendarKey, sameCalendar } from "../../src/sync/placement.ts";

const base: Config = ConfigSchema.parse({
  booking: { base_url: "https://booking.example", api_key: "key-1" },
  webhooks: { signing_secrets: ["whsec_1"] },
  google: { auth: { type: "service_account", key_file: "/sa.json" } },
  therapists: [
    { therapist_id: "th_anna", calendar_id: "anna@clinic.example", impersonate: "anna@clinic.example" },
    { therapist_id: "th_ben", calendar_id: "primary", impersonate: "ben@clinic.example" },
    { therapist_id: "th_cleo", calendar_id: "cleo@clinic.example", impersonate: "cleo@clinic.example" },
  ],
});

function edited(edit: (c: Config) => void): Config {
  const c = structuredClone(base);
  edit(c);
  return c;
}

describe("configuration changes", () => {
  it("sorts therapists into added, removed, re-pointed and changed", () => {
    const next = edited((c) => {
      c.therapists[0]!.calendar_id = "anna.sessions@clinic.example"; // re-pointed
      c.therapists[1]!.impersonate = "ben.new@clinic.example"; // primary of another account: re-pointed
      c.therapists[2]!.writeback = { cancel: false }; // changed
      c.therapists.push({ ...c.therapists[2]!, therapist_id: "th_dora", calendar_id: "dora@clinic.example" });
      c.therapists.splice(2, 1);
    });
    const changes = configChanges(base, next);
    expect(changes).toEqual({
      added: ["th_dora"],
      removed: ["th_cleo"],
      repointed: [
        { therapistId: "th_anna", from: "anna@clinic.example", to: "anna.sessions@clinic.example" },
        { therapistId: "th_ben", from: "ben@clinic.example", to: "ben.new@clinic.example" },
      ],
      changed: [{ therapistId: "th_ben", keys: ["impersonate"] }],
      settings: [],
      restartNeeded: [],
    });
  });

  it("applies settings and keeps the ones only a restart takes up, naming paths but never values", () => {
    const next = edited((c) => {
      c.sync.window.future_days = 30;
      c.sync.concurrency = 16;
      c.event.title = "{service_name}";
      c.webhooks.listen = "0.0.0.0:9999";
      c.booking.api_key = "key-2-secret";
      c.store.url = "redis://elsewhere:6379";
    });
    const changes = configChanges(base, next);
    expect(changes.settings).toEqual(["sync.window.future_days", "event.title"]);
    expect(changes.restartNeeded.sort()).toEqual(
      ["booking.api_key", "store.url", "sync.concurrency", "webhooks.listen"].sort(),
    );
    const applied = appliedConfig(base, next);
    expect(applied.sync.window.future_days).toBe(30);
    expect(applied.event.title).toBe("{service_name}");
    expect(applied.sync.concurrency).toBe(base.sync.concurrency);
    expect(applied.webhooks).toBe(base.webhooks);
    expect(applied.booking).toBe(base.booking);
    expect(applied.store).toBe(base.store);
    const line = describeChanges(changes);
    expect(line).toMatch(
      /^configuration reloaded: settings changed: sync\.window\.future_days, event\.title; needs a restart/,
    );
    expect(line).not.toContain("key-2-secret");
    expect(describeChanges(configChanges(base, structuredClone(base)))).toBe("configuration reloaded: nothing changed");
  });

  it("keeps every restart-only sync setting as it runs, so a later reload back to the running value needs no restart", () => {
    const next = edited((c) => {
      c.sync.max_concurrency = base.sync.max_concurrency * 2;
      c.sync.push_safety_poll_minutes = base.sync.push_safety_poll_minutes + 5;
      c.sync.calendar_full_listing_hours = base.sync.calendar_full_listing_hours + 1;
      c.sync.retry = { ...c.sync.retry, attempts: c.sync.retry.attempts + 1 };
    });
    expect(configChanges(base, next).restartNeeded.sort()).toEqual([
      "sync.calendar_full_listing_hours",
      "sync.max_concurrency",
      "sync.push_safety_poll_minutes",
      "sync.retry.attempts",
    ]);
    const live = appliedConfig(base, next);
    for (const key of [
      "max_concurrency",
      "push_safety_poll_minutes",
      "calendar_full_listing_hours",
      "retry",
    ] as const) {
      expect(live.sync[key]).toEqual(base.sync[key]);
    }
    expect(configChanges(live, structuredClone(base)).restartNeeded).toEqual([]);
  });

  it("names a delegated account's primary calendar by its address, and takes links of earlier builds as they were", () => {
    expect(calendarKey({ calendar_id: "primary", impersonate: "ben@clinic.example" })).toBe("ben@clinic.example");
    expect(calendarKey({ calendar_id: "primary" })).toBe("primary");
    const ben = { calendar_id: "primary", impersonate: "ben@clinic.example" };
    expect(sameCalendar("primary", ben)).toBe(true); // recorded by an earlier build
    expect(sameCalendar("ben@clinic.example", ben)).toBe(true);
    expect(sameCalendar("ben.old@clinic.example", ben)).toBe(false);
    expect(sameCalendar("", ben)).toBe(true);
  });
});

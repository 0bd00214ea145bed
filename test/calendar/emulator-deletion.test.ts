// Tests the emulator's deletions through googleapis: what a person deletes cannot be restored by id, an API deletion
// can; Undo and the Bin; purging; what listings and incremental syncs show of deleted events.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { body, CALENDAR_ID, expectGoogleError, type Fixture, setup } from "./helpers.ts";

let f: Fixture;
beforeEach(async () => {
  f = await setup();
});
afterEach(async () => {
  await f.close();
});

const calendarId = CALENDAR_ID;

async function insert(id: string, extra: object = {}) {
  return (await f.api.events.insert({ calendarId, requestBody: { ...body(id), id, ...extra } })).data;
}

describe("a person's deletion in the Calendar UI", () => {
  it("cannot be restored by update or patch (403 forbidden) nor re-inserted under its id (409)", async () => {
    await insert("person00001");
    f.emulator.userDelete(calendarId, "person00001");
    await expectGoogleError(
      f.api.events.update({
        calendarId,
        eventId: "person00001",
        requestBody: { ...body("back"), status: "confirmed" },
      }),
      403,
      "forbidden",
    );
    await expectGoogleError(
      f.api.events.patch({ calendarId, eventId: "person00001", requestBody: { status: "confirmed" } }),
      403,
      "forbidden",
    );
    await expectGoogleError(
      f.api.events.patch({ calendarId, eventId: "person00001", requestBody: { summary: "still deleted" } }),
      403,
      "forbidden",
    );
    await expectGoogleError(
      f.api.events.insert({ calendarId, requestBody: { ...body("again"), id: "person00001" } }),
      409,
      "duplicate",
    );
    await expectGoogleError(f.api.events.delete({ calendarId, eventId: "person00001" }), 410, "deleted");
    const got = await f.api.events.get({ calendarId, eventId: "person00001" });
    expect(got.data).toMatchObject({ status: "cancelled", summary: "person00001" }); // details stay for undeleting
    expect(f.emulator.counters.restores).toBe(0);
  });

  it("keeps the id unusable after the Bin is emptied, while an API-deleted id becomes free", async () => {
    await insert("person00002");
    await insert("apidel00002");
    f.emulator.userDelete(calendarId, "person00002");
    await f.api.events.delete({ calendarId, eventId: "apidel00002" });
    expect(f.emulator.purgeDeleted(calendarId)).toBe(2);
    await expectGoogleError(f.api.events.get({ calendarId, eventId: "person00002" }), 404, "notFound");
    await expectGoogleError(
      f.api.events.insert({ calendarId, requestBody: { ...body("again"), id: "person00002" } }),
      409,
      "duplicate",
    );
    expect((await f.api.events.insert({ calendarId, requestBody: { ...body("x"), id: "apidel00002" } })).status).toBe(
      200,
    );
  });

  it("is restorable under the kind switch (for tests of products that still rely on it)", async () => {
    await insert("person00003");
    f.emulator.userDelete(calendarId, "person00003");
    f.emulator.kind.restorePersonDeletions = true;
    const restored = await f.api.events.update({
      calendarId,
      eventId: "person00003",
      requestBody: { ...body("back"), status: "confirmed" },
    });
    expect(restored.data.status).toBe("confirmed");
    expect(f.emulator.counters.restores).toBe(1);
  });
});

describe("an API deletion", () => {
  it("is restored by an update with status confirmed, unless faults.refuseRestore", async () => {
    await insert("apidel00001");
    await f.api.events.delete({ calendarId, eventId: "apidel00001" });
    const back = await f.api.events.update({
      calendarId,
      eventId: "apidel00001",
      requestBody: { ...body("back"), status: "confirmed" },
    });
    expect(back.data.status).toBe("confirmed");
    await f.api.events.delete({ calendarId, eventId: "apidel00001" });
    f.emulator.faults.refuseRestore = true;
    await expectGoogleError(
      f.api.events.patch({ calendarId, eventId: "apidel00001", requestBody: { status: "confirmed" } }),
      403,
      "forbidden",
    );
  });
});

describe("Undo and the Bin", () => {
  it("Undo brings the event back with its extended properties, a new etag and updated, as a change in sync", async () => {
    const created = await insert("undo000001", { location: "Room 2" });
    const token = (await f.api.events.list({ calendarId })).data.nextSyncToken!;
    await new Promise((r) => setTimeout(r, 5));
    f.emulator.userDelete(calendarId, "undo000001");
    const deleted = f.emulator.event(calendarId, "undo000001")!;
    await new Promise((r) => setTimeout(r, 5));
    const undone = f.emulator.userUndoDelete(calendarId, "undo000001");
    expect(undone).toMatchObject({ status: "confirmed", location: "Room 2" });
    expect(undone.extendedProperties).toEqual(created.extendedProperties);
    expect(undone.etag).not.toBe(deleted.etag);
    expect(Date.parse(String(undone.updated))).toBeGreaterThan(Date.parse(String(deleted.updated)));
    const inc = await f.api.events.list({ calendarId, syncToken: token });
    expect(inc.data.items?.map((e) => [e.id, e.status])).toEqual([["undo000001", "confirmed"]]);
    // Live again: the API may change it as any other event.
    const patched = await f.api.events.patch({ calendarId, eventId: "undo000001", requestBody: { summary: "ok" } });
    expect(patched.data.summary).toBe("ok");
    expect(f.emulator.counters.undos).toBe(1);
  });

  it("Undo applies only to a person's deletion", async () => {
    await insert("undo000002");
    await f.api.events.delete({ calendarId, eventId: "undo000002" });
    expect(() => f.emulator.userUndoDelete(calendarId, "undo000002")).toThrow(/not deleted by a person/);
    expect(() => f.emulator.userUndoDelete(calendarId, "neverthere1")).toThrow(/no such event/);
  });

  it("restores from the Bin within 30 days, not after the Bin was emptied", async () => {
    await insert("bin0000001");
    await insert("bin0000002");
    f.emulator.userDelete(calendarId, "bin0000001");
    f.emulator.userDelete(calendarId, "bin0000002");
    const restored = f.emulator.userRestoreFromBin(calendarId, "bin0000001");
    expect(restored).toMatchObject({ status: "confirmed", summary: "bin0000001" });
    expect(() => f.emulator.userRestoreFromBin(calendarId, "bin0000001")).toThrow(/not deleted/);
    f.emulator.purgeDeleted(calendarId);
    expect(() => f.emulator.userRestoreFromBin(calendarId, "bin0000002")).toThrow(/purged/);
    expect(f.emulator.counters.binRestores).toBe(1);
  });
});

describe("deleted events in listings", () => {
  it("incremental sync shows a deletion with only id, etag and status; showDeleted shows the details", async () => {
    await insert("gone000002", { location: "Room 1" });
    const token = (await f.api.events.list({ calendarId })).data.nextSyncToken!;
    f.emulator.userDelete(calendarId, "gone000002");
    const inc = await f.api.events.list({ calendarId, syncToken: token });
    const [item] = inc.data.items!;
    expect(Object.keys(item!).sort()).toEqual(["etag", "id", "kind", "status"]);
    expect(item).toMatchObject({ id: "gone000002", status: "cancelled" });
    const withDetails = await f.api.events.list({ calendarId, syncToken: token, showDeleted: true });
    expect(withDetails.data.items?.[0]).toMatchObject({ status: "cancelled", location: "Room 1" });
    const full = await f.api.events.list({ calendarId, showDeleted: true });
    expect(full.data.items?.[0]?.extendedProperties?.private).toEqual({ calbridge_managed: "1" });
  });

  it("updatedMin lists deleted events too (without details unless showDeleted)", async () => {
    await insert("upd0000001");
    const since = new Date(Date.now() - 60_000).toISOString();
    f.emulator.userDelete(calendarId, "upd0000001");
    const listed = await f.api.events.list({ calendarId, updatedMin: since });
    expect(listed.data.items?.map((e) => [e.id, e.status, e.summary])).toEqual([
      ["upd0000001", "cancelled", undefined],
    ]);
    expect((await f.api.events.list({ calendarId })).data.items).toEqual([]);
  });
});

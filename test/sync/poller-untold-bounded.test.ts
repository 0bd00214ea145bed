// An untold calendar change holds its calendar's sync token for a bounded number of polls (review25). An appointment
// cancelled in the booking service: calbridge deletes its event and saves the link (present: false) and its event-index
// entry, and that index write is torn. The deleted event carries no mark, so its appointment cannot be told; nothing
// ever rewrites the entry (the link is final, the reconciliation has nothing to save). The token was held for ever:
// every poll re-read every change since (1, 2, 3, 4, ...) with a warn each poll. Now it is held HELD_POLLS polls, then
// the change is given up to the reconciliation (said once) and the token advanced.
import sqlite3 from "sqlite3";
import { afterEach, expect, it } from "vitest";
import { HELD_POLLS } from "../../src/sync/untold-holds.ts";
import { captureLog } from "../support/log-capture.ts";
import { type Harness, mirrored, quiet, twoWay } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** Truncates a stored row's text, as a torn write leaves it. */
function damage(path: string, table: string, key: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const db = new sqlite3.Database(path, (err) => {
      if (err) return reject(err);
      db.configure("busyTimeout", 5000);
      db.run(`UPDATE ${table} SET value = substr(value, 1, 40) WHERE key = ?`, [`${table}:${key}`], function (e) {
        const changed = this?.changes;
        db.close(() => (e ? reject(e) : changed === 1 ? resolve() : reject(new Error("no row"))));
      });
    });
  });
}
const storePath = (x: Harness) => x.world.config.store.url.slice("sqlite://".length);
const token = (x: Harness) => x.app.store.table<string>("tokens").get("th_1");

it("a cancelled appointment's torn index entry holds the sync token a few polls, then it is advanced", async () => {
  const log = captureLog("info");
  h = await twoWay({}, log.logger);
  const gone = await mirrored(h);
  const rounds = HELD_POLLS + 3;
  const others = [];
  for (let i = 0; i < rounds; i++) others.push(await mirrored(h));
  const before = await token(h);

  // Cancelled at the booking service: calbridge deletes the event and saves the link and the index; that write torn.
  h.world.booking.cancel(gone.id);
  await quiet(h);
  expect(h.world.google.event(gone.cal, gone.eventId)?.status).toBe("cancelled");
  await damage(storePath(h), "eventindex", gone.eventId);

  const counts: number[] = [];
  const tokens: (string | undefined)[] = [];
  for (let round = 0; round < rounds; round++) {
    // The therapist keeps working in the calendar: each round one more change.
    const later = (ms: number) => ({ dateTime: new Date(ms).toISOString() });
    const other = others[round]!;
    h.world.google.userEdit(other.cal, other.eventId, {
      start: later(other.start + 3_600_000),
      end: later(other.start + 2 * 3_600_000),
    });
    await h.app.reconcile(); // has nothing to save for the cancelled appointment: the entry stays damaged
    await h.app.engine.idle();
    const r = await h.app.poller.poll("th_1");
    await h.app.engine.idle();
    counts.push(r.changes + r.echoes);
    tokens.push(await token(h));
  }
  // Held HELD_POLLS polls (each re-reads the changes since), given up at the next: then one change a poll again.
  const held = Array.from({ length: HELD_POLLS + 1 }, (_, i) => i + 1);
  expect(counts).toEqual([...held, 1, 1]);
  expect(tokens.slice(0, HELD_POLLS)).toEqual(Array(HELD_POLLS).fill(before));
  expect(tokens[HELD_POLLS]).not.toBe(before);
  expect(new Set(tokens.slice(HELD_POLLS)).size).toBe(rounds - HELD_POLLS);

  // Warned each poll it was held, then once that it was given up, with what to do about the record.
  const warns = log.lines.filter((l) => l["table"] === "eventindex" && l["level"] === 40).map((l) => String(l["msg"]));
  expect(warns).toHaveLength(HELD_POLLS + 1);
  for (const w of warns.slice(0, HELD_POLLS)) expect(w).toContain("the calendar's sync token is not advanced past it");
  expect(warns[HELD_POLLS]).toContain("given up to the reconciliation");
  expect(warns[HELD_POLLS]).toContain("restore the record from a backup or remove it");
  // Nothing sent for the deletion: the appointment stays cancelled.
  expect(h.world.booking.get(gone.id)?.status).toBe("cancelled");
});

// Owns what a person does in Google Calendar's UI, as test controls: edit, create, delete, Undo, restore from the Bin,
// "Change calendar". No access checks, and everything a person may change (conference data, attachments included).
import { UI_SUPPORT } from "./event-fields.ts";
import { type EventRecord, mergePatch, validateEvent, writableBody } from "./event-model.ts";
import type { CalendarRecord, CalendarStore } from "./store.ts";

const BIN_DAYS = 30;

/** The UI always writes a series with the calendar's zone; the API insists on one (event-model.ts). */
function withSeriesZone(body: Record<string, unknown>, cal: CalendarRecord): Record<string, unknown> {
  if (body.recurrence === undefined) return body;
  const start = body.start as { dateTime?: string; timeZone?: string } | undefined;
  const end = body.end as { dateTime?: string; timeZone?: string } | undefined;
  if (!start?.dateTime || start.timeZone) return body;
  return {
    ...body,
    start: { ...start, timeZone: cal.timeZone },
    ...(end?.dateTime && !end.timeZone ? { end: { ...end, timeZone: cal.timeZone } } : {}),
  };
}

function live(rec: EventRecord, what: string): EventRecord {
  if (rec.status === "cancelled") throw new Error(`emulator: ${what} ${rec.id}: the event is deleted`);
  return rec;
}

export class PersonActions {
  readonly #store: CalendarStore;

  constructor(store: CalendarStore) {
    this.#store = store;
  }

  /** An edit in the UI (patch semantics); editing one instance of a series makes it an exception. */
  edit(cal: CalendarRecord, eventId: string, changes: Record<string, unknown>): EventRecord {
    const rec = live(this.#store.get(cal, eventId), "userEdit");
    const merged = withSeriesZone(mergePatch(writableBody(rec, cal.timeZone), changes), cal);
    const v = validateEvent(merged, cal.timeZone);
    this.#store.apply(this.#store.writable(cal, rec), v, rec.status);
    this.#store.counters.userEdits += 1;
    return rec;
  }

  insert(cal: CalendarRecord, body: Record<string, unknown>): EventRecord {
    const rec = this.#store.insert(cal, withSeriesZone(body, cal), UI_SUPPORT);
    this.#store.counters.inserts -= 1;
    this.#store.counters.userEdits += 1;
    return rec;
  }

  /** Deleting in the UI; one instance of a series becomes a cancelled exception, the master takes the series. */
  delete(cal: CalendarRecord, eventId: string): void {
    const rec = this.#store.get(cal, eventId);
    if (rec.status === "cancelled") return;
    this.#store.markDeleted(this.#store.writable(cal, rec), "person");
    this.#store.counters.userEdits += 1;
  }

  /**
   * Undo (the snackbar right after a deletion) and restore from the Bin (within 30 days) bring the event back as it
   * was: live, with a new etag and `updated`, so an incremental sync reports it as a change. It keeps its extended
   * properties: sync tools that find their events by them recognise a restored event as theirs again
   * (phw198/OutlookGoogleCalendarSync #2022: events restored from the Google Calendar trash are deleted again by the
   * next sync; #1194 the same), and OGCS finds its events by the Outlook ids it keeps in their extended properties
   * (its CustomProperty class).
   */
  undoDelete(cal: CalendarRecord, eventId: string): EventRecord {
    const rec = this.#deleted(cal, eventId, "userUndoDelete");
    if (rec.deletedBy !== "person") throw new Error(`emulator: userUndoDelete ${eventId}: not deleted by a person`);
    this.#bringBack(rec);
    this.#store.counters.undos += 1;
    return rec;
  }

  restoreFromBin(cal: CalendarRecord, eventId: string): EventRecord {
    const rec = this.#deleted(cal, eventId, "userRestoreFromBin");
    if ((rec.deletedAt ?? 0) + BIN_DAYS * 86_400_000 < this.#store.clock.now()) {
      throw new Error(`emulator: userRestoreFromBin ${eventId}: deleted more than ${BIN_DAYS} days ago`);
    }
    this.#bringBack(rec);
    this.#store.counters.binRestores += 1;
    return rec;
  }

  /**
   * "This and following events" on an occurrence of a series: the series ends before it (UNTIL), and a new series goes
   * on from it with the change, under an id Google makes of the old one (`<id>_R<yyyymmddThhmmss>`), keeping the
   * fields, extended properties included. The tail has another recurringEventId (googleapis/google-api-php-client
   * #2009); the `_R` ids and the old occurrences left behind by a split (odoo/odoo #120798, #287171). A COUNT is
   * dropped from the tail: it goes on without end, the harder case for a sync.
   */
  splitSeries(cal: CalendarRecord, masterId: string, fromMs: number, changes: Record<string, unknown>): EventRecord {
    const master = live(this.#store.get(cal, masterId), "userSplitSeries");
    const rule = master.fields.recurrence as string[] | undefined;
    if (master.recurringEventId !== undefined || !rule?.[0]) {
      throw new Error(`emulator: userSplitSeries ${masterId}: not a series`);
    }
    const line = rule[0].replace(/;(COUNT|UNTIL)=[^;]*/gi, "");
    const stamp = (ms: number) =>
      new Date(ms)
        .toISOString()
        .replace(/[-:]/g, "")
        .replace(/\.\d{3}/, "");
    const body = writableBody(master, cal.timeZone);
    const duration = master.end.ms - master.start.ms;
    const at = (ms: number, time: unknown) => ({ ...(time as object), dateTime: new Date(ms).toISOString() });
    this.edit(cal, masterId, { recurrence: [`${line};UNTIL=${stamp(fromMs - 1000)}`] });
    const tail = mergePatch(
      { ...body, recurrence: [line], start: at(fromMs, body.start), end: at(fromMs + duration, body.end) },
      changes,
    );
    const rec = this.#store.insert(cal, withSeriesZone(tail, cal), UI_SUPPORT, `${masterId}_R${stamp(fromMs)}`);
    this.#store.counters.inserts -= 1;
    this.#store.counters.userEdits += 1;
    return rec;
  }

  /** "Change calendar" in the UI is events.move (store.move says what Google does). */
  move(from: CalendarRecord, eventId: string, to: CalendarRecord): EventRecord {
    const rec = this.#store.move(from, eventId, to);
    this.#store.counters.userEdits += 1;
    return rec;
  }

  #deleted(cal: CalendarRecord, eventId: string, what: string): EventRecord {
    const rec = cal.events.get(eventId);
    if (!rec) throw new Error(`emulator: ${what} ${eventId}: no such event (purged from the Bin?)`);
    if (rec.status !== "cancelled" || rec.movedAway) throw new Error(`emulator: ${what} ${eventId}: not deleted`);
    return rec;
  }

  #bringBack(rec: EventRecord): void {
    rec.status = "confirmed";
    delete rec.deletedBy;
    delete rec.deletedAt;
    this.#store.bump(rec);
    this.#store.copiesFollow(rec);
  }
}

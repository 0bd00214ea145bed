// Owns what a person does in Google Calendar's UI, as test controls: edit, create, delete, Undo, restore from the Bin,
// "Change calendar". No access checks, and everything a person may change (conference data, attachments included).
import { UI_SUPPORT } from "./event-fields.ts";
import { type EventRecord, mergePatch, validateEvent, writableBody } from "./event-model.ts";
import type { CalendarRecord, CalendarStore } from "./store.ts";
import type { ParsedTime } from "./time.ts";

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

type TimeChange = { date?: unknown; dateTime?: unknown; timeZone?: unknown };

/**
 * The UI writes an edit's start and end whole, as uiTimes makes them (an API patch merges them field by field,
 * event-model.ts mergePatch): the "All day" toggle turns a time into a date, which a field-by-field merge would leave
 * beside the dateTime.
 */
const UI_TIMES = ["start", "end"] as const;

/**
 * The start and end of an edit in the UI, as the UI writes them. Dragging an event, or typing another time, changes its
 * time and not its time zone: the zone belongs to each end of the event (EventDateTime.timeZone, Google's Events
 * reference: "For single events this field is optional and indicates a custom time zone for the event start/end"), it
 * is shown converted to each viewer's zone (Google Workspace Admin Help 1051749, "Manage multiple time zones": "an
 * event created in California at 1:00pm Pacific Standard Time will show up on your calendar at 4:00pm"), and it is set
 * with the event's own time zone setting in the editor (its "Time zone" control). Google's API keeps it the same way: a
 * patch of start.dateTime alone keeps the other fields of start (googleapis/google-api-dotnet-client #740 and
 * google-api-nodejs-client #1559: turning an all-day event into a timed one needs `date: null`, as "Google stores the
 * previous date and dateTime", odoo/odoo #177549). So, for `current` (the event's start and end before the edit):
 * - a time given without timeZone keeps the zone of its end, and a wall time without offset is read in it, as the
 *   editor shows it; an end without a zone of its own (an event written with offsets only) is left without one (what
 *   the UI writes for such an event is not reported);
 * - a timeZone given is the person's pick in the "Time zone" control, the explicit way for a test to change the zone.
 *   The control is one for the event: while the two ends share a zone, an end given without timeZone (or not given: it
 *   keeps its instant) takes the zone picked for the other. Ends with zones of their own stay apart. The UI has no way
 *   to take a zone away: timeZone null is refused;
 * - the "All day" toggle: dates at both ends, which carry no zone (EventDateTime.date, "if this is an all-day event"),
 *   and times at both ends again, read in and kept with the calendar's zone (what a timed event made in the UI gets:
 *   "new appointments default to whichever time zone your calendar is set to at that moment", a user's report on
 *   selfishmom.com, "How to wrangle your google calendar for a trip to another time zone", 2011; the person's own zone
 *   is the calendar's here, as for a series above). The times themselves are the test's: the UI's choice of times when
 *   the box is unticked is not reported. One end alone is refused: the toggle turns both, and Google's API refuses the
 *   mix too ("Start and end times must either both be date or both be dateTime.", phw198/OutlookGoogleCalendarSync
 *   #844).
 * A drag moves both ends, and the tests give both. Whether a drag across a daylight-saving change keeps the event's
 * wall-clock length or its real one is unverified: the one report (fullcalendar/fullcalendar #3887, 2017) says only
 * that Google draws such a day like any other and reads a time in the skipped hour an hour on (localToInstant does the
 * same), so a one-hour event there "suddenly shows two hours". No end is derived here: a start given alone changes the
 * start alone, and instants are taken as given.
 */
export function uiTimes(
  current: { start: ParsedTime; end: ParsedTime },
  changes: Record<string, unknown>,
  calendarZone: string,
  what: string,
): Record<string, unknown> {
  const given = {
    start: changes.start as TimeChange | null | undefined,
    end: changes.end as TimeChange | null | undefined,
  };
  if (!given.start && !given.end) return changes;
  for (const t of [given.start, given.end]) {
    if (t && typeof t === "object" && "timeZone" in t && t.timeZone === null) {
      throw new Error(`emulator: ${what}: the UI has no way to take an event's time zone away (pick another one)`);
    }
  }
  const picked = (t: TimeChange | null | undefined) => (typeof t?.timeZone === "string" ? t.timeZone : undefined);
  const oneControl = current.start.stored.timeZone === current.end.stored.timeZone;
  const control = oneControl ? (picked(given.start) ?? picked(given.end)) : undefined;
  const out: Record<string, unknown> = { ...changes };
  for (const which of ["start", "end"] as const) {
    const t = given[which];
    const was = current[which];
    if (t === undefined) {
      // The other end's pick in the one "Time zone" control: this end keeps its instant, shown in the zone picked.
      if (control && !was.allDay && control !== was.stored.timeZone) {
        out[which] = { dateTime: new Date(was.ms).toISOString(), timeZone: control };
      }
      continue;
    }
    if (!t || typeof t !== "object" || t.dateTime === undefined || t.timeZone !== undefined) continue;
    const zone = control ?? (was.allDay ? calendarZone : was.stored.timeZone);
    if (zone) out[which] = { ...t, timeZone: zone };
  }
  const allDay = (which: "start" | "end") => {
    const t = out[which] as TimeChange | null | undefined;
    return t === undefined ? current[which].allDay : t !== null && typeof t === "object" && t.dateTime === undefined;
  };
  if (allDay("start") !== allDay("end")) {
    throw new Error(`emulator: ${what}: the UI turns both ends to all day, or both back to times, not one end`);
  }
  return out;
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
    const times = uiTimes(rec, changes, cal.timeZone, `userEdit ${eventId}`);
    const merged = withSeriesZone(mergePatch(writableBody(rec, cal.timeZone), times, UI_TIMES), cal);
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
    // The tail's times are the occurrence's, with the series' zones (a change of time keeps them, as in edit()).
    const occurrence = { start: { ...master.start, ms: fromMs }, end: { ...master.end, ms: fromMs + duration } };
    const times = uiTimes(occurrence, changes, cal.timeZone, `userSplitSeries ${masterId}`);
    this.edit(cal, masterId, { recurrence: [`${line};UNTIL=${stamp(fromMs - 1000)}`] });
    const tail = mergePatch(
      { ...body, recurrence: [line], start: at(fromMs, body.start), end: at(fromMs + duration, body.end) },
      times,
      UI_TIMES,
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

// Owns the emulator's calendars and events: access, id rules, etags, API writes, deletion as "cancelled" (and who
// deleted), events.move, change history and sync tokens.
import { randomBytes } from "node:crypto";
import type { Clock } from "../../clock.ts";
import type { ScopeRule } from "./acl.ts";
import { dropUnsupported, readReminders, type WriteSupport } from "./event-fields.ts";
import { type EventRecord, mergePatch, type ValidatedEvent, validateEvent, writableBody } from "./event-model.ts";
import { ApiError } from "./http.ts";
import { checkGuestWrite, declined, mayHaveCopies, propagate } from "./invitations.ts";
import { findInstance } from "./series.ts";

export type AccessRole = "owner" | "writer" | "reader";

export interface CalendarRecord {
  id: string;
  owner: string;
  summary: string;
  timeZone: string;
  acl: Map<string, AccessRole>;
  /** Sharing beyond single users (public, a domain, a group), by rule id; not used for access (acl.list shows it). */
  scopes: Map<string, ScopeRule>;
  /** Users with access whose calendar list does not show the calendar: calendarList.get answers them 404. */
  unlisted: Set<string>;
  /** Events by id; exceptions of a series are stored under their instance id. */
  events: Map<string, EventRecord>;
  /** Ids of events a person deleted that were purged since: Google keeps them unusable. */
  reservedIds: Set<string>;
  /** Bumped by invalidateSyncTokens: older tokens answer 410. */
  tokenEpoch: number;
  /** Stable push resource id of this calendar's events collection. */
  resourceId: string;
}

export interface WriteCounters {
  inserts: number;
  updates: number;
  patches: number;
  deletes: number;
  moves: number;
  /** API writes that brought a deleted event back. */
  restores: number;
  /** What people did in Google's UI: edits, own events, deletions, moves. */
  userEdits: number;
  undos: number;
  binRestores: number;
  /** Writes that would have e-mailed attendees (sendUpdates other than "none" with attendees present). */
  emailsSent: number;
}

/** Kind behaviour a test can opt back into (each one is something real Google does not do). */
export interface KindSwitches {
  /**
   * Let an API update bring back an event a person deleted in the UI, or the entry a move left behind (Google answers
   * 403 to the first; the second is no event of that calendar any more).
   */
  restorePersonDeletions: boolean;
}

const VALID_ID = /^[a-v0-9]{5,1024}$/;
const MAX_SYNC_TOKENS = 20_000;
const ETAG_BASE = 3_181_161_784_712_000;
const BASE32HEX = "0123456789abcdefghijklmnopqrstuv";

function randomEventId(): string {
  return [...randomBytes(26)].map((b) => BASE32HEX[b & 31]).join("");
}

/** The event's data apart from reminders: Google's `updated` follows only this. */
function mainData(rec: { fields: Record<string, unknown>; start: EventRecord["start"]; end: EventRecord["end"] }) {
  const { reminders: _, ...rest } = rec.fields;
  return JSON.stringify([rest, rec.start, rec.end]);
}

export class CalendarStore {
  readonly calendars = new Map<string, CalendarRecord>();
  readonly counters: WriteCounters = {
    inserts: 0,
    updates: 0,
    patches: 0,
    deletes: 0,
    moves: 0,
    restores: 0,
    userEdits: 0,
    undos: 0,
    binRestores: 0,
    emailsSent: 0,
  };
  readonly kind: KindSwitches = { restorePersonDeletions: false };
  readonly clock: Clock;
  /** Calendars whose guests' copies changed (invitations.ts), for their push notifications; drained by the server. */
  readonly touched = new Set<string>();
  readonly #syncTokens = new Map<string, { calendarId: string; seq: number; epoch: number; singleEvents: boolean }>();
  #seq = 0;

  constructor(clock: Clock) {
    this.clock = clock;
  }

  get seq(): number {
    return this.#seq;
  }

  createCalendar(id: string, owner: string, options: { summary?: string; timeZone?: string } = {}): CalendarRecord {
    const existing = this.calendars.get(id);
    if (existing) return existing;
    const cal: CalendarRecord = {
      id,
      owner,
      summary: options.summary ?? id,
      timeZone: options.timeZone ?? "UTC",
      acl: new Map([[owner, "owner"]]),
      scopes: new Map(),
      unlisted: new Set(),
      events: new Map(),
      reservedIds: new Set(),
      tokenEpoch: 0,
      resourceId: randomBytes(12).toString("base64url"),
    };
    this.calendars.set(id, cal);
    return cal;
  }

  /** The calendar `idParam` names for `subject` ("primary": the subject's own, created on first use). 404 if not shared. */
  resolve(idParam: string, subject: string, need: "read" | "write"): CalendarRecord {
    const cal = idParam === "primary" ? this.createCalendar(subject, subject) : this.calendars.get(idParam);
    const role = cal?.acl.get(subject);
    if (!cal || !role) throw new ApiError(404, "notFound");
    if (need === "write" && role === "reader") {
      throw new ApiError(403, "requiredAccessLevel", "You need to have writer access to this calendar.");
    }
    return cal;
  }

  /** A change: new etag, a new place in the history, and (unless only reminders changed) a new `updated`. */
  bump(rec: EventRecord, options: { keepUpdated?: boolean } = {}): void {
    this.#seq += 1;
    rec.seq = this.#seq;
    if (!options.keepUpdated) rec.updated = Math.max(this.clock.now(), rec.updated);
    rec.etag = `"${ETAG_BASE + this.#seq * 1000}"`;
  }

  /**
   * After a change of `rec`: the guests' copies of an organizer's event follow it; a guest's copy deleted declines the
   * invitation (invitations.ts).
   */
  copiesFollow(rec: EventRecord): void {
    if (rec.invitedFrom !== undefined) {
      if (rec.status !== "cancelled" || rec.declined || rec.home === undefined) return;
      const organizer = declined(this, rec, rec.home);
      if (organizer) this.copiesFollow(organizer);
      return;
    }
    if (!mayHaveCopies(rec)) return;
    for (const id of propagate(this, rec)) this.touched.add(id);
  }

  /** The event or instance `eventId` (an instance of a series is built on the fly); 404 when there is none. */
  get(cal: CalendarRecord, eventId: string): EventRecord {
    const rec = findInstance(cal, eventId);
    if (!rec) throw new ApiError(404, "notFound");
    return rec;
  }

  /** Keeps `rec` (from get) stored: an instance not changed before becomes a stored exception of its series. */
  writable(cal: CalendarRecord, rec: EventRecord): EventRecord {
    if (cal.events.get(rec.id) !== rec) cal.events.set(rec.id, rec);
    rec.home = cal.id;
    return rec;
  }

  #checkEtag(rec: EventRecord, ifMatch: string | undefined): void {
    if (ifMatch !== undefined && ifMatch !== "*" && ifMatch !== rec.etag) {
      throw new ApiError(412, "conditionNotMet", undefined, { locationType: "header", location: "If-Match" });
    }
  }

  /**
   * An update or patch of a deleted event. One a person deleted in Google's UI cannot be brought back by the API:
   * update answers 403 (googleapis/google-api-ruby-client #1811: "tried to do an #update_event call using the same ID,
   * but got a 403 forbidden error"; google-api-python-client #846 the same after insert's 409), with Google's generic
   * reason "forbidden" (phw198/OutlookGoogleCalendarSync #361 shows its body). One deleted by events.delete is restored
   * by an update with status "confirmed" (the project's notes). The entry a move left behind is no event to restore.
   */
  #guardDeleted(rec: EventRecord): void {
    if (rec.status !== "cancelled" || this.kind.restorePersonDeletions) return;
    if (rec.movedAway || rec.deletedBy === "person") throw new ApiError(403, "forbidden", "Forbidden");
  }

  /** `googleId`: an id Google makes itself (a split series' `<id>_R<time>`), outside what a client may choose. */
  insert(cal: CalendarRecord, body: Record<string, unknown>, support: WriteSupport, googleId?: string): EventRecord {
    if (body.id !== undefined && body.iCalUID !== undefined) {
      throw new ApiError(400, "invalid", "Specify either id or iCalUID, not both.");
    }
    const id = googleId ?? (body.id === undefined ? randomEventId() : String(body.id));
    if (googleId === undefined && !VALID_ID.test(id)) throw new ApiError(400, "invalid", "Invalid resource id value.");
    // An id a person deleted stays taken even after the Bin is emptied (taers232c/GAMADV-X #82: "you are still not able
    // to create an event with an ID, purge it and create another event with the same ID").
    if (cal.events.has(id) || cal.reservedIds.has(id)) throw new ApiError(409, "duplicate");
    const v = validateEvent(dropUnsupported(body, support), cal.timeZone);
    const now = this.clock.now();
    const rec: EventRecord = {
      id,
      fields: v.fields,
      start: v.start,
      end: v.end,
      status: v.status ?? "confirmed",
      created: now,
      updated: now,
      etag: "",
      seq: 0,
      sequence: 0,
      eventType: v.eventType ?? "default",
    };
    this.bump(rec);
    rec.createdSeq = rec.seq;
    rec.home = cal.id;
    cal.events.set(id, rec);
    this.counters.inserts += 1;
    this.copiesFollow(rec);
    return rec;
  }

  /** Writes a validated body over the record; `updated` stays when only reminders changed (Event.updated). */
  apply(rec: EventRecord, v: ValidatedEvent, statusDefault: string): void {
    if (v.eventType !== undefined && v.eventType !== rec.eventType) {
      throw new ApiError(400, "invalid", "The event type cannot be changed after the event is created.");
    }
    const moved = v.start.ms !== rec.start.ms || v.end.ms !== rec.end.ms;
    const wasCancelled = rec.status === "cancelled";
    const status = v.status ?? statusDefault;
    const mainChanged = mainData(rec) !== mainData(v) || status !== rec.status;
    const remindersChanged =
      JSON.stringify(readReminders(rec.fields.reminders, rec.start.allDay)) !==
      JSON.stringify(readReminders(v.fields.reminders, v.start.allDay));
    const shape = { recurrence: rec.fields.recurrence, start: rec.start, end: rec.end };
    const reshaped =
      rec.recurringEventId === undefined &&
      (shape.recurrence !== undefined || v.fields.recurrence !== undefined) &&
      JSON.stringify(shape) !== JSON.stringify({ recurrence: v.fields.recurrence, start: v.start, end: v.end });
    rec.fields = v.fields;
    rec.start = v.start;
    rec.end = v.end;
    rec.status = status;
    if (moved) rec.sequence += 1;
    if (wasCancelled && status !== "cancelled") {
      delete rec.deletedBy;
      delete rec.deletedAt;
      delete rec.movedAway;
    }
    this.bump(rec, { keepUpdated: remindersChanged && !mainChanged });
    // Exceptions stored before stay as they are, also those the new rule no longer has: Google removes none when a
    // series' rule changes (BuilderIO/agent-native #3488 met it, and deletes them itself).
    if (reshaped) rec.shapes = [...(rec.shapes ?? []), { until: rec.seq, ...shape }];
    this.copiesFollow(rec);
  }

  /**
   * PUT: replaces every writable field (what the body leaves out is removed), except conference data and attachments
   * when the request does not declare support for them (Google then ignores them, see event-fields.ts). A body without
   * status keeps the current status (a deleted event stays deleted).
   */
  update(
    cal: CalendarRecord,
    eventId: string,
    body: Record<string, unknown>,
    ifMatch: string | undefined,
    support: WriteSupport,
  ): EventRecord {
    const rec = this.#toWrite(cal, eventId, ifMatch);
    const full = dropUnsupported(body, support);
    if (!support.attachments && rec.fields.attachments !== undefined) full.attachments = rec.fields.attachments;
    if (!support.conferenceData && rec.fields.conferenceData !== undefined) {
      full.conferenceData = rec.fields.conferenceData;
    }
    this.#rewrite(cal, rec, validateEvent(full, cal.timeZone));
    this.counters.updates += 1;
    return rec;
  }

  /**
   * PATCH (Google's reference: "Fields that you don't specify in the request remain unchanged. Array fields, if
   * specified, overwrite the existing arrays"): objects merge per key, so extendedProperties.private/shared merge
   * per property and a property set to null is deleted (Google's extended-properties guide), and start and end merge
   * per field too (event-model.ts mergePatch): a new dateTime keeps the stored timeZone, and turning an all-day event
   * into a timed one (or back) needs the other field sent as null.
   */
  patch(
    cal: CalendarRecord,
    eventId: string,
    body: Record<string, unknown>,
    ifMatch: string | undefined,
    support: WriteSupport,
  ): EventRecord {
    const rec = this.#toWrite(cal, eventId, ifMatch);
    const merged = mergePatch(writableBody(rec, cal.timeZone), dropUnsupported(body, support));
    this.#rewrite(cal, rec, validateEvent(merged, cal.timeZone));
    this.counters.patches += 1;
    return rec;
  }

  /** The event an update or patch may write: a person's deletion and a stale etag refuse it. */
  #toWrite(cal: CalendarRecord, eventId: string, ifMatch: string | undefined): EventRecord {
    const rec = this.get(cal, eventId);
    this.#guardDeleted(rec);
    this.#checkEtag(rec, ifMatch);
    return rec;
  }

  /** Writes a validated body over the event (a cancelled one brought back counts as a restore). */
  #rewrite(cal: CalendarRecord, rec: EventRecord, v: ReturnType<typeof validateEvent>): void {
    if (rec.invitedFrom !== undefined) checkGuestWrite(rec, v, rec.status);
    const wasCancelled = rec.status === "cancelled";
    this.apply(this.writable(cal, rec), v, rec.status);
    if (wasCancelled && rec.status !== "cancelled") this.counters.restores += 1;
  }

  /** Marks the event cancelled (it stays stored); a second delete answers 410 deleted. */
  delete(cal: CalendarRecord, eventId: string, ifMatch?: string): void {
    const rec = this.get(cal, eventId);
    if (rec.status === "cancelled") throw new ApiError(410, "deleted");
    this.#checkEtag(rec, ifMatch);
    this.markDeleted(this.writable(cal, rec), "api");
    this.counters.deletes += 1;
  }

  markDeleted(rec: EventRecord, by: "person" | "api"): void {
    rec.status = "cancelled";
    rec.deletedBy = by;
    rec.deletedAt = this.clock.now();
    this.bump(rec);
    this.copiesFollow(rec);
  }

  /**
   * events.move: the event leaves `from` and appears in `to` under the same id (the organizer changes). Google's
   * reference: "only default events can be moved"; an instance cannot be moved on its own (reason
   * cannotChangeOrganizerOfInstance; both reasons are in GAM's list of Calendar errors). The source keeps a cancelled
   * entry "where only the id field is guaranteed to be populated" (Event.status).
   */
  move(from: CalendarRecord, eventId: string, to: CalendarRecord): EventRecord {
    const rec = this.get(from, eventId);
    if (rec.recurringEventId !== undefined) throw new ApiError(400, "cannotChangeOrganizerOfInstance");
    if (rec.status === "cancelled") throw new ApiError(410, "deleted");
    if (rec.eventType !== "default") throw new ApiError(400, "eventTypeRestriction");
    // Only the organizer moves an event (a guest's copy is theirs to answer, not to move).
    if (rec.invitedFrom !== undefined) throw new ApiError(403, "forbiddenForNonOrganizer");
    if (from === to) return rec;
    if (to.events.has(rec.id) || to.reservedIds.has(rec.id)) throw new ApiError(409, "duplicate");
    const moved: EventRecord = { ...rec, fields: structuredClone(rec.fields) };
    delete moved.shapes;
    this.bump(moved);
    moved.createdSeq = moved.seq;
    moved.home = to.id;
    to.events.set(moved.id, moved);
    for (const [id, other] of from.events) {
      if (other.recurringEventId !== rec.id) continue;
      from.events.delete(id);
      to.events.set(id, other);
    }
    const left: EventRecord = { ...rec, status: "cancelled", movedAway: true, copied: false };
    this.bump(left);
    from.events.set(left.id, left);
    // The guests' copies stay invitations of the moved event, whose organizer is now `to`.
    this.copiesFollow(moved);
    return moved;
  }

  /** Forgets deleted events (Google does so after a while). Ids a person deleted stay unusable; others become free. */
  purgeDeleted(cal: CalendarRecord): number {
    let purged = 0;
    for (const [id, rec] of cal.events) {
      if (rec.status !== "cancelled") continue;
      cal.events.delete(id);
      if (rec.deletedBy === "person") cal.reservedIds.add(id);
      purged += 1;
    }
    return purged;
  }

  /** A sync token remembers whether its listing expanded series (Google: keep the other parameters the same). */
  issueSyncToken(cal: CalendarRecord, singleEvents: boolean): string {
    const token = `CP${randomBytes(18).toString("base64url")}`;
    this.#syncTokens.set(token, { calendarId: cal.id, seq: this.#seq, epoch: cal.tokenEpoch, singleEvents });
    // Google's token lifetime is undocumented; here the oldest tokens are forgotten (then 410) past a bound.
    if (this.#syncTokens.size > MAX_SYNC_TOKENS) {
      const oldest = this.#syncTokens.keys().next().value;
      if (oldest !== undefined) this.#syncTokens.delete(oldest);
    }
    return token;
  }

  /** Where a sync token stands; 410 fullSyncRequired when unknown, foreign or invalidated. */
  syncPosition(cal: CalendarRecord, token: string): { seq: number; singleEvents: boolean } {
    const entry = this.#syncTokens.get(token);
    if (!entry || entry.calendarId !== cal.id || entry.epoch !== cal.tokenEpoch) {
      throw new ApiError(410, "fullSyncRequired");
    }
    return { seq: entry.seq, singleEvents: entry.singleEvents };
  }
}

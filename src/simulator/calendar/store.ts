// Owns the emulator's calendars and events: access, id rules, etags, deletion as "cancelled", change history, sync tokens.
import { randomBytes } from "node:crypto";
import type { Clock } from "../../clock.ts";
import { type EventRecord, mergePatch, validateEvent, writableBody } from "./event-model.ts";
import { ApiError } from "./http.ts";

export type AccessRole = "owner" | "writer" | "reader";

export interface CalendarRecord {
  id: string;
  owner: string;
  summary: string;
  timeZone: string;
  acl: Map<string, AccessRole>;
  events: Map<string, EventRecord>;
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
  restores: number;
  userEdits: number;
  /** Writes that would have e-mailed attendees (sendUpdates other than "none" with attendees present). */
  emailsSent: number;
}

const VALID_ID = /^[a-v0-9]{5,1024}$/;
const MAX_SYNC_TOKENS = 20_000;
const ETAG_BASE = 3_181_161_784_712_000;
const BASE32HEX = "0123456789abcdefghijklmnopqrstuv";

function randomEventId(): string {
  return [...randomBytes(26)].map((b) => BASE32HEX[b & 31]).join("");
}

export class CalendarStore {
  readonly calendars = new Map<string, CalendarRecord>();
  readonly counters: WriteCounters = {
    inserts: 0,
    updates: 0,
    patches: 0,
    deletes: 0,
    restores: 0,
    userEdits: 0,
    emailsSent: 0,
  };
  readonly #clock: Clock;
  readonly #syncTokens = new Map<string, { calendarId: string; seq: number; epoch: number }>();
  #seq = 0;

  constructor(clock: Clock) {
    this.#clock = clock;
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
      events: new Map(),
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

  #bump(rec: EventRecord): void {
    this.#seq += 1;
    rec.seq = this.#seq;
    rec.updated = Math.max(this.#clock.now(), rec.updated);
    rec.etag = `"${ETAG_BASE + this.#seq * 1000}"`;
  }

  #existing(cal: CalendarRecord, eventId: string): EventRecord {
    const rec = cal.events.get(eventId);
    if (!rec) throw new ApiError(404, "notFound");
    return rec;
  }

  #checkEtag(rec: EventRecord, ifMatch: string | undefined): void {
    if (ifMatch !== undefined && ifMatch !== "*" && ifMatch !== rec.etag) {
      throw new ApiError(412, "conditionNotMet", undefined, { locationType: "header", location: "If-Match" });
    }
  }

  insert(cal: CalendarRecord, body: Record<string, unknown>): EventRecord {
    if (body.id !== undefined && body.iCalUID !== undefined) {
      throw new ApiError(400, "invalid", "Specify either id or iCalUID, not both.");
    }
    const id = body.id === undefined ? randomEventId() : String(body.id);
    if (!VALID_ID.test(id)) throw new ApiError(400, "invalid", "Invalid resource id value.");
    if (cal.events.has(id)) throw new ApiError(409, "duplicate");
    const v = validateEvent(body, cal.timeZone);
    const now = this.#clock.now();
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
    };
    this.#bump(rec);
    cal.events.set(id, rec);
    this.counters.inserts += 1;
    return rec;
  }

  #apply(rec: EventRecord, v: ReturnType<typeof validateEvent>, statusDefault: string): void {
    const moved = v.start.ms !== rec.start.ms || v.end.ms !== rec.end.ms;
    const wasCancelled = rec.status === "cancelled";
    rec.fields = v.fields;
    rec.start = v.start;
    rec.end = v.end;
    rec.status = v.status ?? statusDefault;
    if (moved) rec.sequence += 1;
    if (wasCancelled && rec.status !== "cancelled") this.counters.restores += 1;
    this.#bump(rec);
  }

  /** PUT: replaces every writable field. A body without status keeps the current status (a deleted event stays deleted). */
  update(cal: CalendarRecord, eventId: string, body: Record<string, unknown>, ifMatch?: string): EventRecord {
    const rec = this.#existing(cal, eventId);
    this.#checkEtag(rec, ifMatch);
    this.#apply(rec, validateEvent(body, cal.timeZone), rec.status);
    this.counters.updates += 1;
    return rec;
  }

  /** PATCH: merges into the current event (extendedProperties.private per key). */
  patch(cal: CalendarRecord, eventId: string, body: Record<string, unknown>, ifMatch?: string): EventRecord {
    const rec = this.#existing(cal, eventId);
    this.#checkEtag(rec, ifMatch);
    const merged = mergePatch(writableBody(rec, cal.timeZone), body);
    this.#apply(rec, validateEvent(merged, cal.timeZone), rec.status);
    this.counters.patches += 1;
    return rec;
  }

  /** Marks the event cancelled (it stays stored); a second delete answers 410 deleted. */
  delete(cal: CalendarRecord, eventId: string, ifMatch?: string): void {
    const rec = this.#existing(cal, eventId);
    if (rec.status === "cancelled") throw new ApiError(410, "deleted");
    this.#checkEtag(rec, ifMatch);
    rec.status = "cancelled";
    this.#bump(rec);
    this.counters.deletes += 1;
  }

  get(cal: CalendarRecord, eventId: string): EventRecord {
    return this.#existing(cal, eventId);
  }

  /** A therapist's own edit in the Google UI (patch semantics), bypassing access checks. */
  userEdit(cal: CalendarRecord, eventId: string, changes: Record<string, unknown>): EventRecord {
    const rec = this.#existing(cal, eventId);
    const merged = mergePatch(writableBody(rec, cal.timeZone), changes);
    this.#apply(rec, validateEvent(merged, cal.timeZone), rec.status);
    this.counters.userEdits += 1;
    return rec;
  }

  userDelete(cal: CalendarRecord, eventId: string): void {
    const rec = this.#existing(cal, eventId);
    if (rec.status === "cancelled") return;
    rec.status = "cancelled";
    this.#bump(rec);
    this.counters.userEdits += 1;
  }

  /** Forgets deleted events for good (Google does so after a while): their ids become free again. */
  purgeDeleted(cal: CalendarRecord): number {
    let purged = 0;
    for (const [id, rec] of cal.events) {
      if (rec.status === "cancelled") {
        cal.events.delete(id);
        purged += 1;
      }
    }
    return purged;
  }

  issueSyncToken(cal: CalendarRecord): string {
    const token = `CP${randomBytes(18).toString("base64url")}`;
    this.#syncTokens.set(token, { calendarId: cal.id, seq: this.#seq, epoch: cal.tokenEpoch });
    // Google's token lifetime is undocumented; here the oldest tokens are forgotten (then 410) past a bound.
    if (this.#syncTokens.size > MAX_SYNC_TOKENS) {
      const oldest = this.#syncTokens.keys().next().value;
      if (oldest !== undefined) this.#syncTokens.delete(oldest);
    }
    return token;
  }

  /** The history position a sync token stands for; 410 fullSyncRequired when unknown, foreign or invalidated. */
  syncPosition(cal: CalendarRecord, token: string): number {
    const entry = this.#syncTokens.get(token);
    if (!entry || entry.calendarId !== cal.id || entry.epoch !== cal.tokenEpoch) {
      throw new ApiError(410, "fullSyncRequired");
    }
    return entry.seq;
  }
}

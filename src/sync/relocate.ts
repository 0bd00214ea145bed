// Owns moving an appointment's event to the calendar its therapist's mapping names now, when the link says it lies in
// another one (calendar_id, or the delegated account of `primary`, changed). It runs inside the appointment's sync, so
// the engine's per-appointment order holds: events.move where the account can write both calendars, else the event is
// written in the new calendar and deleted from the old. The link is re-pointed before anything reads the new calendar
// and the old one is never watched, so removing calbridge's own event there is never taken for a therapist's deletion
// (no write-back). An old calendar that cannot be reached any more is left alone and recorded (doctor, /status); the
// event is then written once in the new calendar. Which events found there are taken as they are: relocate-rules.ts.
import { RenderError } from "../calendar/render.ts";
import type { Clock } from "../clock.ts";
import type { TherapistConfig } from "../config/schema.ts";
import type { Logger } from "../log.ts";
import { eventAt } from "./apply.ts";
import type { Effects } from "./effects.ts";
import { describeError, isCalendarKind } from "./errors.ts";
import { NeedsFullRead } from "./inputs.ts";
import type { LeftBehindEvents } from "./left-behind.ts";
import { resaved } from "./links.ts";
import { calendarKey, isUserAddress, misplacedIn } from "./placement.ts";
import type { Known, Rendering } from "./planner.ts";
import { asSynced, deletedWhileWatched, keptMove, movedUnrecorded, unsentNotice } from "./relocate-rules.ts";
import { ensureMarks, firstPage, isNoAccess, oneCalendar, type SourceCalendar } from "./source-calendar.ts";
import type { Action, CalEvent, Link } from "./types.ts";

export type { SourceCalendar } from "./source-calendar.ts";

/** Reads the appointment's full form (null: it no longer exists, so no event is wanted). */
export type FullReader = () => Promise<Known | null>;

export interface RelocatorOptions {
  fx: Effects;
  leftBehind: LeftBehindEvents;
  /**
   * A calendar with the therapist's credentials (acting as `subject` under domain-wide delegation), made fresh on
   * each call: a gateway that learns it may not write somewhere must not stop the others.
   */
  open(therapist: TherapistConfig, calendarId: string, subject: string | undefined): Promise<SourceCalendar>;
  clock: Clock;
  logger: Logger;
  /** Whether a write-back of the appointment waits out its grace period or is held by the guard. */
  waiting?(appointmentId: string): Promise<boolean>;
}

/** A calendar the links name, as calbridge can reach it now: for reads and deletions, and for events.move. */
type Source = { cal: SourceCalendar; mover: SourceCalendar } | { unreachable: string };

/** An old calendar found unreachable is tried again after this long (a relocation wave meets it once). */
const RECHECK_MS = 10 * 60_000;

export class Relocator {
  readonly #o: RelocatorOptions;
  #sources = new Map<string, { source: Promise<Source>; at: number }>();
  #same = new Map<string, Promise<boolean>>();
  #version = -1;

  constructor(options: RelocatorOptions) {
    this.#o = options;
  }

  /** The link's event lies in a calendar its (mapped) therapist's mapping no longer names. */
  pending(link: Link | undefined): boolean {
    return misplacedIn(this.#o.fx.mapping, link);
  }

  /** What a dry run shows for such a link (nothing is read or written). */
  planned(link: Link | undefined): Action | undefined {
    if (!link || !this.pending(link)) return undefined;
    const t = this.#o.fx.mapping.therapist(link.therapistId)!;
    // A dry run reads nothing: the body is what the link knows (its text is not shown, only that the event moves).
    const body = this.#renderAsKnown(link, t)?.body;
    const reason = `the mapping names another calendar: from ${link.calendarId} to ${calendarKey(t)}`;
    if (!body) return { kind: "none", appointmentId: link.appointmentId, reason };
    const at = { therapistId: t.therapist_id, eventId: link.eventId };
    return { kind: "move", appointmentId: link.appointmentId, from: at, to: at, body, reason };
  }

  /**
   * Makes sure the link's event is in its therapist's calendar now; answers the link as it stands afterwards.
   * `readFull` reads the appointment's full form, for an event that must be written anew from fields the link does
   * not keep (customer details).
   */
  async settle(link: Link | undefined, log: Logger, readFull?: FullReader): Promise<Link | undefined> {
    if (!link || !this.pending(link)) return link;
    const { fx } = this.#o;
    const t = fx.mapping.therapist(link.therapistId)!;
    const therapistId = t.therapist_id;
    const to = fx.calendar(therapistId); // unusable now: the sync waits, nothing moves
    const from = link.calendarId;
    const dest = calendarKey(t);
    const moveLog = log.child({ therapist_id: therapistId, from_calendar: from, to_calendar: dest });
    const source = await this.#source(t, from);
    if ("unreachable" in source) {
      await this.#o.leftBehind.add(therapistId, from, source.unreachable);
      moveLog.warn(
        { reason: source.unreachable },
        `old calendar cannot be reached: the event stays there and is written in ${dest}; \`calbridge purge --therapist ${therapistId} --calendar ${from}\` removes it once access is back`,
      );
      return this.#copy(link, t, undefined, moveLog, readFull);
    }
    if (await this.#oneCalendar(t, source.cal, from, dest)) {
      // The therapist's calendar itself: nothing to move, and a copy there would delete the only event (review18).
      moveLog.info("the old calendar is the therapist's calendar written another way: nothing moves");
      return this.#repoint(link, dest, await source.cal.get(link.eventId));
    }
    const old = await source.cal.get(link.eventId);
    if (!old || old.status === "cancelled") {
      // Nothing live to move (gone there, or moved by an earlier attempt whose answer was lost): what the new one has,
      // else it is written there (a deletion in a calendar no longer mapped is not written back). One a person made
      // while it was watched (waiting, held, or dated so) is not sent either: the event written anew says so.
      // One an earlier attempt moved or copied there with the therapist's move, its record lost, is taken first: the old
      // event went because it was moved, not by a person's deletion, nor a waiting write-back's (movedUnrecorded).
      const there = await to.get(link.eventId);
      if (movedUnrecorded(link, there)) return this.#repoint(link, dest, there);
      const since = fx.mapping.watchedSince(therapistId);
      if ((await this.#o.waiting?.(link.appointmentId)) || deletedWhileWatched(link, old, since)) {
        const notice = { text: unsentNotice(fx.mapping.writeback(therapistId).cancel), at: this.#o.clock.now() };
        moveLog.warn("the event was deleted in the old calendar: not sent; written in the new one with a note");
        return this.#copy({ ...link, notice }, t, undefined, moveLog, readFull);
      }
      if (asSynced(link, there)) return this.#repoint(link, dest, there);
      return this.#copy(link, t, undefined, moveLog, readFull);
    }
    const moved = await this.#tryMove(source, link, dest, therapistId);
    if (moved) {
      // Moved whole: only calbridge's marks are made sure of (they do not depend on the booking's text).
      const body = this.#renderAsKnown(link, t)?.body;
      const event = body ? await ensureMarks(to, moved, body) : moved;
      fx.counted(therapistId, "relocate");
      moveLog.info({ how: "events.move" }, "event moved to the therapist's calendar");
      return this.#repoint(link, dest, event);
    }
    return this.#copy(link, t, source.cal, moveLog, readFull, old);
  }

  /** events.move; null when this account may not move it there (then the event is copied). */
  async #tryMove(source: { cal: SourceCalendar; mover: SourceCalendar }, link: Link, dest: string, t: string) {
    const { eventId } = link;
    try {
      return await source.mover.move(eventId, dest);
    } catch (err) {
      if (isCalendarKind(err, "duplicate")) {
        // The new calendar has the id already: a copy an earlier attempt wrote (then the old one is the extra), or one
        // left behind there long ago (pointed back), whose times are stale: that one is written over (#copy).
        const there = await this.#o.fx.calendar(t).get(eventId);
        if (!asSynced(link, there)) return null;
        await source.cal.delete(eventId);
        return there;
      }
      if (isNoAccess(err)) return null;
      throw err;
    }
  }

  /**
   * Writes the event in the therapist's calendar from the link's booking state, then deletes it from the old one; a
   * person's move of `was` (the live event there) goes with it, still theirs (see keptMove).
   */
  async #copy(
    link: Link,
    t: TherapistConfig,
    old: SourceCalendar | undefined,
    log: Logger,
    readFull: FullReader | undefined,
    was?: CalEvent,
  ): Promise<Link> {
    const { fx } = this.#o;
    const r = await this.#render(link, t, readFull);
    const body = r?.body && keptMove(link, r.body, was);
    let next: Link;
    if (r && body) {
      const w = await fx.write(t.therapist_id, "create", body, eventAt(link.appointmentId, link, link.eventId));
      next = fx.links.make({
        appointmentId: link.appointmentId,
        therapistId: t.therapist_id,
        eventId: w.eventId,
        generation: w.generation,
        booking: link.booking,
        sourceAt: link.sourceAt,
        event: w.event,
        body,
        present: true,
        rendered: r.rendered,
        ...(link.notice ? { notice: link.notice } : {}),
      });
      if (body !== r.body) next = { ...next, eventStart: link.eventStart, eventEnd: link.eventEnd };
    } else {
      next = { ...this.#repointed(link, calendarKey(t), null), present: false, removedBy: "booking" };
    }
    try {
      await old?.delete(link.eventId);
    } catch (err) {
      if (!isNoAccess(err)) throw err;
      await this.#o.leftBehind.add(t.therapist_id, link.calendarId, describeError(err));
      log.warn({ err: describeError(err) }, "the old calendar may not be changed: its copy of the event stays there");
    }
    await fx.links.save(next);
    fx.metrics.operations.inc({ kind: "relocate", result: "ok" });
    const also = old ? " and removed from the old one" : "";
    log.info({ how: old ? "copied" : "written" }, `event written in the therapist's calendar${also}`);
    return next;
  }

  /** The link pointing at the therapist's calendar, with the event found or moved there (null: none yet). */
  async #repoint(link: Link, dest: string, event: CalEvent | null | undefined): Promise<Link> {
    const next = this.#repointed(link, dest, event);
    await this.#o.fx.links.save(next);
    return next;
  }

  #repointed(link: Link, dest: string, event: CalEvent | null | undefined): Link {
    // What was last synced stays (times, fingerprint): a therapist's own change made before the move is still one. The
    // new syncedAt makes every earlier sighting of the event (in the old calendar) stale: it is read again.
    return resaved(link, { calendarId: dest, etag: event?.etag ?? undefined }, this.#o.clock.now());
  }

  /** The event as the link's booking state renders it; the full form is read when that lacks fields it shows. */
  async #render(link: Link, t: TherapistConfig, readFull: FullReader | undefined): Promise<Rendering | null> {
    try {
      return this.#o.fx.render({ appt: link.booking, full: false }, link, t.therapist_id, link.notice);
    } catch (err) {
      if (err instanceof RenderError) return null;
      if (!(err instanceof NeedsFullRead) || !readFull) throw err;
    }
    const full = await readFull();
    if (!full) return null;
    try {
      return this.#o.fx.render(full, link, t.therapist_id, link.notice);
    } catch (err) {
      if (err instanceof RenderError) return null;
      throw err;
    }
  }

  /** The event as far as the link knows it, missing fields left empty: for calbridge's marks and dry runs only. */
  #renderAsKnown(link: Link, t: TherapistConfig): Rendering | null {
    try {
      return this.#o.fx.render({ appt: link.booking, full: true }, link, t.therapist_id, link.notice);
    } catch (err) {
      if (err instanceof RenderError) return null;
      throw err;
    }
  }

  /** The old calendar as calbridge can reach it: as the therapist's account, else as the calendar's own address. */
  #source(t: TherapistConfig, calendarId: string): Promise<Source> {
    const version = this.#o.fx.mapping.version;
    if (version !== this.#version) this.#reset(version);
    const key = `${t.therapist_id} ${calendarId}`;
    const now = this.#o.clock.now();
    const cached = this.#sources.get(key);
    if (cached && now - cached.at < RECHECK_MS) return cached.source;
    const source = this.#reach(t, calendarId);
    this.#sources.set(key, { source, at: now });
    // A failure to find out (a timeout, a 5xx) is not a verdict: the next attempt asks again.
    source.catch(() => this.#sources.delete(key));
    return source;
  }

  async #reach(t: TherapistConfig, calendarId: string): Promise<Source> {
    const oauth = (t.auth?.type ?? this.#o.fx.mapping.config.google.auth.type) === "oauth";
    const subjects = [t.impersonate];
    if (!oauth && isUserAddress(calendarId) && calendarId !== t.impersonate) subjects.push(calendarId);
    let why = "not reachable";
    for (const subject of subjects) {
      const cal = await this.#o.open(t, calendarId, subject);
      try {
        await firstPage(cal, this.#o.clock.now());
        return { cal, mover: await this.#o.open(t, calendarId, subject) };
      } catch (err) {
        cal.close?.();
        if (!isNoAccess(err)) throw err;
        why = describeError(err);
      }
    }
    // Before calling the old calendar gone: the therapist's own calendar must work (else the credentials are at fault).
    await firstPage(this.#o.fx.calendar(t.therapist_id), this.#o.clock.now());
    return { unreachable: why };
  }

  /** oneCalendar, asked once per old calendar while the mapping stays (a failure is asked again). */
  #oneCalendar(t: TherapistConfig, old: SourceCalendar, from: string, dest: string): Promise<boolean> {
    const key = `${t.therapist_id} ${from} ${dest}`;
    const known = this.#same.get(key) ?? oneCalendar(from, old, dest, () => this.#o.open(t, dest, t.impersonate));
    this.#same.set(key, known);
    known.catch(() => this.#same.delete(key));
    return known;
  }

  #reset(version: number): void {
    const close = (s: Source) => {
      if ("cal" in s) for (const c of [s.cal, s.mover]) c.close?.();
    };
    for (const { source } of this.#sources.values()) void source.then(close, () => {});
    this.#sources = new Map();
    this.#same = new Map();
    this.#version = version;
  }
}

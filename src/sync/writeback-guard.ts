// Owns the write-back guard: a therapist's calendar changes that would cancel or reschedule appointments are counted
// over a sliding window, and when there are more than a small share of that therapist's events (a phone app wiping a
// calendar, "delete all", a compromised account) they are held, not sent, until a person decides
// (`calbridge writeback held --apply | --restore`). While a therapist's hold is open, every new write-back joins it.
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { Table } from "../store/store.ts";
import { KeyedSerial } from "./keyed.ts";
import { shareLimit } from "./share-limit.ts";

export type WritebackKind = "cancel" | "reschedule";

/** A write-back the guard holds back: what it would have sent, for whom, since when. */
export interface HeldWriteback {
  appointmentId: string;
  therapistId: string;
  kind: WritebackKind;
  /** The new start a reschedule would send. */
  startTime?: string;
  heldAt: number;
  /** Why the hold opened (counts and limit), or that it joined an open hold. */
  reason: string;
}

export interface GuardLimits {
  windowMs: number;
  /** Share of the therapist's managed events that may be written back within the window. */
  maxRatio: number;
  /** A therapist may always write back this many within the window, whatever the share. */
  floor: number;
  /** The longest grace period of all therapists: the horizon of one not mapped (see graceOf). */
  graceMs?: number;
  /** The longest grace period of this therapist's write-backs (undefined: not mapped, graceMs counts). */
  graceOf?: (therapistId: string) => number | undefined;
}

/** A write-back wanted: since when, and how long it counts from then (the horizon when it was noted). */
interface Intent {
  at: number;
  horizon: number;
}

export interface GuardMetrics {
  held: { set(labels: { therapist: string }, value: number): void; remove(labels: { therapist: string }): void };
  tripped: { inc(labels: { therapist: string }): void };
}

export interface WritebackGuardOptions {
  holds: Table<HeldWriteback>;
  /**
   * Write-backs sent lately, per therapist (appointment id -> when first wanted), kept in the store: a slow wipe that
   * spans a restart or a failover still counts as one. Without it, in this process's memory only.
   */
  sent?: Table<Record<string, number>>;
  limits: GuardLimits;
  /** Managed events of a therapist's calendar, as last counted (the reconciliation counts them). */
  managedCount(therapistId: string): number | undefined;
  clock: Clock;
  logger: Logger;
  metrics?: GuardMetrics;
}

export class WritebackGuard {
  readonly #o: WritebackGuardOptions;
  /** Per therapist, the appointments with a write-back wanted lately, and when it was first wanted. */
  readonly #intents = new Map<string, Map<string, Intent>>();
  /** Appointments this process knows to be held (the store is the truth; another process may release them). */
  readonly #heldIds = new Set<string>();
  readonly #serial = new KeyedSerial();
  /** Held write-backs per therapist as last counted (refreshAll, admit, release): for the metric and notifications. */
  #counts = new Map<string, number>();

  constructor(options: WritebackGuardOptions) {
    this.#o = options;
  }

  /** The limit of write-backs within the window for a therapist. */
  limit(therapistId: string): number {
    const managed = this.#o.managedCount(therapistId) ?? 0;
    return shareLimit(this.#o.limits.maxRatio, managed, this.#o.limits.floor);
  }

  /**
   * A write-back is wanted for an appointment (seen at once, before any grace period): it counts from now on, so a
   * bulk deletion is recognised as a whole before the first of its cancellations could be sent.
   */
  note(therapistId: string, appointmentId: string): void {
    let byAppt = this.#intents.get(therapistId);
    if (!byAppt) {
      byAppt = new Map();
      this.#intents.set(therapistId, byAppt);
    }
    const intent = byAppt.get(appointmentId);
    const now = this.#o.clock.now();
    if (!intent || this.#expired(therapistId, intent, now)) {
      byAppt.set(appointmentId, { at: now, horizon: this.#horizon(therapistId) });
    }
  }

  /** Past its horizon when noted and the therapist's now, the longer (a grace shortened by a reload mid-wait). */
  #expired(therapistId: string, intent: Intent, now: number): boolean {
    return now - intent.at > Math.max(intent.horizon, this.#horizon(therapistId));
  }

  /** How long an intent counts after it was first wanted: the window, from when it could first be sent. */
  #horizon(therapistId: string): number {
    const l = this.#o.limits;
    return l.windowMs + (l.graceOf?.(therapistId) ?? l.graceMs ?? 0);
  }

  /**
   * The appointment's sync ended: a hold of it is dropped, and unless a write-back was sent (`sent`), it stops
   * counting (the event came back, the booking changed on its own). Costs nothing for an appointment never held.
   */
  async settled(therapistId: string | undefined, appointmentId: string, sent = false): Promise<void> {
    // A write-back that was sent keeps counting until the window passes: a slow bulk deletion adds up.
    if (therapistId && !sent) this.#intents.get(therapistId)?.delete(appointmentId);
    if (therapistId && sent) await this.#serial.run(therapistId, () => this.#keepSent(therapistId, appointmentId));
    if (!this.#heldIds.delete(appointmentId)) return;
    if (await this.#o.holds.delete(appointmentId)) await this.#refresh(therapistId);
  }

  /**
   * Forgets what no longer counts of the therapists `mapped` no longer names (a reload took them out of the mapping):
   * their write-backs past the horizon (the window and the grace period). Those within it are kept: a therapist removed
   * and mapped again (a mistake put right within the minute) still has deletions in their grace period, and each would
   * count only itself (the first `floor` of a bulk deletion sent, customers told). What is kept is what one horizon holds.
   */
  forgetUnmapped(mapped: (therapistId: string) => boolean): void {
    const now = this.#o.clock.now();
    for (const [id, byAppt] of this.#intents) {
      if (mapped(id)) continue;
      for (const [appt, intent] of byAppt) if (this.#expired(id, intent, now)) byAppt.delete(appt);
      if (byAppt.size === 0) this.#intents.delete(id);
    }
  }

  /** Therapists with write-backs wanted lately, as this process counts them (tests). */
  get intentsKept(): number {
    return this.#intents.size;
  }

  /** Held, as this process last knew it (no store read; refreshAll reads every hold at start). */
  knowsHeld(appointmentId: string): boolean {
    return this.#heldIds.has(appointmentId);
  }

  /** Held now (read from the store: an administrator may have released it from another process). */
  async isHeld(appointmentId: string): Promise<boolean> {
    return (await this.heldFor(appointmentId)) !== undefined;
  }

  /**
   * Whether this write-back may be sent now; if not, it is recorded as held. Held when the therapist's hold is open, or
   * when more appointments than the limit wanted a write-back within the window.
   */
  admit(entry: Omit<HeldWriteback, "heldAt" | "reason">): Promise<"send" | "held"> {
    // One therapist's decisions one at a time: two write-backs decided at once must not both find the hold closed.
    return this.#serial.run(entry.therapistId, () => this.#admit(entry));
  }

  async #admit(entry: Omit<HeldWriteback, "heldAt" | "reason">): Promise<"send" | "held"> {
    const { therapistId, appointmentId } = entry;
    if (await this.isHeld(appointmentId)) return "held";
    this.note(therapistId, appointmentId);
    const now = this.#o.clock.now();
    const byAppt = this.#intents.get(therapistId)!;
    // What was sent before this process (or this leadership term) began counts too.
    for (const [id, at] of Object.entries((await this.#o.sent?.get(sentKey(therapistId))) ?? {})) {
      if (typeof at === "number" && !byAppt.has(id)) byAppt.set(id, { at, horizon: this.#horizon(therapistId) });
    }
    for (const [id, intent] of byAppt) if (this.#expired(therapistId, intent, now)) byAppt.delete(id);
    const open = await this.heldOf(therapistId);
    const wanted = byAppt.size;
    const limit = this.limit(therapistId);
    if (open.length === 0 && wanted <= limit) return "send";
    const minutes = Math.round(this.#o.limits.windowMs / 60_000);
    const reason =
      open.length > 0
        ? `joined the open hold of ${therapistId}`
        : `${wanted} calendar changes of ${therapistId} would be written back within ${minutes} min (limit ${limit})`;
    await this.#o.holds.set(appointmentId, { ...entry, heldAt: now, reason });
    this.#heldIds.add(appointmentId);
    if (open.length === 0) {
      this.#o.metrics?.tripped.inc({ therapist: therapistId });
      this.#o.logger.error(
        { therapist_id: therapistId, wanted, limit, window_minutes: minutes },
        `write-back guard: ${wanted} cancellations or moves from ${therapistId}'s calendar within ${minutes} minutes (limit ${limit}); they are held, nothing is sent to the booking service. Run \`calbridge writeback held --therapist ${therapistId}\`, then --apply to send them or --restore to put the events back.`,
      );
    }
    await this.#refresh(therapistId);
    return "held";
  }

  /** Records a write-back sent, in the store's list of the therapist's recent ones (those past the horizon dropped). */
  async #keepSent(therapistId: string, appointmentId: string): Promise<void> {
    const table = this.#o.sent;
    if (!table) return;
    const now = this.#o.clock.now();
    const intent = this.#intents.get(therapistId)?.get(appointmentId);
    const windowMs = Math.max(this.#horizon(therapistId), intent?.horizon ?? 0);
    const kept = (await table.get(sentKey(therapistId))) ?? {};
    const next: Record<string, number> = {};
    for (const [id, at] of Object.entries(kept)) if (typeof at === "number" && now - at <= windowMs) next[id] = at;
    next[appointmentId] = intent?.at ?? now;
    await table.set(sentKey(therapistId), next, windowMs);
  }

  /** The write-back held for an appointment, if one is (read from the store, like isHeld). */
  async heldFor(appointmentId: string): Promise<HeldWriteback | undefined> {
    const held = await this.#o.holds.get(appointmentId);
    if (held) this.#heldIds.add(appointmentId);
    else if (this.#heldIds.delete(appointmentId)) this.#decidedElsewhere(appointmentId);
    return held;
  }

  /**
   * A hold this process knew is gone from the store: another process decided it (`calbridge writeback held --apply` or
   * `--restore` beside the daemon). It stops counting here, as release() does: a restored event's sync ends as an echo
   * (nothing settles it), and its intent went on counting toward the therapist's next single deletion, held again. One
   * sent by --apply still counts, from the store's list of those sent.
   */
  #decidedElsewhere(appointmentId: string): void {
    for (const byAppt of this.#intents.values()) byAppt.delete(appointmentId);
  }

  /**
   * A held write-back whose calendar change is another one now (a held move since deleted): the hold shows the new
   * one instead, for a person to decide about; nothing is sent meanwhile.
   */
  rehold(entry: Omit<HeldWriteback, "heldAt" | "reason">, was: HeldWriteback): Promise<void> {
    return this.#serial.run(entry.therapistId, async () => {
      const before = was.kind === "reschedule" && was.startTime ? `a reschedule to ${was.startTime}` : `a ${was.kind}`;
      const reason = `changed in the calendar since it was held (it was ${before}): decide again`;
      await this.#o.holds.set(entry.appointmentId, { ...entry, heldAt: this.#o.clock.now(), reason });
      this.#heldIds.add(entry.appointmentId);
      await this.#refresh(entry.therapistId);
      if (was.therapistId !== entry.therapistId) await this.#refresh(was.therapistId);
    });
  }

  /** A person decided about a held write-back (sent it, or put the event back): it is no longer held. */
  async release(appointmentId: string): Promise<void> {
    const held = await this.#o.holds.get(appointmentId);
    this.#heldIds.delete(appointmentId);
    if (!held) return;
    await this.#o.holds.delete(appointmentId);
    this.#intents.get(held.therapistId)?.delete(appointmentId);
    await this.#refresh(held.therapistId);
  }

  /** Held write-backs per therapist, as last counted (no store read). */
  get counts(): ReadonlyMap<string, number> {
    return this.#counts;
  }

  /** Every held write-back, or one therapist's. */
  async held(therapistId?: string): Promise<HeldWriteback[]> {
    const out: HeldWriteback[] = [];
    for await (const [, h] of this.#o.holds.entries()) if (!therapistId || h.therapistId === therapistId) out.push(h);
    return out.sort((a, b) => a.heldAt - b.heldAt);
  }

  heldOf(therapistId: string): Promise<HeldWriteback[]> {
    return this.held(therapistId);
  }

  /**
   * Sets the held gauge of every therapist from the store (another process may have released holds): the mapped ones
   * and any with holds; the series of one that is neither (removed from the mapping, nothing held) goes. A hold this
   * process knew and the store no longer has was decided elsewhere: it stops counting toward the window.
   */
  async refreshAll(therapistIds: readonly string[]): Promise<Map<string, number>> {
    const counts = new Map(therapistIds.map((t) => [t, 0]));
    const before = new Set(this.#heldIds);
    const held = await this.held();
    this.#heldIds.clear();
    for (const h of held) {
      this.#heldIds.add(h.appointmentId);
      counts.set(h.therapistId, (counts.get(h.therapistId) ?? 0) + 1);
    }
    for (const id of before) if (!this.#heldIds.has(id)) this.#decidedElsewhere(id);
    for (const t of this.#counts.keys()) if (!counts.has(t)) this.#o.metrics?.held.remove({ therapist: t });
    for (const [t, n] of counts) this.#o.metrics?.held.set({ therapist: t }, n);
    this.#counts = counts;
    return counts;
  }

  async #refresh(therapistId: string | undefined): Promise<void> {
    if (!therapistId) return;
    const n = (await this.heldOf(therapistId)).length;
    this.#counts.set(therapistId, n);
    this.#o.metrics?.held.set({ therapist: therapistId }, n);
  }
}

const sentKey = (therapistId: string) => `guard_sent:${therapistId}`;

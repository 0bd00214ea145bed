// Owns the write-backs waiting out their grace period, kept in the store. The wait itself lives in the engine's memory,
// and the change that started it is not reported again once the calendar poll has moved past it: a daemon stopped
// during the wait would forget a deletion for good where the reconciliation does not reach (an appointment beyond the
// sync window), leaving the appointment booked while the therapist's calendar shows nothing. The next leader syncs
// each one again, reading the calendar afresh: what still stands waits its full grace period, then is written back.
import type { Clock } from "../clock.ts";
import type { Store, Table } from "../store/store.ts";

interface Pending {
  therapistId: string;
  /** When the wait was first noted (epoch ms). */
  at: number;
}

const PREFIX = "writeback_pending:";
/** A wait nobody ended within this long (its appointment failed for good, say) is forgotten. */
const KEEP_MS = 14 * 86_400_000;
/** How often the appointments noted here whose record has expired are looked for. */
const SWEEP_MS = 86_400_000;

export class PendingWritebacks {
  readonly #table: Table<Pending>;
  readonly #clock: Clock;
  /**
   * Appointments this process noted or resumed, with when their record expires: only their end costs a store delete
   * (most syncs never waited). A wait whose end never comes here (held by the guard and decided by `writeback held`,
   * failed for good, taken up by the next leader) is dropped once its record has expired, as nothing is left to delete.
   */
  readonly #noted = new Map<string, number>();
  #sweepAt = Number.NEGATIVE_INFINITY;

  constructor(store: Store, clock: Clock) {
    this.#table = store.table<Pending>("meta");
    this.#clock = clock;
  }

  /**
   * A write-back for the appointment waits for its grace period. Written each time, not once per process: another
   * replica may have resumed and ended an earlier wait of this appointment (and removed its record) meanwhile.
   */
  async note(appointmentId: string, therapistId: string): Promise<void> {
    const now = this.#clock.now();
    await this.#table.set(PREFIX + appointmentId, { therapistId, at: now }, KEEP_MS);
    this.#remember(appointmentId, now + KEEP_MS);
  }

  /** How many appointments this process keeps as noted (tests). */
  get size(): number {
    return this.#noted.size;
  }

  #remember(appointmentId: string, expiresAt: number): void {
    const now = this.#clock.now();
    if (now >= this.#sweepAt) {
      this.#sweepAt = now + SWEEP_MS;
      for (const [id, at] of this.#noted) if (at <= now) this.#noted.delete(id);
    }
    this.#noted.set(appointmentId, expiresAt);
  }

  /** The appointment's sync ended (written back, undone, declined, or nothing to do). */
  async clear(appointmentId: string): Promise<void> {
    if (!this.#noted.delete(appointmentId)) return;
    await this.#table.delete(PREFIX + appointmentId);
  }

  /** Whether a wait is noted for the appointment and not ended (by any process). */
  async has(appointmentId: string): Promise<boolean> {
    return (await this.#table.get(PREFIX + appointmentId)) !== undefined;
  }

  /** Every wait noted and not ended, by any process before this one. */
  async all(): Promise<{ appointmentId: string; therapistId: string }[]> {
    const out: { appointmentId: string; therapistId: string }[] = [];
    for await (const [key, value] of this.#table.entries()) {
      if (!key.startsWith(PREFIX) || typeof value?.therapistId !== "string") continue;
      const appointmentId = key.slice(PREFIX.length);
      // Known to this process now: its sync clears it.
      this.#remember(appointmentId, (typeof value.at === "number" ? value.at : this.#clock.now()) + KEEP_MS);
      out.push({ appointmentId, therapistId: value.therapistId });
    }
    return out;
  }
}

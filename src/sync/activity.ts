// Owns what /status shows of each therapist's sync activity: when it last wrote, its last error, and counts.
import type { Clock } from "../clock.ts";

export interface TherapistStatus {
  lastSyncAt?: number;
  lastError?: string;
  lastErrorAt?: number;
  writes: number;
  writebacks: number;
}

export class Activity {
  readonly #clock: Clock;
  readonly #byTherapist = new Map<string, TherapistStatus>();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  of(therapistId: string): TherapistStatus | undefined {
    return this.#byTherapist.get(therapistId);
  }

  #entry(therapistId: string): TherapistStatus {
    let st = this.#byTherapist.get(therapistId);
    if (!st) {
      st = { writes: 0, writebacks: 0 };
      this.#byTherapist.set(therapistId, st);
    }
    return st;
  }

  wrote(therapistId: string): void {
    const st = this.#entry(therapistId);
    st.writes++;
    st.lastSyncAt = this.#clock.now();
  }

  wroteBack(therapistId: string): void {
    this.#entry(therapistId).writebacks++;
  }

  /** Forgets the therapists `mapped` no longer names (a reload took them out of the mapping). */
  forgetUnmapped(mapped: (therapistId: string) => boolean): void {
    for (const id of this.#byTherapist.keys()) if (!mapped(id)) this.#byTherapist.delete(id);
  }

  failed(therapistId: string, message: string): void {
    const st = this.#entry(therapistId);
    st.lastError = message;
    st.lastErrorAt = this.#clock.now();
  }
}

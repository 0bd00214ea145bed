// Owns what a decision for one appointment is given (decide.ts): both sides, the link, and the settings that apply.
import type { Appointment } from "../booking/schemas.ts";
import type { WritebackConfig } from "../config/schema.ts";
import type { Desired } from "./desired.ts";
import type { CalEvent, Link, Rendered, Snapshot } from "./types.ts";

export interface DecideInput {
  appointmentId: string;
  /** The booking's current state; null when the booking service no longer knows the appointment (404). */
  appt: Appointment | Snapshot | null;
  link: Link | undefined;
  /**
   * The event in the link's calendar (or, without a link, in the target calendar): undefined when not looked at,
   * null when absent. A deleted event (status "cancelled") counts as absent, but only it says the therapist deleted
   * the event: Google keeps deleted events and reports them so, while null (a 404) also means a calendar that is no
   * longer accessible, so a missing linked event is put back, never taken for a deletion to push to the booking.
   */
  event: CalEvent | null | undefined;
  /** Therapist the appointment belongs to now, when mapped. */
  targetTherapistId: string | undefined;
  /**
   * The body the event should have in the target calendar (null: no event, e.g. cancelled with policy delete), or
   * "as written" when only its fingerprint is known.
   */
  desired: Desired;
  /** Therapist whose calendar `event` was read from, when it was read. */
  seenIn?: string | undefined;
  /** Event id to use in the target calendar when creating. */
  eventId: string;
  /** Write-back settings of the link's therapist. */
  writeback: WritebackConfig;
  /** Epoch ms since which the link's therapist's calendar has been watched (0: all along; see watched.ts). */
  watchedSince?: number;
  conflict: "booking_wins" | "calendar_wins";
  /** Epoch ms now: an appointment that has begun is not cancelled from the calendar (see `begun`). */
  now: number;
  /** What `desired` stands for (digests), when rendered: tells an earlier build's link's lines (edit-notice.ts). */
  rendered?: Rendered;
}

// Owns the note of an event that comes back because a person's deletion of it was never sent: calbridge had lost its
// records of the event (decide.ts).

/**
 * The note of an event a person deleted while calbridge had no record of it (see the `unsent` of an Action); one string
 * for every action, which a cold reconciliation plans by the thousand.
 */
const LOST =
  "calbridge: this event was deleted in the calendar while calbridge had lost its records of it, so the appointment was not cancelled.";
const UNSENT = {
  cancel: `${LOST} Delete it again to cancel it.`,
  noCancel: `${LOST} Cancelling from the calendar is turned off: cancel it in the booking service.`,
  begun: `${LOST} The appointment has begun, so deleting its event does not cancel it: cancel it, or mark it a no-show, in the booking service.`,
};

/** `begun`: the appointment has begun, and deleting its event again would not cancel it either (decide.ts). */
export function lostRecordsNote(cancelling: boolean, begun = false): string {
  return begun ? UNSENT.begun : cancelling ? UNSENT.cancel : UNSENT.noCancel;
}

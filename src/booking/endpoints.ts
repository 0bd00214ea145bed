// Owns reading GET /v1/webhooks: which registered endpoint is ours (by webhooks.public_url) and whether it is enabled
// and subscribed to the appointment events. The record's fields are not in the spec, so several spellings are read.
// Used by `calbridge doctor` and by the periodic check of the notifications.

/** The events calbridge cannot do without; appointment.completed and .no_show only colour events. */
export const APPOINTMENT_EVENTS = ["appointment.created", "appointment.updated", "appointment.cancelled"];

export type EndpointState =
  | { state: "missing" }
  | { state: "disabled" }
  | { state: "enabled"; missingEvents: string[] };

/** The state of the endpoint registered for `url`, among the records GET /v1/webhooks answered. */
export function endpointState(endpoints: readonly Record<string, unknown>[], url: string): EndpointState {
  const mine = endpoints.filter((e) => String(e.url ?? e.endpoint ?? "") === url);
  // An endpoint added again beside the one the service disabled (rather than re-enabled) is the one deliveries use.
  const ours = mine.find((e) => !isDisabled(e));
  if (!ours) return { state: mine.length > 0 ? "disabled" : "missing" };
  const events = Array.isArray(ours.events) ? ours.events.map(String) : undefined;
  const missingEvents = events ? APPOINTMENT_EVENTS.filter((e) => !events.includes(e) && !events.includes("*")) : [];
  return { state: "enabled", missingEvents };
}

function isDisabled(e: Record<string, unknown>): boolean {
  return e.enabled === false || e.disabled === true || e.status === "disabled";
}

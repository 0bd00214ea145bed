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
  const ours = endpoints.find((e) => String(e.url ?? e.endpoint ?? "") === url);
  if (!ours) return { state: "missing" };
  if (ours.enabled === false || ours.disabled === true || ours.status === "disabled") return { state: "disabled" };
  const events = Array.isArray(ours.events) ? ours.events.map(String) : undefined;
  const missingEvents = events ? APPOINTMENT_EVENTS.filter((e) => !events.includes(e) && !events.includes("*")) : [];
  return { state: "enabled", missingEvents };
}

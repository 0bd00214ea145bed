// Owns the public surface of the booking API client (what other modules import).
export {
  type AppointmentQuery,
  type AvailabilityQuery,
  BookingClient,
  type BookingClientOptions,
  type BookingStats,
  type CallOptions,
  type CancelBody,
  type CreateBody,
  type PatchBody,
} from "./client.ts";
export { BookingApiError, type BookingErrorKind, classify, isBookingApiError } from "./errors.ts";
export {
  type GatePermit,
  type GateSnapshot,
  PRIORITIES,
  type Priority,
  RateLimitGate,
  type WaitReason,
} from "./gate.ts";
export type { Page } from "./pagination.ts";
export { Appointment, Availability, ErrorEnvelope, ListMeta, TimeSlot, WebhookEvent } from "./schemas.ts";

// Owns the public surface of the webhook receiver: what the daemon wires together.
export { type BookingWebhookEvent, BookingWebhookEventSchema, kindOf, parseEventBody } from "./event.ts";
export {
  DEFAULT_SEEN_TTL_MS,
  type DeadLetter,
  type DeadLetterInput,
  type InboxEntry,
  MIN_SEEN_TTL_MS,
  WebhookInbox,
  type WebhookInboxOptions,
} from "./inbox.ts";
export { type WebhookMetrics, webhookMetrics } from "./metrics.ts";
export { type EventSink, InboxProcessor, type InboxProcessorOptions } from "./processor.ts";
export { createWebhookHandler, type WebhookHandler, type WebhookHandlerOptions } from "./route.ts";
export { SIGNATURE_HEADER, secretHints, sign, type VerifyResult, verifySignature } from "./signature.ts";

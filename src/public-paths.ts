// Owns the fixed paths of the public listener beside the booking webhook's configurable one (webhooks.path), so the
// configuration can refuse a webhook path that one of them would answer instead, or that would hide one of them.

/** The listener's liveness answer, matched before any route. */
export const HEALTHZ_PATH = "/healthz";
/** Google's push notifications (POST). */
export const PUSH_PATH = "/webhooks/google";
/** A therapist's connect link, and the pages under it (the OAuth callback among them). */
export const CONNECT_PATH = "/connect";
export const CALLBACK_PATH = `${CONNECT_PATH}/callback`;

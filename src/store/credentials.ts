// Owns where therapists' OAuth refresh tokens are kept: one entry per therapist in the store's "credentials" table,
// written by `calbridge authorize` and by the web connect flow alike, read by the daemon. (Encryption at rest goes
// here, for both writers at once.)
import type { Store } from "./store.ts";

export interface StoredCredentials {
  refresh_token: string;
  /** Epoch ms of the consent. */
  at: number;
  /** Which flow stored it. */
  via?: "authorize" | "connect";
  /** The scopes Google granted with it. */
  scopes?: string[];
}

const key = (therapistId: string) => `oauth:${therapistId}`;

export async function saveRefreshToken(
  store: Store,
  therapistId: string,
  refreshToken: string,
  details: { via: "authorize" | "connect"; scopes?: string[]; at?: number },
): Promise<void> {
  const entry: StoredCredentials = {
    refresh_token: refreshToken,
    at: details.at ?? Date.now(),
    via: details.via,
    ...(details.scopes ? { scopes: details.scopes } : {}),
  };
  await store.table<StoredCredentials>("credentials").set(key(therapistId), entry);
}

/** The therapist's stored refresh token, if any. */
export async function loadRefreshToken(store: Store, therapistId: string): Promise<string | undefined> {
  const entry = await store.table<StoredCredentials>("credentials").get(key(therapistId));
  return typeof entry?.refresh_token === "string" && entry.refresh_token ? entry.refresh_token : undefined;
}

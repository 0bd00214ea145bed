// Owns the connect flow's shared state in the store, so any replica can answer any step: consent attempts in flight
// (OAuth state → PKCE verifier and link, 30 minutes, taken once) and used links (single use, claimed atomically, so
// two replicas on Redis cannot both accept one link).
import type { Store, Table } from "../store/store.ts";
import type { Invite } from "./invite.ts";

/** A consent attempt: sent to Google, waiting for its callback. */
export interface Attempt {
  invite: Invite;
  /** The link's token, to offer the link again when the attempt fails. */
  token: string;
  verifier: string;
}

interface Used {
  therapistId: string;
  at: number;
}

export const ATTEMPT_TTL_MS = 30 * 60_000;
/** Kept a day past the link's expiry: by then the expiry alone refuses it. */
const USED_MARGIN_MS = 86_400_000;

export class ConnectLedger {
  readonly #table: Table<Attempt | Used>;

  constructor(store: Store) {
    this.#table = store.table<Attempt | Used>("invites");
  }

  async saveAttempt(state: string, attempt: Attempt): Promise<void> {
    await this.#table.set(`state:${state}`, attempt, ATTEMPT_TTL_MS);
  }

  /** The attempt for `state`, removed: a state answers one callback. */
  async takeAttempt(state: string): Promise<Attempt | undefined> {
    const key = `state:${state}`;
    const attempt = (await this.#table.get(key)) as Attempt | undefined;
    if (!attempt || !(await this.#table.delete(key))) return undefined;
    return attempt;
  }

  async isUsed(invite: Invite): Promise<boolean> {
    return (await this.#table.get(`used:${invite.nonce}`)) !== undefined;
  }

  /** Marks the link used; false when it already was (here or on another replica). */
  async claim(invite: Invite, now: number): Promise<boolean> {
    const ttlMs = Math.max(60_000, invite.expiresAt - now + USED_MARGIN_MS);
    const [won] = await this.#table.addMany([
      { key: `used:${invite.nonce}`, value: { therapistId: invite.therapistId, at: now }, ttlMs },
    ]);
    return won === true;
  }

  /** Gives a claimed link back (its token could not be stored). */
  async release(invite: Invite): Promise<void> {
    await this.#table.delete(`used:${invite.nonce}`);
  }
}

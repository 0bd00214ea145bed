// Owns secrets at rest: AES-256-GCM envelopes ("enc:v1:...") under keys derived with HKDF-SHA256 from
// store.encryption_key (and store.previous_encryption_keys while rotating), the OAuth refresh tokens stored per
// therapist (CredentialStore: what `calbridge authorize`, the daemon's credential loading and the web connect flow
// all use), and digests of bearer tokens that only ever need comparing (push channel tokens).
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  hkdfSync,
  randomBytes,
  timingSafeEqual,
} from "node:crypto";
import type { Logger } from "../log.ts";
import { secrets as logSecrets, silentLogger } from "../log.ts";
import type { Store, Table } from "./store.ts";

export const ENVELOPE_PREFIX = "enc:v1:";
const INFO = Buffer.from("calbridge store secrets v1");
const SALT_BYTES = 16;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A short, public name of a key (HMAC of a fixed text): says which key sealed an envelope without revealing it. */
function keyIdOf(key: string): string {
  return createHmac("sha256", key).update("calbridge key id v1").digest("hex").slice(0, 12);
}

export type DecryptFailure = "no_key" | "unknown_key" | "damaged";

/** An envelope that cannot be opened: no key configured, sealed under a key not configured, or damaged. */
export class SecretDecryptError extends Error {
  readonly reason: DecryptFailure;
  /** The id of the key the envelope names (unknown_key, damaged). */
  readonly keyId: string | undefined;
  constructor(reason: DecryptFailure, message: string, keyId?: string) {
    super(message);
    this.name = "SecretDecryptError";
    this.reason = reason;
    this.keyId = keyId;
  }
}

/**
 * Seals and opens secrets with the configured keys. Each envelope has its own random salt (so its own derived key)
 * and IV, names the key it was sealed under by id, and is bound to a context (which record it belongs to) as
 * additional authenticated data, so an envelope copied to another record does not open.
 */
export class SecretBox {
  readonly #keys = new Map<string, string>();
  readonly keyId: string;

  /** `current` seals; every key opens what it sealed (`previous` while rotating). */
  constructor(current: string, previous: readonly string[] = []) {
    this.keyId = keyIdOf(current);
    this.#keys.set(this.keyId, current);
    for (const key of previous) if (!this.#keys.has(keyIdOf(key))) this.#keys.set(keyIdOf(key), key);
  }

  static isEnvelope(value: unknown): value is string {
    return typeof value === "string" && value.startsWith(ENVELOPE_PREFIX);
  }

  /** The id of the key an envelope was sealed under; undefined when it is not an envelope. */
  static keyIdOf(envelope: string): string | undefined {
    return SecretBox.isEnvelope(envelope) ? envelope.slice(ENVELOPE_PREFIX.length).split(":")[0] : undefined;
  }

  seal(plaintext: string, context: string): string {
    const salt = randomBytes(SALT_BYTES);
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.#derive(this.#keys.get(this.keyId)!, salt), iv);
    cipher.setAAD(Buffer.from(context));
    const sealed = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final(), cipher.getAuthTag()]);
    return `${ENVELOPE_PREFIX}${this.keyId}:${[salt, iv, sealed].map((b) => b.toString("base64url")).join(":")}`;
  }

  /** The plaintext, or a SecretDecryptError saying why not. */
  open(envelope: string, context: string): string {
    const [keyId, salt, iv, sealed] = envelope.slice(ENVELOPE_PREFIX.length).split(":");
    const key = keyId ? this.#keys.get(keyId) : undefined;
    if (!key)
      throw new SecretDecryptError("unknown_key", `sealed under key id ${keyId}, which is not configured`, keyId);
    try {
      const bytes = Buffer.from(sealed ?? "", "base64url");
      if (bytes.length < TAG_BYTES) throw new Error("too short");
      const decipher = createDecipheriv(
        "aes-256-gcm",
        this.#derive(key, Buffer.from(salt ?? "", "base64url")),
        Buffer.from(iv ?? "", "base64url"),
      );
      decipher.setAAD(Buffer.from(context));
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
      return Buffer.concat([decipher.update(bytes.subarray(0, bytes.length - TAG_BYTES)), decipher.final()]).toString(
        "utf8",
      );
    } catch {
      throw new SecretDecryptError("damaged", `does not authenticate under key id ${keyId}: damaged or altered`, keyId);
    }
  }

  /** Whether an envelope was sealed under an older key (to be sealed again under the current one). */
  isStale(envelope: string): boolean {
    return SecretBox.keyIdOf(envelope) !== this.keyId;
  }

  #derive(key: string, salt: Buffer): Buffer {
    return Buffer.from(hkdfSync("sha256", key, salt, INFO, 32));
  }
}

/** The SecretBox of the configuration's `store` section; undefined when no key is configured. */
export function secretBoxFor(store: { encryption_key?: string | undefined; previous_encryption_keys?: string[] }) {
  return store.encryption_key ? new SecretBox(store.encryption_key, store.previous_encryption_keys ?? []) : undefined;
}

/** SHA-256 of a bearer token, for storing what only needs to be compared, never the token itself. */
export function tokenDigest(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** Whether `token` is the one whose digest was stored (constant time over the digests). */
export function matchesDigest(token: string, digest: string): boolean {
  const a = Buffer.from(tokenDigest(token), "hex");
  const b = Buffer.from(digest, "hex");
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Where a refresh token came from and what it grants; stored beside it in clear (no secret in it). */
export interface RefreshTokenMeta {
  /** Who stored it: "authorize", "connect", ... */
  source?: string;
  /** The account that consented, when known. */
  account?: string;
  /** The scopes granted, as the token answer gave them. */
  scope?: string;
}

export interface StoredRefreshToken {
  token: string;
  /** When it was stored (epoch ms). */
  savedAt: number;
  meta: RefreshTokenMeta;
}

/** A row of the credentials table; `refresh_token` is an envelope, or the clear token of an earlier build. */
interface CredentialRow {
  refresh_token: string;
  at: number;
  meta?: RefreshTokenMeta;
}

/** `saveRefreshToken` without a key: calbridge writes no secret in clear. */
export class EncryptionKeyMissingError extends Error {
  constructor(therapistId: string) {
    super(
      `the refresh token of ${therapistId} is not stored: store.encryption_key is not set, and calbridge does not store tokens in clear. ` +
        "Set store.encryption_key: ${CALBRIDGE_STORE_KEY} (32 or more random characters, e.g. from `openssl rand -base64 32`), " +
        `or give the token in the file as therapists[].auth.refresh_token: \${...}`,
    );
    this.name = "EncryptionKeyMissingError";
  }
}

/** What every CredentialDecryptError says, and what one whose fix is the key (not a reconnect) says too. */
const CANNOT_DECRYPT = "the stored OAuth refresh token cannot be decrypted";
const KEY_FIX = "set the key it was stored with";

/**
 * Whether a credentials error (its message, as the daemon keeps it) says the stored token was sealed under another key
 * than the ones configured, or that no key is set: the fix is store.encryption_key, not a reconnect. A damaged token
 * (the configured key, but it does not open) is not one: reconnecting is its fix.
 */
export function isWrongKeyError(message: string): boolean {
  return message.includes(CANNOT_DECRYPT) && message.includes(KEY_FIX);
}

/** A stored refresh token that cannot be read: names the therapist, the setting and the fix. */
export class CredentialDecryptError extends Error {
  readonly therapistId: string;
  readonly reason: DecryptFailure;
  constructor(therapistId: string, cause: SecretDecryptError) {
    const fix = `run \`calbridge authorize --therapist ${therapistId}\` again`;
    const why =
      cause.reason === "no_key"
        ? `it is encrypted and store.encryption_key is not set: ${KEY_FIX}, or ${fix}`
        : cause.reason === "unknown_key"
          ? `it was encrypted under another key (key id ${cause.keyId}) than store.encryption_key: ${KEY_FIX} (or list it in store.previous_encryption_keys), or ${fix}`
          : `it does not decrypt with store.encryption_key (key id ${cause.keyId}): damaged or altered; ${fix}`;
    super(`therapist ${therapistId}: ${CANNOT_DECRYPT}: ${why}`, { cause });
    this.name = "CredentialDecryptError";
    this.therapistId = therapistId;
    this.reason = cause.reason;
  }
}

/**
 * The OAuth refresh tokens kept in the store, one per therapist, encrypted with store.encryption_key. Tokens an
 * earlier build stored in clear are still read, and are encrypted as soon as a key is configured (logged once per
 * token); tokens sealed under a previous key are sealed again under the current one, when read and, for every stored
 * token, by resealAll() at start.
 */
export class CredentialStore {
  readonly #table: Table<CredentialRow>;
  readonly #box: SecretBox | undefined;
  readonly #logger: Logger;
  readonly #warnedClear = new Set<string>();
  readonly #reseals: boolean;

  /**
   * `reseal: false` (a read-only command: doctor, reconcile --dry-run) reads tokens without ever sealing them again:
   * run with a rotated key before the daemon has it, it would seal them under a key the daemon cannot open.
   */
  constructor(options: { store: Store; box?: SecretBox | undefined; logger?: Logger; reseal?: boolean }) {
    this.#table = options.store.table<CredentialRow>("credentials");
    this.#box = options.box;
    this.#logger = options.logger ?? silentLogger;
    this.#reseals = options.reseal !== false;
  }

  /** Whether tokens can be saved (a key is configured). */
  get canSave(): boolean {
    return this.#box !== undefined;
  }

  async saveRefreshToken(
    therapistId: string,
    token: string,
    meta: RefreshTokenMeta = {},
    at = Date.now(),
  ): Promise<void> {
    if (!this.#box) throw new EncryptionKeyMissingError(therapistId);
    logSecrets.add(token);
    const row: CredentialRow = { refresh_token: this.#box.seal(token, contextOf(therapistId)), at };
    if (Object.keys(meta).length > 0) row.meta = meta;
    await this.#table.set(keyOf(therapistId), row);
  }

  /** The stored token, undefined when there is none; a CredentialDecryptError when it cannot be read. */
  async loadRefreshToken(therapistId: string): Promise<StoredRefreshToken | undefined> {
    const row = await this.#table.get(keyOf(therapistId));
    if (!row || typeof row.refresh_token !== "string" || row.refresh_token === "") return undefined;
    const stored = row.refresh_token;
    const meta = row.meta ?? {};
    const savedAt = typeof row.at === "number" ? row.at : 0;
    if (!SecretBox.isEnvelope(stored)) {
      logSecrets.add(stored);
      if (this.#box) {
        if (this.#reseals) await this.#reseal(therapistId, row, stored, "clear");
      } else if (!this.#warnedClear.has(therapistId)) {
        this.#warnedClear.add(therapistId);
        this.#logger.warn(
          { therapist_id: therapistId },
          "refresh token stored in clear by an earlier build; set store.encryption_key to have it encrypted",
        );
      }
      return { token: stored, savedAt, meta };
    }
    if (!this.#box) {
      throw new CredentialDecryptError(
        therapistId,
        new SecretDecryptError("no_key", "store.encryption_key is not set", SecretBox.keyIdOf(stored)),
      );
    }
    let token: string;
    try {
      token = this.#box.open(stored, contextOf(therapistId));
    } catch (err) {
      if (err instanceof SecretDecryptError) throw new CredentialDecryptError(therapistId, err);
      throw err;
    }
    logSecrets.add(token);
    if (this.#reseals && this.#box.isStale(stored)) await this.#reseal(therapistId, row, token, "stale");
    return { token, savedAt, meta };
  }

  /**
   * Seals a token read in clear or under a previous key again under the current key, logging it; true when written.
   * An upkeep step: when the store refuses the write (disk full, Redis over maxmemory) it is logged and left for the
   * next read or start, and the token, which was readable, is still used.
   */
  async #reseal(
    therapistId: string,
    read: CredentialRow,
    token: string,
    was: "clear" | "stale",
  ): Promise<"sealed" | "newer" | "failed"> {
    const box = this.#box;
    if (!box) return "failed";
    const sealed: CredentialRow = { ...read, refresh_token: box.seal(token, contextOf(therapistId)) };
    try {
      // Only over the row as read: a token stored meanwhile (a connect, `calbridge authorize`, another replica) is
      // newer, and writing the old one back over it lost the therapist's fresh consent.
      if (!(await this.#table.replaceIf(keyOf(therapistId), read, sealed))) {
        this.#logger.info(
          { therapist_id: therapistId },
          "refresh token not sealed again: a newer one was stored meanwhile, and is kept",
        );
        return "newer";
      }
    } catch (err) {
      this.#logger.warn(
        { therapist_id: therapistId, err: err instanceof Error ? err.message : String(err) },
        was === "clear"
          ? "refresh token stored in clear by an earlier build could not be encrypted now (the store refused the write); it is used, and encrypted at the next read or start"
          : "refresh token sealed under a previous key could not be sealed again now (the store refused the write); it is used, and sealed again at the next read or start",
      );
      return "failed";
    }
    this.#logger.info(
      { therapist_id: therapistId },
      was === "clear"
        ? "refresh token stored in clear by an earlier build: now encrypted with store.encryption_key"
        : "refresh token sealed under a previous key: now encrypted with the current store.encryption_key",
    );
    return "sealed";
  }

  /**
   * Seals again under the current key every stored token sealed under a previous key or stored in clear by an earlier
   * build, whether or not its therapist is in the mapping now (removed, on leave, or with a token in the file): what a
   * start does, so that the old key can be removed after it and `calbridge purge --therapist ID` or a later re-mapping
   * still finds the token. One line per token (the therapist id, never the token). A token that cannot be opened is
   * left as it is and logged; a write the store refuses is logged and left for the next read or start. Idempotent:
   * replicas starting together each seal the same token under the same key, and each entry is written only over the
   * row as read (Table.replaceIf), so a token stored meanwhile (a connect) is not replaced by the one listed.
   */
  async resealAll(): Promise<{ resealed: number; failed: number; unreadable: number }> {
    const result = { resealed: 0, failed: 0, unreadable: 0 };
    const box = this.#box;
    if (!box || !this.#reseals) return result;
    const due = (row: CredentialRow | undefined): row is CredentialRow =>
      typeof row?.refresh_token === "string" &&
      row.refresh_token !== "" &&
      (!SecretBox.isEnvelope(row.refresh_token) || box.isStale(row.refresh_token));
    // Listed first, written after: no write while the listing is under way.
    const ids: string[] = [];
    for await (const [key, row] of this.#table.entries()) {
      if (key.startsWith(KEY_PREFIX) && due(row)) ids.push(key.slice(KEY_PREFIX.length));
    }
    for (const therapistId of ids) {
      const row = await this.#table.get(keyOf(therapistId));
      if (!due(row)) continue; // sealed meanwhile (another replica, a connect) or deleted
      const stored = row.refresh_token;
      let token: string;
      if (SecretBox.isEnvelope(stored)) {
        try {
          token = box.open(stored, contextOf(therapistId));
        } catch (err) {
          if (!(err instanceof SecretDecryptError)) throw err;
          result.unreadable++;
          this.#logger.warn(
            { therapist_id: therapistId, err: new CredentialDecryptError(therapistId, err).message },
            "stored refresh token not sealed again under the current key: it cannot be decrypted",
          );
          continue;
        }
      } else token = stored;
      logSecrets.add(token);
      const done = await this.#reseal(therapistId, row, token, SecretBox.isEnvelope(stored) ? "stale" : "clear");
      if (done === "sealed") result.resealed++;
      else if (done === "failed") result.failed++;
    }
    return result;
  }

  deleteRefreshToken(therapistId: string): Promise<boolean> {
    return this.#table.delete(keyOf(therapistId));
  }
}

const KEY_PREFIX = "oauth:";
const keyOf = (therapistId: string) => `${KEY_PREFIX}${therapistId}`;
/** The record an envelope belongs to, bound into it: a token copied to another therapist's row does not decrypt. */
const contextOf = (therapistId: string) => `credentials/oauth/${therapistId}`;

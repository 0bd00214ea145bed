// Owns durable state behind keyv: named tables (links, sync tokens, webhook inbox, dead letters, histories, ...)
// on an embedded SQLite file by default, or on Redis when two replicas share state. Errors are thrown, never swallowed.
import { existsSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import type KeyvSqlite from "@keyv/sqlite";
import Keyv, { type KeyvStoreAdapter } from "keyv";
import type { createClient } from "redis";
import { type Logger, silentLogger } from "../log.ts";
import { prepareSqliteFile } from "./file-modes.ts";
import { serializeForKeyv } from "./serialize.ts";
import { SqliteConnection } from "./sqlite-connection.ts";
import { SqliteFileIdentity } from "./sqlite-file-identity.ts";
import { sqliteNotices } from "./sqlite-notices.ts";

/** One keyed collection of JSON values. */
export interface Table<T> {
  get(key: string): Promise<T | undefined>;
  /**
   * The values of `keys`, in order. A record whose text cannot be read makes the whole read throw its
   * StoreRecordUnreadableError, unless `unreadable` is given: then it is told each such record, whose place reads
   * undefined (which the caller must not take for "absent"), and the others are read.
   */
  getMany(
    keys: string[],
    options?: { unreadable?: (error: StoreRecordUnreadableError) => void },
  ): Promise<(T | undefined)[]>;
  /** `ttlMs` makes the entry expire; expired entries read as absent. */
  set(key: string, value: T, ttlMs?: number): Promise<void>;
  delete(key: string): Promise<boolean>;
  /** Writes several entries in one round trip (one statement, one transaction on SQLite): group commit. */
  setMany(entries: { key: string; value: T; ttlMs?: number }[]): Promise<void>;
  deleteMany(keys: string[]): Promise<void>;
  /**
   * Writes each entry whose key is absent (or expired) and leaves present ones alone, in one round trip; true where
   * it wrote. Atomic per key: of two writers racing for one key (two replicas), one gets true.
   */
  addMany(entries: { key: string; value: T; ttlMs?: number }[]): Promise<boolean[]>;
  /**
   * Writes `value` (no expiry) only while the stored entry is still `expected`, as read from this table: true when
   * written, false when another writer changed or removed it meanwhile. Atomic (one statement, one script). For
   * entries stored without an expiry (one with an expiry never matches).
   */
  replaceIf(key: string, expected: T, value: T): Promise<boolean>;
  /**
   * Every live entry, in no particular order. `without` names a field of the stored object: entries that have it may be
   * left out where the backend can tell cheaply (SQLite, in SQL), so the caller still checks each entry it gets.
   */
  entries(options?: { without?: string }): AsyncIterable<[string, T]>;
}

/**
 * Values that can never be stored, whatever the store's state (a structure nested too deeply for the serializer, a
 * BigInt, a cycle), named by key, so a batch can drop them and store the rest. Never thrown for a store failure.
 */
export class UnstorableValueError extends Error {
  readonly keys: string[];
  constructor(keys: string[], cause: unknown) {
    const why = cause instanceof Error ? cause.message : String(cause);
    super(`store: ${keys.length === 1 ? "a value" : `${keys.length} values`} cannot be stored (${why})`, { cause });
    this.name = "UnstorableValueError";
    this.keys = keys;
  }
}

/**
 * A stored record that cannot be read back: its text is not JSON (a damaged page, a truncated write, a value put
 * there by hand or by another program). Named by table and key, never by its content (a parser's message quotes it);
 * nothing else in the store is affected. A listing skips it (and logs it once); reading it by key throws this.
 */
export class StoreRecordUnreadableError extends Error {
  readonly table: string;
  readonly key: string;
  constructor(table: string, key: string, cause: unknown) {
    super(
      `store: the record ${table}/${key} cannot be read (${cause instanceof Error ? cause.name : "not JSON"}); ` +
        "nothing else is affected: restore it from a backup or remove it",
      { cause },
    );
    this.name = "StoreRecordUnreadableError";
    this.table = table;
    this.key = key;
  }
}

/** Told of each record a listing skipped because it cannot be read (the store logs it once per key). */
type Unreadable = (error: StoreRecordUnreadableError) => void;

/** Logs each unreadable record once per process: a listing that meets it again (every sweep) says nothing more. */
function logUnreadable(logger: Logger): Unreadable {
  const told = new Set<string>();
  return (error) => {
    const id = `${error.table}/${error.key}`;
    if (told.has(id)) return;
    told.add(id);
    logger.error({ table: error.table, key: error.key }, `${error.message}; left out of every listing`);
  };
}

/**
 * The store did not answer in time or is not connected (Redis restarting, a network partition): nothing about any
 * value, and nothing was necessarily written. Callers answer "try again later" (a webhook gets 503).
 */
export class StoreUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "StoreUnavailableError";
  }
}

/** How long one Redis operation may take before it is reported as a failure (the command may still complete). */
export const REDIS_COMMAND_TIMEOUT_MS = 2000;
/** How long a close waits for Redis to answer QUIT before it drops the connection. */
const REDIS_QUIT_MS = 1000;

export const TABLES = [
  "links",
  "eventindex",
  "tokens",
  "inbox",
  "dead",
  "meta",
  "credentials",
  "channels",
  "holds",
  "notify",
  "invites",
  "history",
  "leftbehind",
] as const;
export type TableName = (typeof TABLES)[number];

export interface Store {
  readonly kind: "sqlite" | "redis" | "memory";
  table<T>(name: TableName): Table<T>;
  /** A cheap round trip that proves the store answers (for /readyz and doctor). */
  ping(): Promise<void>;
  /**
   * Removes expired entries nobody reads any more (done marks of old webhooks, ...); answers how many. keyv drops an
   * expired entry only when it is read, so on SQLite they would otherwise stay in the file. Redis expires keys
   * itself (0).
   */
  purgeExpired(): Promise<number>;
  /** The raw Redis client when kind is "redis" (leader lease); undefined otherwise. */
  readonly redis?: RedisClient;
  /** The leader lease's row when kind is "sqlite" (lease.ts); undefined otherwise. */
  readonly leaseRow?: LeaseRow;
  /**
   * Hints between processes sharing this store: Redis pub/sub, or on a SQLite file its `notices` table, read every
   * second (sqlite-notices.ts); undefined when only one process can use the store (memory, SQLite `:memory:`).
   */
  readonly notices?: Notices;
  close(): Promise<void>;
}

/** Cross-replica hints: delivered at most once, to whoever listens at that moment, so never the only copy of a fact. */
export interface Notices {
  publish(channel: string, message: string): Promise<void>;
  /** Listens on a connection of its own; resolves once subscribed, with the function that stops listening. */
  subscribe(channel: string, listener: (message: string) => void): Promise<() => void>;
}

export type RedisClient = ReturnType<typeof createClient>;

/** Who holds the leader lease of a SQLite store, and until when (epoch ms, on the holders' shared clock). */
export interface LeaseHolder {
  holder: string;
  host: string;
  pid: number;
  /** The pid namespace (Linux: /proc/self/ns/pid), so a pid is only read where it means the same process. */
  pidNs?: string;
  until: number;
}

/**
 * The leader lease as one row of the SQLite file (in "meta", under LEASE_ROW_KEY, without keyv's expiry so no purge
 * removes it). Each change is one statement: SQLite runs it under the file's write lock, so of two processes racing
 * for the row one wins. The file's locks hold between processes of one host, not across a network filesystem.
 */
export interface LeaseRow {
  /**
   * Takes the lease for `lease.holder` until `lease.until` when the row is absent, not a lease, already the holder's,
   * held by `orphan` (a holder known to be gone), or still exactly `lapsed` (the other holder's row as read, which the
   * caller judged lapsed: unchanged since, so its holder did not renew meanwhile); true when it did.
   */
  claim(lease: LeaseHolder, lapsed?: Pick<LeaseHolder, "holder" | "until">, orphan?: string): Promise<boolean>;
  /** Moves the lease's end to `until`, only while the row is still `holder`'s; true when it did. */
  renew(holder: string, until: number): Promise<boolean>;
  /** Deletes the row, only while it is still `holder`'s; true when it did. */
  release(holder: string): Promise<boolean>;
  /** The row as stored (lapsed or not); undefined when there is none. */
  read(): Promise<LeaseHolder | undefined>;
}

/** The lease row's key in the "meta" table (readable as `store.table("meta").get(LEASE_ROW_KEY)`). */
export const LEASE_ROW_KEY = "calbridge:leader";

/**
 * The backend's insert-if-absent, which keyv does not offer. It gets the rows as keyv would hand them to the adapter's
 * set (key with keyv's namespace prefix, value serialized with its expiry) and answers, per row, whether it wrote.
 */
type AddRows = (rows: AdapterRow[]) => Promise<boolean[]>;

/** A row as keyv hands it to its adapter: the key with keyv's namespace prefix, the value serialized with its expiry. */
interface AdapterRow {
  key: string;
  value: string;
  ttlMs?: number;
}

/** The backend's compare-and-set of one row serialized here: `row.value` written only over `expected`. */
type SwapRow = (row: AdapterRow, expected: string) => Promise<boolean>;

/**
 * The backend's multi-row overwrite of rows serialized here, where keyv's setMany would add an async step per entry
 * (SQLite; Redis and memory keep keyv's, which sets their expiry).
 */
type PutRows = (rows: AdapterRow[]) => Promise<unknown>;

/** A backend's own listing: each row's key as the table's callers wrote it, and its serialized value. */
type ListRows = (options?: { without?: string }) => AsyncIterable<[string, string]>;

/** Runs one store operation; a backend may fail it fast or bound its time (Redis), or just run it (SQLite). */
type Guard = <R>(op: () => Promise<R>) => Promise<R>;
const unguarded: Guard = (op) => op();

interface TableParts {
  /** The table's name, for errors about its records. */
  name: string;
  add: AddRows;
  list?: ListRows;
  guard?: Guard;
  put?: PutRows;
  swap: SwapRow;
  unreadable?: Unreadable;
}

class KeyvTable<T> implements Table<T> {
  readonly #keyv: Keyv<T>;
  readonly #name: string;
  readonly #add: AddRows;
  readonly #list: ListRows | undefined;
  readonly #guard: Guard;
  readonly #put: PutRows | undefined;
  readonly #unreadable: Unreadable;
  readonly #swap: SwapRow;
  constructor(keyv: Keyv<T>, parts: TableParts) {
    this.#swap = parts.swap;
    this.#keyv = keyv;
    this.#name = parts.name;
    this.#add = parts.add;
    this.#list = parts.list;
    this.#guard = parts.guard ?? unguarded;
    this.#put = parts.put;
    this.#unreadable = parts.unreadable ?? (() => {});
  }
  async get(key: string): Promise<T | undefined> {
    try {
      return await this.#guard(() => this.#keyv.get(key));
    } catch (err) {
      throw this.#readError(key, err);
    }
  }
  async getMany(
    keys: string[],
    options?: { unreadable?: (error: StoreRecordUnreadableError) => void },
  ): Promise<(T | undefined)[]> {
    if (keys.length === 0) return [];
    try {
      return (await this.#guard(() => this.#keyv.get(keys))) as (T | undefined)[];
    } catch (err) {
      if (!(err instanceof SyntaxError)) throw err;
      // One of them cannot be read: each on its own, so the error names it (and a caller that can leave it alone
      // gets the others).
      const out: (T | undefined)[] = [];
      for (const key of keys) {
        try {
          out.push(await this.get(key));
        } catch (e) {
          if (!(e instanceof StoreRecordUnreadableError) || !options?.unreadable) throw e;
          options.unreadable(e);
          out.push(undefined);
        }
      }
      return out;
    }
  }
  /** A record's text that is not JSON, as the error naming it; any other failure as it is. */
  #readError(key: string, err: unknown): unknown {
    return err instanceof SyntaxError ? new StoreRecordUnreadableError(this.#name, key, err) : err;
  }
  async set(key: string, value: T, ttlMs?: number): Promise<void> {
    let ok: boolean;
    try {
      ok = await this.#guard(() => this.#keyv.set(key, value, ttlMs));
    } catch (err) {
      throw (await this.#unstorable([{ key, value }], err)) ?? err;
    }
    if (ok === false) throw new Error(`store: writing ${this.#keyv.namespace}:${key} failed`);
  }
  delete(key: string): Promise<boolean> {
    return this.#guard(() => this.#keyv.delete(key));
  }
  async setMany(entries: { key: string; value: T; ttlMs?: number }[]): Promise<void> {
    if (entries.length === 0) return;
    if (this.#put) {
      const rows = await this.#rows(entries);
      await this.#guard(() => this.#put!(rows));
      return;
    }
    let results: boolean[] | undefined;
    try {
      results = await this.#guard(() =>
        this.#keyv.setMany(
          entries.map((e) => ({ key: e.key, value: e.value, ...(e.ttlMs !== undefined ? { ttl: e.ttlMs } : {}) })),
        ),
      );
    } catch (err) {
      // keyv serializes inside setMany: if some value is to blame, say which, so the others can be stored.
      throw (await this.#unstorable(entries, err)) ?? err;
    }
    // @keyv/redis answers nothing (undefined) for a batch it wrote; every backend throws when a write fails.
    if (Array.isArray(results) && results.some((ok) => ok === false)) {
      throw new Error(`store: writing ${entries.length} entries failed`);
    }
  }
  async deleteMany(keys: string[]): Promise<void> {
    if (keys.length > 0) await this.#guard(() => this.#keyv.deleteMany(keys));
  }
  async replaceIf(key: string, expected: T, value: T): Promise<boolean> {
    // The stored text is what keyv's serializer made of the value read (it round-trips): compared as text.
    const [before, after] = await this.#rows([
      { key, value: expected },
      { key, value },
    ]);
    return this.#guard(() => this.#swap(after!, before!.value));
  }

  async addMany(entries: { key: string; value: T; ttlMs?: number }[]): Promise<boolean[]> {
    if (entries.length === 0) return [];
    const rows = await this.#rows(entries);
    return this.#guard(() => this.#add(rows));
  }

  /**
   * The rows keyv would hand its adapter (key with the namespace, as keyv prefixes it; value serialized with its
   * expiry); throws UnstorableValueError naming every entry the serializer refuses.
   */
  async #rows(entries: { key: string; value: T; ttlMs?: number }[]): Promise<AdapterRow[]> {
    const serialize = this.#keyv.serialize ?? JSON.stringify;
    const namespace = this.#keyv.namespace;
    const prefix = namespace ? `${namespace}:` : undefined;
    const rows: AdapterRow[] = [];
    const unstorable: string[] = [];
    let cause: unknown;
    for (const e of entries) {
      try {
        // As keyv's own set: a ttl of 0 means no expiry.
        const ttlMs = e.ttlMs === 0 ? undefined : e.ttlMs;
        const expires = ttlMs === undefined ? undefined : Date.now() + ttlMs;
        const text = serialize({ value: e.value, expires });
        const key = prefix !== undefined && !e.key.startsWith(prefix) ? prefix + e.key : e.key;
        // Our serializer answers at once: no await (a turn of the microtask queue per entry) unless it is async.
        const value = typeof text === "string" ? text : await text;
        rows.push(ttlMs === undefined ? { key, value } : { key, value, ttlMs });
      } catch (err) {
        unstorable.push(e.key);
        cause ??= err;
      }
    }
    if (unstorable.length > 0) throw new UnstorableValueError(unstorable, cause);
    return rows;
  }

  /** The entries whose values the serializer refuses, as an error naming them; undefined when all serialize. */
  async #unstorable(entries: { key: string; value: T }[], failure: unknown): Promise<UnstorableValueError | undefined> {
    if (failure instanceof StoreUnavailableError) return undefined;
    const serialize = this.#keyv.serialize ?? JSON.stringify;
    const keys: string[] = [];
    let cause: unknown;
    for (const e of entries) {
      try {
        await serialize({ value: e.value });
      } catch (err) {
        keys.push(e.key);
        cause ??= err;
      }
    }
    return keys.length > 0 ? new UnstorableValueError(keys, cause) : undefined;
  }
  async *entries(options?: { without?: string }): AsyncIterable<[string, T]> {
    if (this.#list) {
      for await (const [key, raw] of this.#list(options)) {
        let data: Awaited<ReturnType<Keyv<T>["deserializeData"]>>;
        try {
          data = await this.#keyv.deserializeData<T>(raw);
        } catch (err) {
          // One damaged record stopped every listing of its table: the inbox's replay, the start (links, holds).
          const error = this.#readError(key, err);
          if (!(error instanceof StoreRecordUnreadableError)) throw error;
          this.#unreadable(error);
          continue;
        }
        if (!data || (typeof data.expires === "number" && data.expires <= Date.now())) continue;
        yield [key, data.value as T];
      }
      return;
    }
    const it = this.#keyv.iterator as unknown as (() => AsyncIterable<[string, T]>) | undefined;
    if (!it) throw new Error("store: this backend cannot list entries");
    for await (const [key, value] of it.call(this.#keyv)) yield [key, value];
  }
}

function keyvFor<T>(adapter: KeyvStoreAdapter | Map<unknown, unknown>, namespace: string): Keyv<T> {
  return new Keyv<T>({ store: adapter, namespace, throwOnErrors: true, serialize: serializeForKeyv });
}

export interface OpenStoreOptions {
  /** Resolve relative sqlite paths against this folder (default: the working directory). */
  cwd?: string;
  /** Redis: give up when the first connection is not made within this time (default 10 s); later drops reconnect. */
  connectTimeoutMs?: number;
  /** Where warnings about the store's files go (an SQLite folder open to other users, ...). */
  logger?: Logger;
  /** Redis: longest time one operation may take before it fails (default REDIS_COMMAND_TIMEOUT_MS). */
  commandTimeoutMs?: number;
  /**
   * SQLite: a missing database file is a StoreMissingError instead of a new, empty store (commands that read or decide
   * from what the daemon stored: an empty store would answer "nothing recorded", "nothing held").
   */
  mustExist?: boolean;
}

/**
 * The SQLite file store.url names is not there. Named with the absolute path looked at and, for a relative store.url,
 * the working folder it was resolved against: run from another folder than the daemon's, a relative path points
 * elsewhere.
 */
export class StoreMissingError extends Error {
  readonly file: string;
  constructor(url: string, file: string, cwd: string) {
    const path = url.slice("sqlite://".length);
    const how = isAbsolute(path) ? "" : ` (store.url ${url} is relative: resolved against the working folder ${cwd})`;
    super(
      `store: no SQLite store at ${file}${how}; nothing was created. Run the command from the daemon's working folder, or set store.url to the absolute path of the daemon's store (sqlite:///ABSOLUTE/PATH)`,
    );
    this.name = "StoreMissingError";
    this.file = file;
  }
}

/**
 * The StoreMissingError for a sqlite:// store.url whose file does not exist (resolved as openStore resolves it), or
 * undefined: the file is there, or the store is not a file (Redis, memory, sqlite://:memory:).
 */
export function missingStoreFile(url: string, cwd = process.cwd()): StoreMissingError | undefined {
  if (!url.startsWith("sqlite://")) return undefined;
  const path = url.slice("sqlite://".length);
  if (path === ":memory:") return undefined;
  const file = resolve(cwd, path);
  return existsSync(file) ? undefined : new StoreMissingError(url, file, cwd);
}

/**
 * Proves the store takes a write, which a ping does not (a full disk, a read-only file or volume, Redis over its
 * maxmemory with noeviction): one small entry of its own in "meta", expiring by itself.
 */
export async function probeWrite(store: Store, who: string, ttlMs = 60_000): Promise<void> {
  await store.table<number>("meta").set(`write_probe:${who}`, Date.now(), ttlMs);
}

/** Query parameters that may carry a credential in a store URL. */
const CREDENTIAL_PARAM = /([?&](?:password|pass|pwd|secret|token|auth|key)=)[^&#]*/gi;

/**
 * The store URL as it may be printed: user and password hidden (everything between "://" and the last "@", so a
 * password holding "@", "/", "?" or "#" does not leak in part), and credential-like query parameters hidden. Every place
 * that shows a store URL (doctor, authorize, connection errors) goes through this one function.
 */
export function redactStoreUrl(url: string): string {
  const scheme = url.indexOf("://");
  if (scheme === -1 || url.startsWith("sqlite:")) return url;
  const start = scheme + 3;
  // The last "@" anywhere: hiding too much (an "@" in the query) is better than showing part of a password.
  const at = url.lastIndexOf("@");
  const hidden = at >= start ? `${url.slice(0, start)}***${url.slice(at)}` : url;
  return hidden.replace(CREDENTIAL_PARAM, "$1***");
}

/** Opens the store named by `store.url`: sqlite://PATH, sqlite://:memory:, redis://..., rediss://..., memory:// */
export async function openStore(url: string, options: OpenStoreOptions = {}): Promise<Store> {
  if (options.mustExist) {
    const missing = missingStoreFile(url, options.cwd);
    if (missing) throw missing;
  }
  if (url.startsWith("sqlite://"))
    return openSqlite(url.slice("sqlite://".length), options.cwd, options.logger ?? silentLogger);
  if (url.startsWith("redis://") || url.startsWith("rediss://"))
    return openRedis(
      url,
      options.connectTimeoutMs ?? 10_000,
      options.commandTimeoutMs ?? REDIS_COMMAND_TIMEOUT_MS,
      options.logger ?? silentLogger,
    );
  if (url === "memory://") return openMemory();
  throw new Error(`store: unknown scheme in "${url}" (expected sqlite://, redis:// or rediss://)`);
}

/** How long a connection waits for another one's write lock before failing with SQLITE_BUSY. */
const SQLITE_BUSY_TIMEOUT_MS = 10_000;

// The drivers load with the store that needs them: the Redis client and its modules (~1,100 files) would otherwise
// add ~10 MB to every SQLite daemon, and the sqlite3 native addon would load in every Redis replica.
async function openSqlite(path: string, cwd: string | undefined, logger: Logger): Promise<Store> {
  const { default: KeyvSqlite } = await import("@keyv/sqlite");
  const file = path === ":memory:" ? path : resolve(cwd ?? process.cwd(), path);
  const unreadable = logUnreadable(logger);
  if (file !== ":memory:") prepareSqliteFile(file, logger);
  const identity =
    file === ":memory:" ? undefined : new SqliteFileIdentity(file, (err) => logger.error({ store: file }, err.message));
  const adapters = new Map<TableName, KeyvSqlite>();
  const tables = new Map<TableName, KeyvTable<unknown>>();
  // One connection per table (iterationLimit pages entries() in large steps instead of 10 at a time). The first
  // connection switches the file to WAL alone (a journal-mode change needs the file to itself); WAL then lets the
  // other connections read while one writes, and synchronous=NORMAL keeps every committed write across a process
  // crash (SIGKILL): only a power loss may drop the last transactions. secure_delete zeroes what a delete or an
  // overwrite frees (without it, purged rows, customer details included, stay readable in free pages of the file),
  // and journal_size_limit=0 truncates the write-ahead log when it is reset, so old page images do not linger there.
  for (const name of TABLES) {
    const adapter = new KeyvSqlite({
      uri: `sqlite://${file}`,
      table: name,
      busyTimeout: SQLITE_BUSY_TIMEOUT_MS,
      iterationLimit: 1000,
    });
    await useOwnConnection(adapter, file, name, identity);
    addSqliteSetMany(adapter, name);
    if (adapters.size === 0) await adapter.query("PRAGMA journal_mode=WAL");
    await adapter.query("PRAGMA synchronous=NORMAL");
    await adapter.query("PRAGMA secure_delete=ON");
    await adapter.query("PRAGMA journal_size_limit=0");
    adapters.set(name, adapter);
    tables.set(
      name,
      new KeyvTable(keyvFor(adapter, name), {
        name,
        add: (rows) => sqliteAdd(adapter, name, rows),
        list: sqliteList(adapter, name),
        put: (rows) => sqlitePut(adapter, name, rows),
        swap: async (row, expected) => {
          const done = (await adapter.query(
            `UPDATE ${name} SET value = ? WHERE key = ? AND value = ? RETURNING key`,
            row.value,
            row.key,
            expected,
          )) as unknown[];
          return done.length > 0;
        },
        unreadable,
      }),
    );
  }
  identity?.pin();
  await adoptSeenTable(adapters.get("inbox")!);
  const first = adapters.get("links")!;
  // A standby's accepted webhooks and push notifications reach the leader within a second (not at its 30 s sweep).
  const notices = file === ":memory:" ? undefined : sqliteNotices(file, SQLITE_BUSY_TIMEOUT_MS, logger, identity);
  return {
    kind: "sqlite",
    leaseRow: sqliteLeaseRow(adapters.get("meta")!),
    ...(notices ? { notices } : {}),
    table: <T>(name: TableName) => tables.get(name) as Table<T>,
    ping: async () => {
      await first.query("SELECT 1");
    },
    purgeExpired: async () => {
      let removed = 0;
      for (const [name, adapter] of adapters) {
        const rows = (await adapter.query(
          `DELETE FROM ${name} WHERE ${expiresOf("value")} <= ? RETURNING key`,
          Date.now(),
        )) as unknown[];
        removed += rows.length;
      }
      return removed + ((await notices?.purge()) ?? 0);
    },
    close: async () => {
      await notices?.close();
      for (const adapter of adapters.values()) await adapter.disconnect();
    },
  };
}

/**
 * Moves the adapter onto a connection of ours that keeps its statements prepared (`SqliteConnection`): @keyv/sqlite
 * sends every query through its instance's `query` and closes through `close`, both replaced here once its own
 * connection has created the table and is closed. The table is created again on ours, for `:memory:` (where each
 * connection is a database of its own) and in case the file changed hands in between.
 */
async function useOwnConnection(
  adapter: KeyvSqlite,
  file: string,
  table: TableName,
  identity: SqliteFileIdentity | undefined,
): Promise<void> {
  await adapter.query("SELECT 1");
  await adapter.disconnect();
  const connection = await SqliteConnection.open(file, SQLITE_BUSY_TIMEOUT_MS, identity);
  await connection.query(`CREATE TABLE IF NOT EXISTS ${table}(key VARCHAR(255) PRIMARY KEY, value TEXT )`);
  Object.assign(adapter, { query: connection.query, close: connection.close });
}

/**
 * Earlier builds kept processed webhook ids in a table of their own, "seen" ({doneAt} for 7 days); they are
 * the inbox's done marks now, the same value under the inbox's key. Moving them keeps duplicate detection across an
 * upgrade (a mark wins over a pending entry of the same id, as the old replay decided) and drops a table nothing reads
 * or purges any more. One transaction: a crash leaves the old table whole, and the next start moves it.
 * On Redis the old keys expire by themselves.
 */
async function adoptSeenTable(inbox: KeyvSqlite): Promise<void> {
  const found = (await inbox.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'seen'")) as unknown[];
  if (found.length === 0) return;
  await inbox.query("BEGIN IMMEDIATE");
  try {
    await inbox.query(
      `INSERT INTO inbox (key, value) SELECT 'inbox:' || substr(key, 6), value FROM seen WHERE key LIKE 'seen:%'
       ON CONFLICT(key) DO UPDATE SET value = excluded.value`,
    );
    await inbox.query("DROP TABLE seen");
    await inbox.query("COMMIT");
  } catch (err) {
    await inbox.query("ROLLBACK").catch(() => {});
    throw err;
  }
}

/**
 * @keyv/sqlite writes one row a statement (several rows in one INSERT are one transaction: one commit), matches
 * getMany's rows to keys with a linear search per key (10,000 links took seconds of CPU), and reads every row before a
 * delete: all replaced here.
 */
/** Rows per multi-row statement (as bound parameters: two each, well under SQLite's limit of 32,766). */
const SQLITE_CHUNK = 400;

/** What JSON carries into SQLite unchanged: well-formed text (no lone surrogate) without NUL (json_extract ends there). */
const crossesJson = (text: unknown) => typeof text === "string" && text.isWellFormed() && !text.includes("\0");

/**
 * `key IN ...` for `keys`: one JSON array as one parameter (fixed statement text, any number of keys), and the keys
 * JSON would change (a lone surrogate, a NUL: rare) one parameter each beside it.
 */
function keysIn(keys: string[]): { sql: string; params: unknown[] } {
  const awkward = keys.filter((k) => !crossesJson(k));
  const inJson = awkward.length === 0 ? keys : keys.filter(crossesJson);
  const sql = "key IN (SELECT value FROM json_each(?))";
  if (awkward.length === 0) return { sql, params: [JSON.stringify(inJson)] };
  return {
    sql: `(${sql} OR key IN (${awkward.map(() => "?").join(", ")}))`,
    params: [JSON.stringify(inJson), ...awkward],
  };
}

/**
 * The rows of a multi-row write as the source of an INSERT: one JSON array bound as one parameter, so the statement's
 * text is the same for any number of rows and its prepared form is kept (SqliteConnection), in array order (a key
 * written twice keeps the later value, as with VALUES). When JSON would change a row (a key with a lone surrogate or a
 * NUL; such a value that is not a serialized object), the rows are bound one parameter each instead, as before.
 */
function rowsSource(rows: { key: string; value: unknown }[]): { sql: string; params: unknown[] } {
  // A value as keyv serializes it is a JSON object's text: it goes into the array as that object, not as a string (no
  // escaping of each of its quotes here, nor unescaping there, a microsecond a webhook). json_extract answers an
  // element that is an object as the text it was written in (SQLite keeps the literals' text; the serializer writes
  // no whitespace), and one that is a string as that string, so one statement takes both forms. Being
  // JSON.stringify's output, such a value holds neither a lone surrogate nor a NUL (both escaped): only its key is
  // looked at for those.
  if (rows.every((r) => crossesJson(r.key) && typeof r.value === "string" && r.value.startsWith("{"))) {
    return {
      sql: JSON_ROWS,
      params: [`[${rows.map((r) => `[${JSON.stringify(r.key)},${r.value as string}]`).join(",")}]`],
    };
  }
  if (rows.every((r) => crossesJson(r.key) && crossesJson(r.value))) {
    return { sql: JSON_ROWS, params: [JSON.stringify(rows.map((r) => [r.key, r.value]))] };
  }
  return { sql: `VALUES ${rows.map(() => "(?, ?)").join(", ")}`, params: rows.flatMap((r) => [r.key, r.value]) };
}

/** The rows of a JSON array of [key, value] pairs, in array order. */
const JSON_ROWS =
  "SELECT json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]') FROM json_each(?) AS j WHERE true ORDER BY j.key";

function addSqliteSetMany(adapter: KeyvSqlite, table: string): void {
  Object.assign(adapter, {
    async getMany(keys: string[]): Promise<(string | undefined)[]> {
      const among = keysIn(keys);
      const rows = (await adapter.query(`SELECT key, value FROM ${table} WHERE ${among.sql}`, ...among.params)) as {
        key: string;
        value: string;
      }[];
      const byKey = new Map(rows.map((r) => [r.key, r.value]));
      // A lone surrogate is stored (and compared) as U+FFFD: the row of such a key comes back under that form.
      return keys.map((k) => byKey.get(k.isWellFormed() ? k : k.toWellFormed()));
    },
    // One statement each (the adapter's own read every row before deleting it).
    async delete(key: string): Promise<boolean> {
      const rows = (await adapter.query(`DELETE FROM ${table} WHERE key = ? RETURNING key`, key)) as unknown[];
      return rows.length > 0;
    },
    async deleteMany(keys: string[]): Promise<boolean> {
      const among = keysIn(keys);
      const rows = (await adapter.query(
        `DELETE FROM ${table} WHERE ${among.sql} RETURNING key`,
        ...among.params,
      )) as unknown[];
      return rows.length > 0;
    },
    setMany: (entries: { key: string; value: unknown }[]) => sqlitePut(adapter, table, entries),
  });
}

/** The lease row's SQL: the value is keyv's serialized form ({"value": LeaseHolder}), read back with json_extract. */
function sqliteLeaseRow(meta: KeyvSqlite): LeaseRow {
  const key = `meta:${LEASE_ROW_KEY}`;
  const field = (column: string, name: string) =>
    `(CASE WHEN json_valid(${column}) THEN json_extract(${column}, '$.value.${name}') END)`;
  const written = (rows: unknown) => (rows as unknown[]).length > 0;
  return {
    async claim(lease, lapsed, orphan) {
      // A row that is not a lease (unreadable, no end) is taken too: nobody could be holding it. No clock is compared
      // here: a lapsed row is one the caller saw unchanged for a lease of its own monotonic time.
      const rows = await meta.query(
        `INSERT INTO meta (key, value) VALUES (?, ?)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value
         WHERE ${field("meta.value", "until")} IS NULL
            OR ${field("meta.value", "holder")} IN (?, ?)
            OR (${field("meta.value", "holder")} = ? AND ${field("meta.value", "until")} = ?)
         RETURNING key`,
        key,
        JSON.stringify({ value: lease }),
        lease.holder,
        orphan ?? lease.holder,
        lapsed?.holder ?? lease.holder,
        lapsed?.until ?? lease.until,
      );
      return written(rows);
    },
    async renew(holder, until) {
      const rows = await meta.query(
        `UPDATE meta SET value = json_set(value, '$.value.until', ?) WHERE key = ? AND ${field("value", "holder")} = ?
         RETURNING key`,
        until,
        key,
        holder,
      );
      return written(rows);
    },
    async release(holder) {
      const rows = await meta.query(
        `DELETE FROM meta WHERE key = ? AND ${field("value", "holder")} = ? RETURNING key`,
        key,
        holder,
      );
      return written(rows);
    },
    async read() {
      const rows = (await meta.query("SELECT value FROM meta WHERE key = ?", key)) as { value: string }[];
      const raw = rows[0]?.value;
      if (raw === undefined) return undefined;
      try {
        const lease = (JSON.parse(raw) as { value?: LeaseHolder }).value;
        return lease && typeof lease.holder === "string" && typeof lease.until === "number" ? lease : undefined;
      } catch {
        return undefined;
      }
    },
  };
}

/** Rows one listing statement reads. */
const SQLITE_LIST_PAGE = 1000;

/**
 * A table's rows in key order, a page at a time, each page starting after the last key of the one before (an index
 * range: @keyv/sqlite's own listing pages with OFFSET, which re-reads every earlier row for each page, 3 s of CPU for
 * an inbox of 100,000 done marks, and skips rows when some are deleted meanwhile). Keys as the table's callers wrote
 * them (without keyv's namespace prefix).
 */
function sqliteList(adapter: KeyvSqlite, table: string): ListRows {
  const prefix = `${table}:`;
  return async function* (options) {
    const without = options?.without;
    if (without !== undefined && !/^\w+$/.test(without)) throw new Error(`store: not a field name: ${without}`);
    // A row that is not JSON is listed (keyv's reading of it decides), never a failure of the whole statement.
    const filter =
      without === undefined
        ? ""
        : ` AND (CASE WHEN json_valid(value) THEN json_extract(value, '$.value.${without}') END) IS NULL`;
    let after = "";
    for (;;) {
      const rows = (await adapter.query(
        `SELECT key, value FROM ${table} WHERE key > ?${filter} ORDER BY key LIMIT ${SQLITE_LIST_PAGE}`,
        after,
      )) as { key: string; value: string }[];
      for (const r of rows) if (r.key.startsWith(prefix)) yield [r.key.slice(prefix.length), r.value];
      if (rows.length < SQLITE_LIST_PAGE) return;
      after = rows[rows.length - 1]!.key;
    }
  };
}

/** Overwrites rows (keys prefixed, values serialized), a statement per SQLITE_CHUNK rows. */
async function sqlitePut(
  adapter: KeyvSqlite,
  table: string,
  entries: { key: string; value: unknown }[],
): Promise<boolean[]> {
  for (let i = 0; i < entries.length; i += SQLITE_CHUNK) {
    const rows = rowsSource(entries.slice(i, i + SQLITE_CHUNK));
    await adapter.query(
      `INSERT INTO ${table} (key, value) ${rows.sql} ON CONFLICT(key) DO UPDATE SET value = excluded.value`,
      ...rows.params,
    );
  }
  return entries.map(() => true);
}

/**
 * The expiry keyv serialized into a row's value, as SQL; NULL (never expired) for a row without one and for a row
 * that is not JSON, which would otherwise fail the whole statement it appears in.
 */
const expiresOf = (column: string) => `(CASE WHEN json_valid(${column}) THEN json_extract(${column}, '$.expires') END)`;

/**
 * INSERT that leaves a live row alone and replaces an expired one (keyv keeps the expiry inside the serialized value
 * and drops expired rows only when it reads them); RETURNING names the rows written.
 */
async function sqliteAdd(
  adapter: KeyvSqlite,
  table: string,
  rows: { key: string; value: string }[],
): Promise<boolean[]> {
  const written = new Set<string>();
  for (let i = 0; i < rows.length; i += SQLITE_CHUNK) {
    const source = rowsSource(rows.slice(i, i + SQLITE_CHUNK));
    const returned = (await adapter.query(
      `INSERT INTO ${table} (key, value) ${source.sql}
       ON CONFLICT(key) DO UPDATE SET value = excluded.value
       WHERE ${expiresOf(`${table}.value`)} <= ?
       RETURNING key`,
      ...source.params,
      Date.now(),
    )) as { key: string }[];
    for (const r of returned) written.add(r.key);
  }
  return rows.map((r) => written.has(r.key.isWellFormed() ? r.key : r.key.toWellFormed()));
}

/** Redis' compare-and-set of one key: SET only while GET answers the expected text (an absent key never matches). */
const SWAP_SCRIPT =
  "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 else return 0 end";

async function openRedis(
  url: string,
  connectTimeoutMs: number,
  commandTimeoutMs: number,
  logger: Logger,
): Promise<Store> {
  const unreadable = logUnreadable(logger);
  const [{ createClient }, { default: KeyvRedis }] = await Promise.all([import("redis"), import("@keyv/redis")]);
  // While Redis is away, node-redis would hold every command in its offline queue until it reconnects (a webhook
  // then waits minutes for its answer): commands fail at once instead, and each one has a time limit, for a
  // connection that is open but silent (a partition). The callers report the failure (a webhook gets 503 and is
  // retried by its sender).
  const client = createClient({
    url,
    disableOfflineQueue: true,
    commandOptions: { timeout: commandTimeoutMs },
    socket: { reconnectStrategy: (retries) => Math.min(retries * 200, 5000) },
  });
  // Each table's keyv adapter listens to the one client (error, connect, reconnecting, ...): not a leak.
  client.setMaxListeners(TABLES.length + 10);
  let lastError: unknown;
  client.on("error", (err) => {
    // Reconnection is automatic; commands issued meanwhile fail and the callers report them.
    lastError = err;
  });
  // The client retries a refused first connection forever; a start against an unreachable Redis must say so instead.
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      client.connect(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const why = lastError instanceof Error ? ` (${lastError.message})` : "";
          reject(
            new Error(`store: Redis at ${redactStoreUrl(url)} did not answer within ${connectTimeoutMs} ms${why}`),
          );
        }, connectTimeoutMs);
      }),
    ]);
  } catch (err) {
    if (client.isOpen) client.destroy();
    throw err;
  } finally {
    clearTimeout(timer);
  }
  const shown = redactStoreUrl(url);
  // MULTI/EXEC (batched writes, insert-if-absent) bypasses both the offline check and the command time limit.
  const guard: Guard = async (op) => {
    if (!client.isReady) throw new StoreUnavailableError(`store: Redis at ${shown} is not connected (reconnecting)`);
    const running = op();
    running.catch(() => {}); // settles after a timeout too; its outcome is no longer anyone's
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        running,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new StoreUnavailableError(`store: Redis at ${shown} did not answer within ${commandTimeoutMs} ms`),
              ),
            commandTimeoutMs,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  };
  const tables = new Map<TableName, KeyvTable<unknown>>();
  for (const name of TABLES) {
    const adapter = new KeyvRedis(client as never, { namespace: `calbridge:${name}`, throwOnErrors: true });
    // SET NX in one MULTI: Redis expires keys itself, so "absent" already means "absent or expired".
    const add: AddRows = async (rows) => {
      const multi = client.multi();
      for (const r of rows) {
        const key = adapter.createKeyPrefix(r.key, adapter.namespace);
        multi.set(key, r.value, r.ttlMs === undefined ? { NX: true } : { NX: true, PX: r.ttlMs });
      }
      const replies = await multi.exec();
      return replies.map((reply) => String(reply) === "OK");
    };
    // keyv's own listing scans 10 keys a round trip across the whole database and, the namespace holding a colon,
    // hands back keys with half the prefix left on ("dead:appt:1"): this one asks Redis for this table's keys only.
    const prefix = adapter.createKeyPrefix(`calbridge:${name}:`, adapter.namespace);
    const list: ListRows = async function* () {
      for await (const keys of client.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000, TYPE: "string" })) {
        if (keys.length === 0) continue;
        const values = await client.mGet(keys);
        for (const [i, raw] of values.entries()) {
          // null: expired or deleted between the scan and the read.
          if (raw !== null) yield [keys[i]!.slice(prefix.length), raw];
        }
      }
    };
    const swap: SwapRow = async (row, expected) =>
      Number(
        await client.eval(SWAP_SCRIPT, {
          keys: [adapter.createKeyPrefix(row.key, adapter.namespace)],
          arguments: [expected, row.value],
        }),
      ) === 1;
    tables.set(
      name,
      new KeyvTable(keyvFor(adapter, `calbridge:${name}`), { name, add, list, guard, swap, unreadable }),
    );
  }
  const subscribers = new Set<RedisClient>();
  const notices: Notices = {
    publish: async (channel, message) => {
      await client.publish(channel, message);
    },
    subscribe: async (channel, listener) => {
      // A connection in subscriber mode takes no other commands, so each subscription gets its own.
      const sub = client.duplicate();
      sub.on("error", () => {});
      subscribers.add(sub);
      const stop = () => {
        subscribers.delete(sub);
        if (sub.isOpen) sub.destroy();
      };
      try {
        await sub.connect();
        await sub.subscribe(channel, (message) => listener(message));
      } catch (err) {
        stop();
        throw err;
      }
      return stop;
    },
  };
  return {
    kind: "redis",
    redis: client,
    notices,
    table: <T>(name: TableName) => tables.get(name) as Table<T>,
    ping: async () => {
      await guard(() => client.ping());
    },
    purgeExpired: async () => 0,
    close: async () => {
      for (const sub of subscribers) if (sub.isOpen) sub.destroy();
      subscribers.clear();
      if (!client.isOpen) return;
      // A Redis that is away cannot take QUIT (it would fail, or wait): the connection is just dropped.
      if (!client.isReady) return client.destroy();
      // Nor can one that stopped answering with the connection still open (a partition): QUIT gets a second.
      let timer: NodeJS.Timeout | undefined;
      const unanswered = new Promise<void>((r) => {
        timer = setTimeout(r, REDIS_QUIT_MS);
      });
      await Promise.race([client.quit().catch(() => {}), unanswered]);
      clearTimeout(timer);
      if (client.isOpen) client.destroy();
    },
  };
}

function openMemory(): Store {
  const tables = new Map<TableName, KeyvTable<unknown>>();
  const maps: Map<string, string>[] = [];
  for (const name of TABLES) {
    const map = new Map<string, string>();
    maps.push(map);
    const add: AddRows = async (rows) =>
      rows.map((r) => {
        const held = map.get(r.key);
        const expires = held === undefined ? undefined : (JSON.parse(held) as { expires?: number }).expires;
        if (held !== undefined && !(typeof expires === "number" && expires <= Date.now())) return false;
        map.set(r.key, r.value);
        return true;
      });
    const swap: SwapRow = async (row, expected) => {
      if (map.get(row.key) !== expected) return false;
      map.set(row.key, row.value);
      return true;
    };
    tables.set(name, new KeyvTable(keyvFor(map, name), { name, add, swap }));
  }
  return {
    kind: "memory",
    table: <T>(name: TableName) => tables.get(name) as Table<T>,
    ping: async () => {},
    purgeExpired: async () => {
      let removed = 0;
      for (const map of maps) {
        for (const [key, held] of map) {
          const { expires } = JSON.parse(held) as { expires?: number };
          if (typeof expires === "number" && expires <= Date.now() && map.delete(key)) removed++;
        }
      }
      return removed;
    },
    close: async () => {},
  };
}

// Owns the notices between processes that share one SQLite file (a daemon and its standby, `calbridge authorize`): the
// file's counterpart of Redis pub/sub. A notice is a row of the `notices` table (an ever-growing sequence number, the
// channel, the message, when); each listening process reads the rows past the last one it saw, one indexed query a
// second on a connection of its own (a read in WAL mode takes no lock a writer waits for), and hands them to the
// listeners of their channel. As with Redis, a notice is a hint, delivered at most once to whoever listens at that
// moment (rows are removed a minute after they were written): never the only copy of a fact.
import type { Logger } from "../log.ts";
import { SqliteConnection } from "./sqlite-connection.ts";
import type { SqliteFileIdentity } from "./sqlite-file-identity.ts";

/** How often a listening process reads the notices written since its last read. */
export const NOTICE_POLL_MS = 1000;
/** How long a notice stays in the file: any listener has read it by then (or missed it, as with pub/sub). */
const NOTICE_KEEP_MS = 60_000;

/** The store's `Notices` (store.ts, not imported here: it imports this file), with what the store itself calls. */
export interface SqliteNotices {
  publish(channel: string, message: string): Promise<void>;
  subscribe(channel: string, listener: (message: string) => void): Promise<() => void>;
  /** Removes notices past their minute (the hourly purge; a publish removes them too); answers how many. */
  purge(): Promise<number>;
  /** Stops listening and closes the connection (the store's close). */
  close(): Promise<void>;
}

export function sqliteNotices(
  file: string,
  busyTimeoutMs: number,
  logger: Logger,
  identity?: SqliteFileIdentity,
): SqliteNotices {
  let connection: Promise<SqliteConnection> | undefined;
  let closed = false;
  const listeners = new Map<string, Set<(message: string) => void>>();
  /** The last notice read (its sequence number); undefined until the first read of a listening process. */
  let last: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let reading: Promise<void> | undefined;
  let failing = false;

  /** The connection, opened (and the table created) at the first use: a command that neither tells nor listens opens none. */
  const db = (): Promise<SqliteConnection> => {
    if (closed) return Promise.reject(new Error("store: closed"));
    if (connection) return connection;
    const opening = (async () => {
      const c = await SqliteConnection.open(file, busyTimeoutMs, identity);
      try {
        // As the store's other connections (store.ts openSqlite); the file is in WAL mode already.
        await c.query("PRAGMA synchronous=NORMAL");
        await c.query("PRAGMA secure_delete=ON");
        // Per connection: a notice can be the first write after a checkpoint, and the log it restarts must be truncated
        // like the store's (old page images of purged rows would otherwise stay in the -wal file).
        await c.query("PRAGMA journal_size_limit=0");
        await c.query(
          "CREATE TABLE IF NOT EXISTS notices (seq INTEGER PRIMARY KEY AUTOINCREMENT, channel TEXT NOT NULL, message TEXT NOT NULL, at INTEGER NOT NULL)",
        );
      } catch (err) {
        await c.close().catch(() => {});
        throw err;
      }
      return c;
    })();
    connection = opening;
    // A file that could not be opened (busy, a permission) is tried again at the next use.
    opening.catch(() => {
      if (connection === opening) connection = undefined;
    });
    return opening;
  };

  const read = async (): Promise<void> => {
    const c = await db();
    if (last === undefined) {
      const rows = (await c.query("SELECT coalesce(max(seq), 0) AS seq FROM notices")) as { seq: number }[];
      last = rows[0]?.seq ?? 0;
      return;
    }
    // AUTOINCREMENT: a sequence number is never used twice, also once the newest rows were removed.
    const rows = (await c.query("SELECT seq, channel, message FROM notices WHERE seq > ? ORDER BY seq", last)) as {
      seq: number;
      channel: string;
      message: string;
    }[];
    for (const row of rows) {
      last = row.seq;
      for (const listener of listeners.get(row.channel) ?? []) {
        try {
          listener(row.message);
        } catch (err) {
          logger.warn({ err, channel: row.channel }, "store: a notice listener failed");
        }
      }
    }
  };

  /** Reads every NOTICE_POLL_MS while anyone listens (one loop, however many subscriptions). */
  let looping = false;
  const loop = () => {
    if (closed || listeners.size === 0) {
      looping = false;
      return;
    }
    looping = true;
    timer = setTimeout(() => {
      timer = undefined;
      reading = read().then(
        () => {
          failing = false;
        },
        (err: unknown) => {
          // A busy or unreadable file: the next read tries again (the notices are hints; sweeps and polls remain).
          if (!failing) logger.warn({ err }, "store: notices from other processes not read; tried again in a second");
          failing = true;
        },
      );
      void reading.then(loop);
    }, NOTICE_POLL_MS);
    timer.unref();
  };

  return {
    async publish(channel, message) {
      const c = await db();
      const now = Date.now();
      await c.query("INSERT INTO notices (channel, message, at) VALUES (?, ?, ?)", channel, message, now);
      await c.query("DELETE FROM notices WHERE at < ? RETURNING seq", now - NOTICE_KEEP_MS);
    },
    async purge() {
      // A process that neither told nor listened has not created the table.
      if (!connection) return 0;
      const c = await db();
      return (
        (await c.query("DELETE FROM notices WHERE at < ? RETURNING seq", Date.now() - NOTICE_KEEP_MS)) as unknown[]
      ).length;
    },
    async subscribe(channel, listener) {
      let set = listeners.get(channel);
      if (!set) {
        set = new Set();
        listeners.set(channel, set);
      }
      set.add(listener);
      // Notices written from now on (not those of before): as a Redis subscription.
      if (last === undefined) await read();
      if (!looping) loop();
      return () => {
        set.delete(listener);
        if (set.size === 0) listeners.delete(channel);
        if (listeners.size === 0 && timer) {
          clearTimeout(timer);
          timer = undefined;
          looping = false;
        }
      };
    },
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      listeners.clear();
      await reading?.catch(() => {});
      const c = await connection?.catch(() => undefined);
      connection = undefined;
      await c?.close();
    },
  };
}

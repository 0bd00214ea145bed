// Owns one SQLite connection of the store and the statements it keeps prepared. node-sqlite3's `Database#all`
// compiles a new statement on the threadpool, runs it there in a second round trip, and finalizes it: two hand-offs
// between threads per query, each costing the main thread a thread wake-up and a completion callback (the larger part
// of a webhook's store cost under load, measured). A statement with parameters is compiled once here and kept, so a
// query is one round trip. The store's own SQL is fixed text (multi-row writes pass their rows as one JSON array), so
// the kept statements are a few per table; a bound still applies, in case a caller builds SQL from data.
import type { Database, Statement } from "sqlite3";
import type { SqliteFileIdentity } from "./sqlite-file-identity.ts";

/** Statements kept per connection; beyond it, the one kept longest is finalized. */
const KEPT_STATEMENTS = 32;

export class SqliteConnection {
  readonly #db: Database;
  readonly #identity: SqliteFileIdentity | undefined;
  readonly #kept = new Map<string, Promise<Statement>>();
  #closed = false;

  private constructor(db: Database, identity: SqliteFileIdentity | undefined) {
    this.#db = db;
    this.#identity = identity;
  }

  /** `identity`: the store's file, whose every query first makes sure it is still the one at the path. */
  static async open(file: string, busyTimeoutMs: number, identity?: SqliteFileIdentity): Promise<SqliteConnection> {
    const { default: sqlite3 } = await import("sqlite3");
    const db = await new Promise<Database>((resolve, reject) => {
      const opened: Database = new sqlite3.Database(file, (error) => (error ? reject(error) : resolve(opened)));
    });
    db.configure("busyTimeout", busyTimeoutMs);
    return new SqliteConnection(db, identity);
  }

  /**
   * Runs `sql` and answers its rows. Parameters come as arguments or as one array (as @keyv/sqlite passes them).
   * With parameters, the statement is prepared once and kept; without, it runs as a one-off (PRAGMA, BEGIN, DDL).
   */
  query = async (sql: string, ...params: unknown[]): Promise<unknown[]> => {
    if (this.#closed) throw new Error("store: the SQLite connection is closed");
    this.#identity?.assert();
    if (params.length === 0) {
      return new Promise((resolve, reject) => {
        this.#db.all(sql, (error: Error | null, rows: unknown[]) => (error ? reject(error) : resolve(rows)));
      });
    }
    const statement = await this.#statement(sql);
    return new Promise((resolve, reject) => {
      statement.all(...params, (error: Error | null, rows: unknown[]) => (error ? reject(error) : resolve(rows)));
    });
  };

  /** Finalizes the kept statements (SQLite refuses to close a connection that has any), then closes. */
  close = async (): Promise<void> => {
    if (this.#closed) return;
    this.#closed = true;
    const kept = [...this.#kept.values()];
    this.#kept.clear();
    for (const pending of kept) {
      const statement = await pending.catch(() => undefined);
      if (statement) await new Promise<void>((resolve) => statement.finalize(() => resolve()));
    }
    await new Promise<void>((resolve, reject) => this.#db.close((error) => (error ? reject(error) : resolve())));
  };

  #statement(sql: string): Promise<Statement> {
    const found = this.#kept.get(sql);
    if (found) return found;
    const prepared = new Promise<Statement>((resolve, reject) => {
      const statement: Statement = this.#db.prepare(sql, (error: Error | null) =>
        error ? reject(error) : resolve(statement),
      );
    });
    // A statement that does not compile (a syntax error, a missing table) is not kept: the next call tries again.
    prepared.catch(() => {
      if (this.#kept.get(sql) === prepared) this.#kept.delete(sql);
    });
    this.#kept.set(sql, prepared);
    if (this.#kept.size > KEPT_STATEMENTS) {
      const [oldest, evicted] = this.#kept.entries().next().value as [string, Promise<Statement>];
      this.#kept.delete(oldest);
      // Finalizing waits for the statement's queued work in node-sqlite3, so a query still using it completes.
      void evicted.then(
        (statement) => statement.finalize(),
        () => undefined,
      );
    }
    return prepared;
  }
}

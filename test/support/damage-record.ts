// Owns damaging a stored row on purpose in tests: a record whose text cannot be read, as a torn write, a bad page or a
// hand edit leaves it in the SQLite store file.
import sqlite3 from "sqlite3";
import type { Harness } from "../sync/support.ts";

/** Truncates a stored row's text (table `table`, key `key`) in the SQLite file at `path`. */
export function damage(path: string, table: string, key: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const db = new sqlite3.Database(path, (err) => {
      if (err) return reject(err);
      db.configure("busyTimeout", 5000);
      db.run(`UPDATE ${table} SET value = substr(value, 1, 40) WHERE key = ?`, [`${table}:${key}`], function (e) {
        const changed = this?.changes;
        db.close(() => (e ? reject(e) : changed === 1 ? resolve() : reject(new Error("no row"))));
      });
    });
  });
}

/** The SQLite file of a harness's store. */
export const storePath = (x: Harness) => x.world.config.store.url.slice("sqlite://".length);

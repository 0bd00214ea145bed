// Owns telling that the SQLite file calbridge opened is still the one at its path. SQLite reads and writes through
// its open descriptors: a file deleted under a running daemon (an `rm` of the volume's content, a cleanup script) or
// replaced (another file moved over it) took every write into an inode nobody opens again, while pings and writes went
// on succeeding: webhooks were acknowledged into it, /readyz stayed green, nothing was logged, and a second daemon
// started on the path created a new file and led beside this one. Once told, every query of the store fails with
// what happened and what to do, so /readyz fails, webhooks are answered 503 (the sender retries) and the lease ends.
// A file copied over the store in place keeps its inode and is not told (README: stop calbridge before a restore).
import { type Stats, statSync } from "node:fs";

/** The path is looked at at most this often (a stat, on a query's way; no timer). */
const CHECK_EVERY_MS = 1000;

/** The store's SQLite file is no longer the one at its path. */
export class StoreFileLostError extends Error {
  readonly file: string;
  constructor(file: string, how: "deleted" | "replaced") {
    super(
      `store: the SQLite file ${file} was ${how} while calbridge ran; calbridge no longer uses the copy it had open (what it wrote there now would be lost at the next start): put the file back from a backup if there is one, then restart calbridge`,
    );
    this.name = "StoreFileLostError";
    this.file = file;
  }
}

export class SqliteFileIdentity {
  readonly file: string;
  readonly #onLost: (err: StoreFileLostError) => void;
  #id: string | undefined;
  #checkedAt = Number.NEGATIVE_INFINITY;
  #lost: StoreFileLostError | undefined;

  constructor(file: string, onLost: (err: StoreFileLostError) => void) {
    this.file = file;
    this.#onLost = onLost;
  }

  /** Takes the file at the path now for the store's (once the connections have opened it). */
  pin(): void {
    this.#id = idOf(statSync(this.file));
  }

  /** Throws once the file at the path is not the one pinned (for good: the open descriptors stay on the old one). */
  assert(): void {
    if (this.#lost) throw this.#lost;
    if (this.#id === undefined) return;
    const now = performance.now();
    if (now - this.#checkedAt < CHECK_EVERY_MS) return;
    this.#checkedAt = now;
    let found: string | undefined;
    try {
      found = idOf(statSync(this.file));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Another failure (EACCES on the folder, EIO) is no verdict on the file: the queries say what they meet.
      if (code !== "ENOENT" && code !== "ENOTDIR") return;
    }
    if (found === this.#id) return;
    this.#lost = new StoreFileLostError(this.file, found === undefined ? "deleted" : "replaced");
    this.#onLost(this.#lost);
    throw this.#lost;
  }
}

const idOf = (s: Stats): string => `${s.dev}:${s.ino}`;

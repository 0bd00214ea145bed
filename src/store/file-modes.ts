// Owns the file-system permissions of the SQLite store: the database file and its companions (-wal, -shm, -journal)
// readable by calbridge's user only (0600), in a folder only that user can enter (0700) when calbridge creates it.
// A folder that already exists is the admin's (a volume, a home directory): looser modes there are reported at start,
// never changed behind the admin's back.
import { chmodSync, closeSync, mkdirSync, openSync, statSync } from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "../log.ts";

export const FILE_MODE = 0o600;
export const FOLDER_MODE = 0o700;
/** Companions SQLite creates beside the database; it gives each the database file's own permissions. */
export const COMPANION_SUFFIXES = ["-wal", "-shm", "-journal"] as const;

const octal = (mode: number) => `0${(mode & 0o777).toString(8)}`;

/**
 * Prepares `file` before SQLite opens it: creates a missing folder 0700, creates a missing database file 0600 (SQLite
 * creates -wal, -shm and -journal with the database file's permissions: os_unix.c, findCreateFileMode), tightens
 * the file and any companion left looser by an earlier build to 0600, and warns about an existing folder that other
 * users can enter or list.
 */
export function prepareSqliteFile(file: string, logger: Logger): void {
  const folder = dirname(file);
  const created = mkdirSync(folder, { recursive: true, mode: FOLDER_MODE });
  if (created === undefined) {
    const mode = statSync(folder).mode;
    if (mode & 0o077) {
      logger.warn(
        { folder, mode: octal(mode), fix: `chmod 700 ${folder}` },
        "the store's folder is open to other users; calbridge keeps its own files 0600 but leaves an existing folder as it is: make it 0700",
      );
    }
  }
  // Created empty with 0600 (an empty file is an empty database to SQLite); an existing file is left as it is here.
  closeSync(openSync(file, "a", FILE_MODE));
  for (const path of [file, ...COMPANION_SUFFIXES.map((s) => file + s)]) {
    let mode: number;
    try {
      mode = statSync(path).mode;
    } catch {
      continue; // not there (yet): SQLite creates it with the database file's mode
    }
    if ((mode & 0o777) === FILE_MODE || (mode & 0o077) === 0) continue;
    try {
      chmodSync(path, FILE_MODE);
      logger.warn({ file: path, was: octal(mode) }, "store file was readable by other users: now 0600");
    } catch (err) {
      logger.warn(
        { file: path, mode: octal(mode), err: (err as Error).message, fix: `chmod 600 ${path}` },
        "store file is readable by other users and could not be changed",
      );
    }
  }
}

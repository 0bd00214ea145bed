// Owns the file-system permissions of the SQLite store: the database file and its companions (-wal, -shm, -journal)
// readable by calbridge's user only (0600), in a folder only that user can enter (0700) when calbridge creates it.
// A folder that already exists is the admin's (a volume, a home directory): looser modes there are reported at start,
// never changed behind the admin's back, with a fix that keeps the folder writable for calbridge's user (a folder
// calbridge does not own, `chmod 700` alone would lock it out). A store calbridge's user may not write ends the start
// with an error that names the folder, the user and the fix, not a bare EACCES.
import {
  accessSync,
  chmodSync,
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  openSync,
  type Stats,
  statSync,
} from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "../log.ts";

export const FILE_MODE = 0o600;
export const FOLDER_MODE = 0o700;
/** Companions SQLite creates beside the database; it gives each the database file's own permissions. */
export const COMPANION_SUFFIXES = ["-wal", "-shm", "-journal"] as const;

/** 0600, 0755; a folder's setgid bit shown (2775). */
const octal = (mode: number) => (mode & 0o7777).toString(8).padStart(4, "0");

/** calbridge's own user and groups (undefined where the platform has none: Windows). */
function processIds(): { uid: number; gid: number; groups: number[] } | undefined {
  if (!process.getuid || !process.getgid) return undefined;
  const gid = process.getgid();
  return { uid: process.getuid(), gid, groups: [gid, ...(process.getgroups?.() ?? [])] };
}

/**
 * The start-up note about an existing folder that users other than calbridge's may enter or list, with a fix that
 * leaves calbridge able to write there:
 * - calbridge's user owns it: `chmod 700` (a warning);
 * - a setgid folder calbridge writes through its group (a Kubernetes `securityContext.fsGroup` volume: root:fsGroup,
 *   2775): members of that group can read it, which is how the volume is meant to be shared; an info line, and while
 *   others may enter it too, `chmod o= FOLDER` to shut them out (group and setgid bit kept);
 * - another user owns it (a bind mount opened with `chmod 777`): `chmod 700` would lock calbridge out, so the fix
 *   gives it to calbridge's user first (a warning).
 */
function reportLooseFolder(folder: string, st: Stats, logger: Logger): void {
  const mode = octal(st.mode);
  const me = processIds();
  if (!me || st.uid === me.uid) {
    logger.warn(
      { folder, mode, fix: `chmod 700 ${folder}` },
      "the store's folder is open to other users; calbridge keeps its own files 0600 but leaves an existing folder as it is: make it 0700",
    );
    return;
  }
  const throughGroup = (st.mode & 0o2000) !== 0 && (st.mode & 0o030) === 0o030 && me.groups.includes(st.gid);
  if (throughGroup) {
    const othersToo = (st.mode & 0o007) !== 0;
    logger.info(
      {
        folder,
        mode,
        owner_uid: st.uid,
        group: st.gid,
        uid: me.uid,
        ...(othersToo ? { fix: `chmod o= ${folder}` } : {}),
      },
      othersToo
        ? "the store's folder is shared through its setgid group (a Kubernetes fsGroup volume), which calbridge writes through: members of that group can list it and replace files there, and other users can enter it; calbridge keeps its own files 0600. To shut the others out, `chmod o=` (the group keeps its access; not `chmod 700`: calbridge does not own the folder and would be locked out)"
        : "the store's folder is shared through its setgid group (a Kubernetes fsGroup volume), which calbridge writes through: members of that group can list it and replace files there; calbridge keeps its own files 0600",
    );
    return;
  }
  logger.warn(
    { folder, mode, owner_uid: st.uid, uid: me.uid, fix: `chown ${me.uid} ${folder} && chmod 700 ${folder}` },
    "the store's folder is open to other users and belongs to another user than calbridge's (owner_uid, not uid); calbridge keeps its own files 0600 but leaves an existing folder as it is: give it to calbridge's user and make it 0700 (chmod 700 alone would lock calbridge out)",
  );
}

/** What a store calbridge may not write: the folder, calbridge's user and group, who owns what, and the fix. */
export class StoreAccessError extends Error {
  readonly code: string;
  constructor(file: string, cause: NodeJS.ErrnoException) {
    const folder = dirname(file);
    const me = processIds();
    const stat = (path: string) => {
      try {
        return statSync(path);
      } catch {
        return undefined;
      }
    };
    const dir = stat(folder);
    const who = me ? `calbridge runs as uid ${me.uid}, gid ${me.gid}` : "calbridge's user";
    const owned = dir ? `; the folder belongs to uid ${dir.uid}, gid ${dir.gid}, mode ${octal(dir.mode)}` : "";
    let fix: string;
    if (cause.code === "EROFS") {
      fix = "the file system is read-only: mount the volume read-write (or point store.url at a writable one)";
    } else if (me && !dir) {
      fix = `mkdir -p ${folder} && chown ${me.uid} ${folder} && chmod 700 ${folder}`;
    } else if (me) {
      // Whatever of the folder and the store's files is another user's is given to calbridge's.
      const foreign = [folder, file, ...COMPANION_SUFFIXES.map((x) => file + x)].filter((p) => {
        const st = p === folder ? dir : existsSync(p) ? stat(p) : undefined;
        return st !== undefined && st.uid !== me.uid;
      });
      fix = `${foreign.length > 0 ? `chown ${me.uid} ${foreign.join(" ")} && ` : ""}chmod 700 ${folder}`;
    } else {
      fix = "give the folder to calbridge's user and make it 0700";
    }
    super(
      `store: calbridge may not write its SQLite store in ${folder} (${cause.message}): ${who}${owned}; fix: ${fix}`,
    );
    this.name = "StoreAccessError";
    this.code = cause.code ?? "EACCES";
  }
}

/**
 * Prepares `file` before SQLite opens it: creates a missing folder 0700, creates a missing database file 0600 (SQLite
 * creates -wal, -shm and -journal with the database file's permissions: os_unix.c, findCreateFileMode), tightens
 * the file and any companion left looser by an earlier build to 0600, and reports an existing folder that other users
 * can enter or list. A folder or file calbridge may not write (EACCES, EPERM, EROFS) is a StoreAccessError.
 */
export function prepareSqliteFile(file: string, logger: Logger): void {
  try {
    prepare(file, logger);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EACCES" || code === "EPERM" || code === "EROFS") {
      throw new StoreAccessError(file, err as NodeJS.ErrnoException);
    }
    throw err;
  }
}

function prepare(file: string, logger: Logger): void {
  const folder = dirname(file);
  const created = mkdirSync(folder, { recursive: true, mode: FOLDER_MODE });
  if (created === undefined) {
    const st = statSync(folder);
    if (st.mode & 0o077) reportLooseFolder(folder, st, logger);
  }
  // SQLite creates its -wal and -shm files beside the database: a folder it may not write fails later, as a bare
  // SQLITE_READONLY, even when the database file itself may be written.
  accessSync(folder, constants.W_OK | constants.X_OK);
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

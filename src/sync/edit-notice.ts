// Owns the note on an event whose text a person edited and calbridge wrote over: the title, description and colour
// are calbridge's (written from the booking), and a therapist's session notes typed into the description vanished
// without a word. The event now says what was undone and quotes the lines they added, so nothing is lost unseen. A
// change of the time zone alone (Google's editor has a "Time zone" control; the same instants shown in another zone)
// is put back too, as calbridge writes its zone, and says that instead: it was told its title, description and
// colour had been edited, none of which was touched.
import { fingerprint, type Ownership } from "../calendar/fingerprint.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import { unescapeHtml } from "../calendar/template.ts";
import type { CalEvent, Link } from "./types.ts";

const NOTE =
  "calbridge: your edit of this event was undone: its title, description and colour are written from the booking service (keep notes of your own in another event).";
// Typographic quotes: the description is HTML-escaped (inert), which would show plain ones as &quot; in places.
const QUOTED = " The text you added: “";
const UNQUOTED = "”";
const zoneNote = (zone: string) =>
  `calbridge: the time zone of this event was set back to ${zone}, the one calbridge writes appointments in; its time did not change.`;
/** Characters of added text quoted at most (the notice itself is held to half the description's limit). */
const QUOTE_MAX = 1000;

/** The description's lines as plain text: Google's web UI stores an edited description as HTML. */
function lines(text: string | null | undefined): string[] {
  if (!text) return [];
  return unescapeHtml(text.replace(/<br\s*\/?>|<\/(p|div|li)>/gi, "\n").replace(/<[^>]*>/g, ""))
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "");
}

/** What an earlier note of this kind quoted, so a second edit does not drop the first one's text. */
function quotedBefore(notice: string | undefined): string | undefined {
  if (!notice?.startsWith(NOTE)) return undefined;
  const at = notice.indexOf(QUOTED);
  return at < 0 ? undefined : notice.slice(at + QUOTED.length).replace(/”$/, "");
}

/**
 * The notice for an update that writes over a person's edit of the event's owned fields (`edited`: the event carries
 * calbridge's marks and nothing changed in the booking), as a partial action; nothing when the event is as calbridge
 * last wrote it (a template changed by a reload is no edit of theirs).
 */
export function editNotice(
  edited: boolean,
  current: CalEvent,
  owned: Ownership,
  link: Link,
  wanted: RenderedEvent,
): { notice?: string } {
  if (!edited || fingerprint(current, owned) === link.fingerprint) return {};
  const zone = wanted.start.timeZone;
  const inZone = { ...current, start: { ...current.start, timeZone: zone }, end: { ...current.end, timeZone: zone } };
  if (current.start?.dateTime && fingerprint(inZone, owned) === link.fingerprint) return { notice: zoneNote(zone) };
  const ours = new Set(lines(wanted.description));
  const added = lines(current.description).filter((l) => !ours.has(l) && !l.startsWith("calbridge:"));
  const quote = [quotedBefore(link.notice?.text), ...added].filter((q) => q !== undefined && q !== "").join(" / ");
  if (quote === "") return { notice: NOTE };
  const cut = quote.length > QUOTE_MAX ? `${quote.slice(0, QUOTE_MAX - 1)}…` : quote;
  return { notice: `${NOTE}${QUOTED}${cut}${UNQUOTED}` };
}

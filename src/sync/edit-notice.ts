// Owns the note on an event whose text a person edited and calbridge wrote over: the title, description and colour
// are calbridge's (written from the booking), and a therapist's session notes typed into the description vanished
// without a word. The event now says what was undone and quotes the lines they added, so nothing is lost unseen,
// whatever else changed at the same time (the booking, a move of theirs undone or sent to the booking). A change of
// the time zone alone (Google's editor has a "Time zone" control; the same instants shown in another zone) is put
// back too, as calbridge writes its zone, and says that instead: it was told its title, description and colour had
// been edited, none of which was touched.
//
// Only lines the therapist added are quoted, never calbridge's own: the link keeps keyed digests of the lines it last
// wrote (`Link.lines`, never the text), so a line the booking no longer has (a customer's notes removed from it, the
// contact lines turned off by a reload) is not quoted back into the event as theirs, nor kept in the link's notice.
import { fingerprint, type Ownership } from "../calendar/fingerprint.ts";
import type { RenderedEvent } from "../calendar/render.ts";
import { unescapeHtml } from "../calendar/template.ts";
import { inputDigest, sameRendered } from "./inputs.ts";
import type { CalEvent, Link, Rendered } from "./types.ts";

const NOTE =
  "calbridge: your edit of this event was undone: its title, description and colour are written from the booking service (keep notes of your own in another event).";
// Typographic quotes: the description is HTML-escaped (inert), which would show plain ones as &quot; in places.
const QUOTED = " The text you added: “";
const UNQUOTED = "”";
const zoneNote = (zone: string) =>
  `calbridge: the time zone of this event was set back to ${zone}, the one calbridge writes appointments in; its time did not change.`;
/** Characters of added text quoted at most (the notice itself is held to half the description's limit). */
const QUOTE_MAX = 1000;
/** calbridge's notices: never the therapist's text, never digested (an earlier quote is taken from the link). */
const OURS = "calbridge:";

/** The description's lines as plain text: Google's web UI stores an edited description as HTML. */
function lines(text: string | null | undefined): string[] {
  if (!text) return [];
  return unescapeHtml(text.replace(/<br\s*\/?>|<\/(p|div|li)>/gi, "\n").replace(/<[^>]*>/g, ""))
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "");
}

const digestOf = (appointmentId: string, line: string) => inputDigest(appointmentId, "description line", line);

/**
 * Keyed digests of the lines of a description calbridge writes (its notices left out), for the link: they tell its
 * own lines from a therapist's later, never what they said (as the template inputs' digests, inputs.ts).
 */
export function lineDigests(appointmentId: string, description: string | null | undefined): string[] {
  const own = lines(description).filter((l) => !l.startsWith(OURS));
  return [...new Set(own.map((l) => digestOf(appointmentId, l)))];
}

/** What an earlier note quoted, so a second edit (or a notice of another kind) does not drop the first one's text. */
function quotedBefore(notice: string | undefined): string | undefined {
  const at = notice?.startsWith(OURS) ? notice.indexOf(QUOTED) : -1;
  return at < 0 ? undefined : notice?.slice(at + QUOTED.length).replace(/”$/, "");
}

/**
 * Whether the rendering now (`rendered`) stands for the very text calbridge last wrote: the same settings and template
 * inputs, and the booking's time, status and therapist unchanged (`coreChanged`). Only asked of a link an earlier
 * build wrote, which keeps no digests of the lines it wrote.
 */
export function sameText(link: Link, rendered: Rendered | undefined, coreChanged: boolean): boolean {
  return !coreChanged && link.rendered !== undefined && rendered !== undefined && sameRendered(link.rendered, rendered);
}

/**
 * The text a person added to the event's description that a write of `wanted` would remove, as one quote, or
 * undefined. A line is theirs when calbridge neither wrote it last (the link's digests) nor writes it now. With `carry`
 * (the new notice replaces one still in force: the booking did not change), what an earlier notice quoted comes first,
 * and is quoted even when nothing new was added.
 *
 * A link of an earlier build has no digests: its lines are known only when nothing that shapes the text changed since
 * (`same`, see sameText; `wanted` at hand): then the last write's lines are the rendering's now. Otherwise nothing new
 * is quoted: a line the rendering lacks may be the booking's old text (a customer's notes removed from the booking,
 * the contact lines turned off), and quoting it would put customer data back into the event, labelled as the
 * therapist's, and into the link's notice. Privacy wins there: a therapist's text is lost unquoted only on the first
 * write over an event an earlier build last wrote, in a sync where the booking or the settings changed too (every
 * write records the digests), and the notice still says the edit was undone.
 */
export function addedText(
  current: CalEvent | null | undefined,
  link: Link,
  wanted: RenderedEvent | undefined,
  same: boolean,
  carry: boolean,
): string | undefined {
  const known = link.lines !== undefined || (same && wanted !== undefined);
  const written = new Set(link.lines ?? []);
  const ours = new Set(lines(wanted?.description));
  const fresh =
    !known || !current || current.status === "cancelled"
      ? []
      : lines(current.description).filter(
          (l) => !ours.has(l) && !l.startsWith(OURS) && !written.has(digestOf(link.appointmentId, l)),
        );
  if (fresh.length === 0 && !carry) return undefined;
  const quote = [quotedBefore(link.notice?.text), ...fresh].filter((q) => q !== undefined && q !== "").join(" / ");
  return quote === "" ? undefined : quote;
}

/** A notice (`text`) with the quote of what the therapist added, when there is one. */
export function quoting(text: string, quote: string | undefined): string {
  if (!quote) return text;
  const cut = quote.length > QUOTE_MAX ? `${quote.slice(0, QUOTE_MAX - 1)}…` : quote;
  return `${text}${QUOTED}${cut}${UNQUOTED}`;
}

/**
 * The notice for an update that writes over a person's edit of the event's owned fields (`marked`: the event carries
 * calbridge's marks), as a partial action; nothing when the event is as calbridge last wrote it (a template changed by
 * a reload is no edit of theirs). With the booking changed too (`fromBooking`), the rewrite is the booking's and says
 * nothing, unless it writes over text they added: then that is quoted.
 */
export function editNotice(
  marked: boolean,
  fromBooking: boolean,
  current: CalEvent,
  owned: Ownership,
  link: Link,
  wanted: RenderedEvent,
  same: boolean,
): { notice?: string } {
  if (!marked || fingerprint(current, owned) === link.fingerprint) return {};
  const quote = addedText(current, link, wanted, same, !fromBooking);
  if (fromBooking) return quote ? { notice: quoting(NOTE, quote) } : {};
  const zone = wanted.start.timeZone;
  const inZone = { ...current, start: { ...current.start, timeZone: zone }, end: { ...current.end, timeZone: zone } };
  const zoneOnly = current.start?.dateTime && fingerprint(inZone, owned) === link.fingerprint;
  return { notice: quoting(zoneOnly ? zoneNote(zone) : NOTE, quote) };
}

/**
 * The notice for the rewrite of an event whose change the booking took (a move written back, a reassignment, an event
 * moved back): `given` (a part of the change not taken, or none), and with text the therapist added in the same save,
 * which the rewrite of `rendering` removes, that text quoted in it (or in the note of an edit undone).
 */
export function changeTaken(
  current: CalEvent | undefined,
  link: Link,
  rendering: { body: RenderedEvent; rendered: Rendered } | null,
  coreChanged: boolean,
  given: Link["notice"],
  at: number,
): Link["notice"] {
  if (!rendering) return given;
  const same = sameText(link, rendering.rendered, coreChanged);
  const quote = addedText(current, link, rendering.body, same, false);
  return quote ? { text: quoting(given?.text ?? NOTE, quote), at } : given;
}

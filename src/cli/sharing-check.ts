// Owns doctor's check of who else sees the customer details calbridge writes into a calendar: the details the
// therapist's templates show, against the calendar's sharing (Google's ACL), where the API can tell.
import type { calendar_v3 } from "googleapis";
import type { CalendarGateway } from "../calendar/gateway.ts";
import type { TherapistConfig } from "../config/schema.ts";
import type { RenderSettings } from "../sync/inputs.ts";

/** One line of doctor (its Check). */
export interface SharingWarning {
  name: string;
  status: "warn";
  detail: string;
  fix: string;
}

const SEES_PRIVATE = new Set(["writer", "owner"]);
const FIX_PRESET = "or show less: event.preset initials or booking_only (README: Privacy presets)";

/**
 * A rule for the therapist or calbridge itself (the calendar's own address, the delegation subject, the account calbridge
 * acts as: an OAuth therapist's own account on a calendar of theirs, a robot).
 */
function isOwn(rule: calendar_v3.Schema$AclRule, t: TherapistConfig, calendarId: string, account?: string): boolean {
  const who = rule.scope?.type === "user" ? (rule.scope.value ?? "").toLowerCase() : undefined;
  if (who === undefined) return false;
  const own = [calendarId, t.calendar_id, t.impersonate, t.email, account].map((x) => x?.toLowerCase());
  return own.includes(who) || who.endsWith(".gserviceaccount.com");
}

/**
 * A warning when the templates show customer details and someone besides the therapist can see them; undefined when
 * nothing needs saying. Google's reference (Acl `role`): "reader ... Private events will appear to users with reader
 * access, but event details will be hidden"; "writer ... Private events will appear to users with writer access, and
 * event details will be visible". calbridge's events are private, so people with writer or owner access (a domain,
 * a group, colleagues) see the details; the public scope ("default") at most as reader, who sees them as busy.
 */
export async function sharingCheck(
  t: TherapistConfig,
  settings: RenderSettings,
  gateway: Pick<CalendarGateway, "sharing"> | undefined,
): Promise<SharingWarning | undefined> {
  const details = settings.needed.filter((p) => p.customer === "detail").map((p) => `{${p.name}}`);
  if (details.length === 0 || !gateway) return undefined;
  const name = `calendar sharing of ${t.therapist_id}`;
  const shows = `the event templates show customer details (${details.join(", ")})`;
  const sharing = await gateway.sharing();
  if ("error" in sharing) {
    return {
      name,
      status: "warn",
      detail: `${shows}; who else can see event details cannot be told: ${sharing.error}`,
      fix: `look at the calendar's sharing settings ("Share with specific people", "Access permissions") by hand, ${FIX_PRESET}`,
    };
  }
  const others: string[] = [];
  let people = 0;
  for (const rule of sharing.rules) {
    const scope = rule.scope;
    const role = rule.role ?? "";
    if (scope?.type === "default" && (role === "reader" || SEES_PRIVATE.has(role))) {
      others.push(
        `the public ("See all event details": calbridge's events are private, so Google shows them as busy, but a copy or an event made public shows everything)`,
      );
    } else if (SEES_PRIVATE.has(role) && !isOwn(rule, t, sharing.calendarId, sharing.account)) {
      if (scope?.type === "domain") others.push(`everyone in ${scope.value} (${role})`);
      else if (scope?.type === "group") others.push(`the group ${scope.value} (${role})`);
      else people++;
    }
  }
  if (people > 0) others.push(`${people} ${people === 1 ? "person" : "people"} with writer or owner access`);
  if (others.length === 0) return undefined;
  return {
    name,
    status: "warn",
    detail: `${shows}, and Google shows event details of private events to ${others.join("; ")}`,
    fix: `share the calendar as "See all event details" (reader) or less, and not publicly, ${FIX_PRESET}`,
  };
}

// Owns the emulated calendars' sharing as acl.list shows it: the users a calendar is shared with (who may call the API
// on it) and the wider scopes a person sets in the calendar's settings (public, a domain, a group).
import { ApiError } from "./http.ts";

/** Roles of a scope: Google's reference (Acl resource, `role`). */
export type ScopeRole = "freeBusyReader" | "reader" | "writer" | "owner";

/**
 * A rule for more than one user. "default" is "the public scope" (Google's reference, Acl `scope.type`): what the
 * settings page calls "Make available to public", with "See only free/busy" (freeBusyReader) or "See all event
 * details" (reader).
 */
export interface ScopeRule {
  type: "default" | "domain" | "group";
  value?: string;
  role: ScopeRole;
}

/** A rule's id as Google gives it: `user:<address>`, `domain:<name>`, `group:<address>`, or `default`. */
export function ruleId(scope: { type: string; value?: string }): string {
  return scope.type === "default" ? "default" : `${scope.type}:${scope.value ?? ""}`;
}

const rule = (scope: { type: string; value?: string }, role: string) => ({
  kind: "calendar#aclRule",
  etag: '"00000000000000000000"',
  id: ruleId(scope),
  scope,
  role,
});

/**
 * acl.list. Google's reference (Acl `role`): writer "Provides read access to the calendar's ACLs", owner manages them;
 * a reader gets the 403 Google answers for a lacking role (requiredAccessLevel, as for an ACL change without owner
 * access: google/google-api-javascript-client#521). The answer's shape: mondoohq/mql#4271 shows a live one.
 */
export function aclList(
  cal: { acl: ReadonlyMap<string, string>; scopes: ReadonlyMap<string, ScopeRule> },
  subject: string,
): Record<string, unknown> {
  const role = cal.acl.get(subject);
  if (role !== "writer" && role !== "owner") {
    throw new ApiError(403, "requiredAccessLevel", "You need to have writer access to this calendar.");
  }
  const items = [
    ...[...cal.acl].map(([user, r]) => rule({ type: "user", value: user }, r)),
    ...[...cal.scopes.values()].map((s) =>
      rule(s.type === "default" ? { type: "default" } : { type: s.type, value: s.value ?? "" }, s.role),
    ),
  ];
  return { kind: "calendar#acl", etag: `"a${items.length}"`, items };
}

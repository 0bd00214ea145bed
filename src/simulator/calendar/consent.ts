// Owns the emulator's consent page: GET checks the request as Google does (client, redirect URI, scope, PKCE method)
// and shows the signed-in account, the app and one checkbox per requested scope with Allow and Deny; POST turns the
// person's decision into the redirect back to the app, with a code for the ticked scopes or error=access_denied.
import { randomBytes } from "node:crypto";
import type { Clock } from "../../clock.ts";
import type { ApprovedConsent, OAuthServer } from "./oauth.ts";
import { SCOPE_DESCRIPTIONS, SIGN_IN_SCOPES } from "./scopes.ts";

export const CONSENT_PATHS = ["/o/oauth2/v2/auth", "/authorize"];
export const DECISION_PATH = "/o/oauth2/v2/auth/consent";

export interface PageAnswer {
  status: number;
  location?: string;
  html?: string;
}

interface OpenRequest extends Omit<ApprovedConsent, "scopes"> {
  requested: string[];
  state: string | null;
  expiresAt: number;
}

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "[::1]", "localhost"]);

const esc = (v: string) =>
  v.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

function errorPage(status: number, error: string, detail: string): PageAnswer {
  return {
    status,
    html: `<!doctype html><meta charset="utf-8"><title>Error ${status}: ${esc(error)}</title><h1>Access blocked: authorization error</h1><p>Error ${status}: ${esc(error)}</p><p>${esc(detail)}</p>`,
  };
}

export class ConsentPage {
  /** Who is signed in to Google in the browser that opens the page (`login_hint` names another account). */
  subject = "therapist@clinic.example";
  readonly #oauth: OAuthServer;
  readonly #clock: Clock;
  readonly #open = new Map<string, OpenRequest>();

  constructor(oauth: OAuthServer, clock: Clock) {
    this.#oauth = oauth;
    this.#clock = clock;
  }

  /**
   * GET: the consent page, or Google's error page for a request it would refuse. A web application's redirect URI must
   * be one registered for the client, exactly; a desktop app's may be any loopback address and port
   * (https://developers.google.com/identity/protocols/oauth2/web-server#uri-validation and
   * https://developers.google.com/identity/protocols/oauth2/native-app#redirect-uri_loopback).
   */
  show(url: URL): PageAnswer {
    const q = url.searchParams;
    const clientId = q.get("client_id") ?? "";
    const client = this.#oauth.client(clientId);
    if (!client) return errorPage(401, "invalid_client", "The OAuth client was not found.");
    const redirectUri = q.get("redirect_uri") ?? "";
    let redirect: URL | undefined;
    try {
      redirect = new URL(redirectUri);
    } catch {
      redirect = undefined;
    }
    const allowed =
      redirect !== undefined &&
      (client.type === "web"
        ? client.redirectUris.has(redirectUri)
        : redirect.protocol === "http:" && LOOPBACK_HOSTS.has(redirect.hostname));
    if (!allowed) {
      return errorPage(
        400,
        "redirect_uri_mismatch",
        `You can't sign in to this app because it doesn't comply with Google's OAuth 2.0 policy. Request details: redirect_uri=${redirectUri}`,
      );
    }
    if (q.get("response_type") !== "code") {
      return errorPage(400, "unsupported_response_type", "Only response_type=code is emulated.");
    }
    const requested = (q.get("scope") ?? "").split(/\s+/).filter(Boolean);
    if (requested.length === 0) return errorPage(400, "invalid_request", "Missing required parameter: scope");
    const method = q.get("code_challenge_method") ?? "plain";
    if (q.get("code_challenge") !== null && method !== "S256" && method !== "plain") {
      return errorPage(400, "invalid_request", `Invalid code_challenge_method: ${method}`);
    }
    const id = randomBytes(16).toString("base64url");
    const subject = q.get("login_hint") ?? this.subject;
    this.#open.set(id, {
      clientId,
      redirectUri,
      subject,
      challenge: q.get("code_challenge") ?? undefined,
      method,
      offline: q.get("access_type") === "offline",
      requested,
      state: q.get("state"),
      expiresAt: this.#clock.now() + 3_600_000,
    });
    return { status: 200, html: this.#page(id, client.name, subject, requested) };
  }

  /**
   * The consent page's checkboxes come unticked: a person who just presses Allow grants no calendar access, and the
   * token exchange still succeeds (google/google-api-javascript-client#754 and #764: "checkboxes for added
   * scopes/permissions are unchecked by default"; the granular-permissions guide says an app must check what was
   * granted). Sign-in scopes are granted with the account and have no checkbox.
   */
  #page(id: string, app: string, subject: string, requested: string[]): string {
    const boxes = requested
      .filter((s) => !SIGN_IN_SCOPES.has(s))
      .map(
        (s) =>
          `<li><label><input type="checkbox" name="scope" value="${esc(s)}"> ${esc(SCOPE_DESCRIPTIONS[s] ?? s)}</label></li>`,
      )
      .join("\n");
    return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in - Google Accounts</title></head><body>
<h1>${esc(app)} wants access to your Google Account</h1>
<p id="account">${esc(subject)}</p>
<form method="post" action="${DECISION_PATH}">
<input type="hidden" name="request" value="${esc(id)}">
<p>Select what ${esc(app)} can access</p>
<ul>
${boxes}
</ul>
<button type="submit" name="action" value="deny">Deny</button>
<button type="submit" name="action" value="allow">Allow</button>
</form>
</body></html>
`;
  }

  /** POST: Allow redirects with a code for the ticked scopes; Deny with error=access_denied. */
  decide(form: URLSearchParams): PageAnswer {
    const id = form.get("request") ?? "";
    const open = this.#open.get(id);
    this.#open.delete(id);
    if (!open || open.expiresAt <= this.#clock.now()) {
      return errorPage(400, "invalid_request", "This consent request is unknown or has expired; start again.");
    }
    const redirect = new URL(open.redirectUri);
    if (form.get("action") !== "allow") {
      redirect.searchParams.set("error", "access_denied");
    } else {
      const ticked = new Set(form.getAll("scope"));
      const scopes = open.requested.filter((s) => SIGN_IN_SCOPES.has(s) || ticked.has(s));
      const { requested: _r, state: _s, expiresAt: _e, ...approved } = open;
      redirect.searchParams.set("code", this.#oauth.issueCode({ ...approved, scopes }));
      redirect.searchParams.set("scope", scopes.join(" "));
    }
    if (open.state !== null) redirect.searchParams.set("state", open.state);
    return { status: 302, location: redirect.toString() };
  }
}

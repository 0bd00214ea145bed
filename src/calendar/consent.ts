// Owns the OAuth consent flow of `calbridge authorize`: loopback redirect on 127.0.0.1, PKCE, state check, code
// exchange, the check of the scopes Google granted (no token without the calendar scope), and the browser's answer,
// held until the caller has accepted or refused the tokens.
import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { secrets } from "../log.ts";
import { expiresInSeconds, requestToken } from "./oauth-client.ts";
import { CALENDAR_SCOPE, grantedScopes, grantsCalendar, missingScopeAdvice } from "./scopes.ts";

export interface ConsentFlowOptions {
  clientId: string;
  clientSecret: string;
  /** Google: https://accounts.google.com/o/oauth2/v2/auth */
  authUrl: string;
  tokenUrl: string;
  /** Shows or opens the consent address; default: print it on stderr. */
  openUrl?: (url: string) => void | Promise<void>;
  /** Loopback port; 0 (default) picks a free one. */
  port?: number;
  scopes?: string[];
  /** Suggests the account to sign in with. */
  loginHint?: string;
  /** Gives up after this long without an answer (default 5 minutes). */
  timeoutMs?: number;
  signal?: AbortSignal;
  /**
   * Decides, with the tokens, whether the consent is kept (checks, storing), once the code is exchanged and the calendar
   * scope granted and before the browser's page is answered, so that the page tells what the terminal does. Resolves
   * with undefined when it is kept, or with the refusal the page shows (runConsentFlow then rejects with
   * ConsentRefusedError carrying it); a throw makes the page point at the terminal, and is passed on.
   */
  accept?: (result: ConsentResult) => Promise<ConsentRefusal | undefined>;
}

/** Why calbridge does not keep a consent, in words for the therapist (the browser) and the terminal alike. */
export interface ConsentRefusal {
  message: string;
}

/** `accept` refused the consent: nothing was kept; the message is the one the browser was shown. */
export class ConsentRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConsentRefusedError";
  }
}

export interface ConsentResult {
  refresh_token: string;
  access_token: string;
  expiry_date: number;
  /** What Google granted (the token response's `scope`). */
  scopes: string[];
}

/** Google's answer came back without the calendar scope: nothing may be stored. */
export class MissingScopeError extends Error {
  readonly granted: string[];
  constructor(granted: string[]) {
    super(
      `Google granted no calendar access (granted: ${granted.join(" ") || "nothing"}); nothing was stored. ` +
        `Run calbridge authorize again. ${missingScopeAdvice()}`,
    );
    this.name = "MissingScopeError";
    this.granted = granted;
  }
}

/** The scopes a token answer granted; an answer without `scope` granted what was asked (RFC 6749 section 5.1). */
export function scopesOfAnswer(answer: Record<string, unknown>, requested: string[]): string[] {
  return answer.scope === undefined ? requested : grantedScopes(answer.scope);
}

const CALLBACK_PATH = "/oauth2callback";

const escapeHtml = (v: string) =>
  v.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

function page(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, {
    "content-type": "text/html; charset=utf-8",
    "content-security-policy": "default-src 'none'",
    connection: "close",
  });
  res.end(`<!doctype html><meta charset="utf-8"><title>calbridge</title><p>${escapeHtml(text)}</p>`);
}

/**
 * Waits for the one redirect that carries our state and resolves with the code; the browser's answer is held until
 * `reply` tells it the outcome (closing answers whatever is still held).
 */
function awaitCode(
  state: string,
  options: ConsentFlowOptions,
): {
  listening: Promise<string>;
  code: Promise<string>;
  reply: (status: number, text: string) => void;
  close: () => void;
} {
  let held: ServerResponse | undefined;
  const reply = (status: number, text: string) => {
    if (held && !held.headersSent) page(held, status, text);
    held = undefined;
  };
  let settle: { resolve: (code: string) => void; reject: (err: Error) => void } | undefined;
  const code = new Promise<string>((resolve, reject) => {
    settle = { resolve, reject };
  });
  code.catch(() => {}); // observed by the caller; this only keeps an early failure from being "unhandled"
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    if (url.pathname !== CALLBACK_PATH) return page(res, 404, "Not found.");
    if (url.searchParams.get("state") !== state) {
      page(res, 400, "This answer does not belong to the running calbridge authorize (state mismatch). Ignored.");
      return;
    }
    const error = url.searchParams.get("error");
    const value = url.searchParams.get("code");
    if (error || !value) {
      page(res, 400, `Authorization was not granted (${error ?? "no code"}). You can close this tab.`);
      settle?.reject(new Error(`consent was not granted: ${error ?? "the answer carried no code"}`));
      return;
    }
    if (held) return page(res, 409, "An answer was already received. You can close this tab.");
    held = res;
    settle?.resolve(value);
  });
  const timeout = setTimeout(
    () => settle?.reject(new Error("no answer from the consent page in time; run calbridge authorize again")),
    options.timeoutMs ?? 300_000,
  );
  const onAbort = () => settle?.reject(new Error("consent flow aborted"));
  options.signal?.addEventListener("abort", onAbort, { once: true });
  const close = () => {
    reply(500, "calbridge authorize stopped before it finished; see the terminal.");
    clearTimeout(timeout);
    options.signal?.removeEventListener("abort", onAbort);
    server.closeAllConnections();
    server.close();
  };
  const listening = new Promise<string>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve(`http://127.0.0.1:${port}${CALLBACK_PATH}`);
    });
  });
  return { listening, code, reply, close };
}

/**
 * Runs the installed-app consent flow: opens the consent page, receives the redirect on a loopback server,
 * checks `state`, exchanges the code with its PKCE verifier at `tokenUrl`. Resolves with the refresh token to store.
 */
export async function runConsentFlow(options: ConsentFlowOptions): Promise<ConsentResult> {
  secrets.add(options.clientSecret);
  const state = randomBytes(16).toString("base64url");
  const verifier = randomBytes(48).toString("base64url");
  const challenge = createHash("sha256").update(verifier).digest("base64url");
  const waiter = awaitCode(state, options);
  try {
    const redirectUri = await waiter.listening;
    const url = new URL(options.authUrl);
    const requested = options.scopes ?? [CALENDAR_SCOPE];
    const query: Record<string, string> = {
      client_id: options.clientId,
      redirect_uri: redirectUri,
      response_type: "code",
      scope: requested.join(" "),
      access_type: "offline",
      prompt: "consent",
      state,
      code_challenge: challenge,
      code_challenge_method: "S256",
    };
    if (options.loginHint) query.login_hint = options.loginHint;
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const open =
      options.openUrl ??
      ((u: string) => void process.stderr.write(`Open this address to authorize calbridge:\n${u}\n`));
    // Not awaited before the code: a browser (or a test playing one) may wait for the page that follows the redirect,
    // and that page is answered only once the exchange (and the caller's `accept`) is done.
    const opening = Promise.resolve().then(() => open(url.toString()));
    opening.catch(() => {}); // a failure surfaces through the race below, or after the reply
    const code = await Promise.race([waiter.code, opening.then(() => waiter.code)]);
    // One request: an authorization code is single-use, so a resent exchange (gaxios retries POSTs by default) could
    // only come back invalid_grant and hide the first answer's error. A failure is reported; authorize again.
    const tokens = await exchange(waiter, {
      url: options.tokenUrl,
      form: {
        grant_type: "authorization_code",
        code,
        code_verifier: verifier,
        redirect_uri: redirectUri,
        client_id: options.clientId,
        client_secret: options.clientSecret,
      },
      what: "authorization code exchange",
      timeoutMs: 30_000,
    });
    const refreshToken = typeof tokens.refresh_token === "string" ? tokens.refresh_token : undefined;
    secrets.add(refreshToken);
    secrets.add(tokens.access_token);
    // Granular consent: the person may have left the calendar box unticked; the exchange succeeds all the same and
    // every call would then answer 403 insufficientPermissions. Such a token is not worth storing.
    const scopes = scopesOfAnswer(tokens, requested);
    if (requested.includes(CALENDAR_SCOPE) && !grantsCalendar(scopes)) {
      waiter.reply(
        403,
        `calbridge needs access to your calendars, and Google did not grant it. ${missingScopeAdvice()} Run calbridge authorize again; you can close this tab.`,
      );
      throw new MissingScopeError(scopes);
    }
    if (!refreshToken) {
      waiter.reply(400, "Google sent no lasting access; see the terminal. You can close this tab.");
      throw new Error(
        "Google returned no refresh token: remove calbridge's access at https://myaccount.google.com/permissions and run calbridge authorize again",
      );
    }
    const result: ConsentResult = {
      refresh_token: refreshToken,
      access_token: tokens.access_token,
      expiry_date: Date.now() + (expiresInSeconds(tokens) ?? 3600) * 1000,
      scopes,
    };
    // The page waits for the caller's verdict: "authorized" before a refusal in the terminal would be a false promise.
    let refusal: ConsentRefusal | undefined;
    try {
      refusal = await options.accept?.(result);
    } catch (err) {
      waiter.reply(500, "calbridge authorize did not finish; see the terminal. You can close this tab.");
      throw err;
    }
    if (refusal) {
      // The terminal's words as a sentence of their own.
      const said = refusal.message.charAt(0).toUpperCase() + refusal.message.slice(1);
      waiter.reply(403, `${said}${/[.!?]$/.test(said) ? "" : "."} You can close this tab.`);
      throw new ConsentRefusedError(refusal.message);
    }
    waiter.reply(200, "calbridge is authorized. You can close this tab.");
    await opening;
    return result;
  } finally {
    waiter.close();
  }
}

/** The code exchange; a failure also tells the waiting browser. */
async function exchange(
  waiter: { reply: (status: number, text: string) => void },
  req: Parameters<typeof requestToken>[0],
): ReturnType<typeof requestToken> {
  try {
    return await requestToken(req);
  } catch (err) {
    waiter.reply(502, "Google did not accept the answer; see the terminal. You can close this tab.");
    throw err;
  }
}

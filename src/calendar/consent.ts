// Owns the OAuth consent flow of `calbridge authorize`: loopback redirect on 127.0.0.1, PKCE, state check, code exchange.
import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { secrets } from "../log.ts";
import { expiresInSeconds, requestToken } from "./oauth-client.ts";
import { CALENDAR_SCOPE } from "./service-account.ts";

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
}

export interface ConsentResult {
  refresh_token: string;
  access_token: string;
  expiry_date: number;
}

const CALLBACK_PATH = "/oauth2callback";

function page(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "text/html; charset=utf-8", connection: "close" });
  res.end(`<!doctype html><meta charset="utf-8"><title>calbridge</title><p>${text}</p>`);
}

/** Waits for the one redirect that carries our state; answers the browser and resolves with the code. */
function awaitCode(
  state: string,
  options: ConsentFlowOptions,
): { listening: Promise<string>; code: Promise<string>; close: () => void } {
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
    page(res, 200, "calbridge is authorized. You can close this tab.");
    settle?.resolve(value);
  });
  const timeout = setTimeout(
    () => settle?.reject(new Error("no answer from the consent page in time; run calbridge authorize again")),
    options.timeoutMs ?? 300_000,
  );
  const onAbort = () => settle?.reject(new Error("consent flow aborted"));
  options.signal?.addEventListener("abort", onAbort, { once: true });
  const close = () => {
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
  return { listening, code, close };
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
    const query: Record<string, string> = {
      client_id: options.clientId,
      redirect_uri: redirectUri,
      response_type: "code",
      scope: (options.scopes ?? [CALENDAR_SCOPE]).join(" "),
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
    await open(url.toString());
    const code = await waiter.code;
    // One request: an authorization code is single-use, so a resent exchange (gaxios retries POSTs by default) could
    // only come back invalid_grant and hide the first answer's error. A failure is reported; authorize again.
    const tokens = await requestToken({
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
    if (!refreshToken) {
      throw new Error(
        "Google returned no refresh token: remove calbridge's access at https://myaccount.google.com/permissions and run calbridge authorize again",
      );
    }
    return {
      refresh_token: refreshToken,
      access_token: tokens.access_token,
      expiry_date: Date.now() + (expiresInSeconds(tokens) ?? 3600) * 1000,
    };
  } finally {
    waiter.close();
  }
}

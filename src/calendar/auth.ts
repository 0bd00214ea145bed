// Owns the choice of Google credentials for a mapping: service account (delegation) or per-therapist OAuth, one token URL.
import type { OAuth2Client } from "google-auth-library";
import { OAuthCredentials } from "./oauth-client.ts";
import { ServiceAccountCredentials, type ServiceAccountKey } from "./service-account.ts";

export { type ConsentFlowOptions, type ConsentResult, runConsentFlow } from "./consent.ts";
export { OAuthCredentials, type OAuthCredentialsOptions } from "./oauth-client.ts";
export {
  CALENDAR_SCOPE,
  GOOGLE_TOKEN_URL,
  JWT_BEARER_GRANT,
  readServiceAccountKey,
  ServiceAccountCredentials,
  type ServiceAccountKey,
  type ServiceAccountOptions,
  signJwt,
} from "./service-account.ts";

/** What a CalendarGateway needs as `auth`: an OAuth2Client (both credential kinds below are one). */
export type CalendarAuth = OAuth2Client;

export const GOOGLE_AUTH_URL = "https://accounts.google.com/o/oauth2/v2/auth";

export type AuthSpec =
  | {
      type: "service_account";
      /** Path of the JSON key, or the parsed key itself. */
      keyFile?: string;
      key?: ServiceAccountKey;
      /** Domain-wide delegation subject (`impersonate` in the configuration). */
      subject?: string;
      tokenUrl: string;
    }
  | { type: "oauth"; clientId: string; clientSecret: string; refreshToken: string; tokenUrl: string };

/** Builds the credentials of one mapping. Secrets (private key, client secret, refresh token) are registered for scrubbing. */
export async function createCalendarAuth(spec: AuthSpec): Promise<CalendarAuth> {
  if (spec.type === "oauth") {
    return new OAuthCredentials({
      clientId: spec.clientId,
      clientSecret: spec.clientSecret,
      refreshToken: spec.refreshToken,
      tokenUrl: spec.tokenUrl,
    });
  }
  const base = { tokenUrl: spec.tokenUrl, ...(spec.subject ? { subject: spec.subject } : {}) };
  if (spec.key) return new ServiceAccountCredentials({ ...base, key: spec.key });
  if (!spec.keyFile) throw new Error("service_account credentials need key_file");
  return ServiceAccountCredentials.fromKeyFile(spec.keyFile, base);
}

/** Forgets the cached access token so the next request fetches a new one (used after a 401). */
export function dropAccessToken(auth: CalendarAuth): void {
  const refresh = auth.credentials.refresh_token;
  auth.setCredentials(refresh ? { refresh_token: refresh } : {});
}

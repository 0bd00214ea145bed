// Owns per-therapist OAuth credentials: a refresh token exchanged at a configurable token URL, expiry always known.
import { type Credentials, type gaxios, OAuth2Client } from "google-auth-library";
import { secrets } from "../log.ts";

export interface OAuthCredentialsOptions {
  clientId: string;
  clientSecret: string;
  refreshToken: string;
  /** Every token request goes here (Google: https://oauth2.googleapis.com/token). */
  tokenUrl: string;
  /** Used when a token response carries no expires_in, so `expiry_date` is never empty. */
  defaultLifetimeSeconds?: number;
}

/**
 * An OAuth2Client for one therapist's personal calendar. `expiry_date` is always set from the token response:
 * without it google-auth-library refreshes the token and repeats the call on any 403, a rate-limit error included.
 */
export class OAuthCredentials extends OAuth2Client {
  readonly #defaultLifetimeMs: number;

  constructor(options: OAuthCredentialsOptions) {
    super({
      clientId: options.clientId,
      clientSecret: options.clientSecret,
      endpoints: { oauth2TokenUrl: options.tokenUrl },
    });
    secrets.add(options.clientSecret);
    secrets.add(options.refreshToken);
    this.#defaultLifetimeMs = (options.defaultLifetimeSeconds ?? 3600) * 1000;
    this.setCredentials({ refresh_token: options.refreshToken });
  }

  protected override async refreshTokenNoCache(
    refreshToken?: string | null,
  ): Promise<{ tokens: Credentials; res: gaxios.GaxiosResponse | null }> {
    const result = await super.refreshTokenNoCache(refreshToken);
    secrets.addEphemeral(result.tokens.access_token);
    result.tokens.expiry_date ??= Date.now() + this.#defaultLifetimeMs;
    return result;
  }
}

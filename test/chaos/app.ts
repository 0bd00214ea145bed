// An in-process daemon on a simulated world, built by the production wiring (createApp), logging at level debug into
// the suite's log collection; also registers the world's secrets with the collection for the final check.
import { type Config, ConfigSchema } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import type { World } from "../../src/simulator/world.ts";
import type { CapturedLog } from "../support/log-capture.ts";
import { capturedLogger, recordWorldSecrets, secret } from "./logs.ts";

export interface RunningApp {
  app: App;
  log: CapturedLog;
  stop(): Promise<void>;
}

/**
 * Adds an OAuth therapist to the world's config: an OAuth client and a refresh token the emulator honours, for the
 * therapist's own calendar (so the suite also handles a client secret and a refresh token).
 */
export function withOAuthTherapist(world: World, config: Config, therapistId: string): void {
  const client = world.google.registerOAuthClient();
  const refreshToken = world.google.issueRefreshToken(world.calendarOf(therapistId), client.client_id);
  config.google.oauth = { client_id: client.client_id, client_secret: client.client_secret };
  const mapping = config.therapists.find((t) => t.therapist_id === therapistId);
  if (!mapping) throw new Error(`${therapistId} is not mapped`);
  delete mapping.impersonate;
  mapping.auth = { type: "oauth", refresh_token: refreshToken };
  secret("google oauth client secret", client.client_secret);
  secret("google refresh token", refreshToken);
}

export async function startApp(
  world: World,
  name: string,
  options: {
    edit?: (c: Config) => void;
    oneShot?: boolean;
    engine?: { maxAttempts?: number; baseMs?: number };
    bookingMaxRetries?: number;
  } = {},
): Promise<RunningApp> {
  recordWorldSecrets(world);
  const raw = structuredClone(world.config) as Config;
  options.edit?.(raw);
  const config = ConfigSchema.parse(raw);
  const log = capturedLogger(name);
  const app = await createApp(config, {
    logger: log.logger,
    listen: "127.0.0.1:0",
    oneShot: options.oneShot ?? false,
    ...(options.engine ? { engine: options.engine } : {}),
    ...(options.bookingMaxRetries !== undefined ? { bookingMaxRetries: options.bookingMaxRetries } : {}),
  });
  await app.start();
  let stopped = false;
  return {
    app,
    log,
    async stop() {
      if (stopped) return;
      stopped = true;
      await app.stop(5000);
    },
  };
}

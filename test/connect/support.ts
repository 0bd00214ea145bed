// Test support for the connect pages: a simulated world whose therapist th_ben uses OAuth and has not connected yet,
// a Web application OAuth client registered with the daemon's callback, the daemon running on a known port (its
// public address), bookings for th_ben, and `calbridge invite` run as an admin would.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import type { ConfigInput } from "../../src/config/schema.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { type Logger, silentLogger } from "../../src/log.ts";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCli } from "../cli/support.ts";
import { freePort } from "../support/ports.ts";

export const CONNECT_SECRET = "connect-secret-for-tests-0123456789abcdef";
export const BEN = "ben@personal.test";
export const STORE_KEY = "connect-store-key-for-tests-0123456789";
const DAY = 86_400_000;

export interface ConnectWorld {
  world: World;
  app: App;
  /** The daemon's public address (connect.public_url). */
  origin: string;
  /** The YAML file `calbridge --config` reads. */
  file: string;
  /** Bookings of th_ben that get an event (in the window, not cancelled). */
  expected(): string[];
  /** Live events in th_ben's connected calendar. */
  live(): Record<string, unknown>[];
  /** `calbridge invite --therapist ID` → the link. */
  invite(therapistId?: string, ...args: string[]): Promise<string>;
  close(): Promise<void>;
}

export interface ConnectWorldOptions {
  logger?: Logger;
  storeUrl?: string;
  /** Port of the daemon (default: a free one). */
  port?: number;
  /** The OAuth client, when a second replica shares it. */
  client?: { client_id: string; client_secret: string };
  configure?: (raw: ConfigInput) => void;
}

export async function startConnectWorld(options: ConnectWorldOptions = {}): Promise<ConnectWorld> {
  const port = options.port ?? (await freePort());
  const origin = `http://127.0.0.1:${port}`;
  const world = await startWorld({
    therapists: ["th_ben", "th_anna"],
    ...(options.storeUrl ? { storeUrl: options.storeUrl } : {}),
    configure: (c) => {
      c.therapists[0] = {
        therapist_id: "th_ben",
        name: "Ben Berger",
        calendar_id: "primary",
        timezone: "Europe/Berlin",
        auth: { type: "oauth" },
      };
      c.google.oauth = { client_id: "placeholder", client_secret: "placeholder-secret" };
      c.connect = { public_url: origin, secret: CONNECT_SECRET, clinic_name: "Praxis am Park" };
      c.store = { ...c.store, encryption_key: STORE_KEY };
      c.webhooks.listen = `127.0.0.1:${port}`;
      options.configure?.(c);
    },
  });
  const client =
    options.client ?? world.google.registerOAuthClient({ type: "web", redirectUris: [`${origin}/connect/callback`] });
  world.config.google.oauth = client;
  world.google.consent.subject = BEN;
  const now = Date.now();
  world.booking.seed({ therapists: ["th_ben"], count: 12, from: now - 5 * DAY, to: now + 30 * DAY });
  const file = join(world.dir, "calbridge.yaml");
  writeFileSync(file, stringify(world.config));
  const app = await createApp(world.config, { logger: options.logger ?? silentLogger });
  await app.start();
  const windowFrom = now - world.config.sync.window.past_days * DAY;
  const windowTo = now + world.config.sync.window.future_days * DAY;
  return {
    world,
    app,
    origin,
    file,
    expected: () =>
      world.booking
        .all()
        .filter((a) => a.therapist_id === "th_ben" && a.status !== "cancelled")
        .filter((a) => {
          const t = Date.parse(String(a.start_time));
          return t >= windowFrom && t < windowTo;
        })
        .map((a) => String(a.id)),
    live: () => {
      try {
        return world.google.events(BEN).filter((e) => e.status !== "cancelled");
      } catch {
        return []; // the calendar exists once the account first used "primary"
      }
    },
    async invite(therapistId = "th_ben", ...args: string[]) {
      const res = await runCli("--config", file, "invite", "--therapist", therapistId, ...args);
      if (res.code !== 0) throw new Error(`invite exited ${res.code}: ${res.stderr}`);
      return res.stdout.trim();
    },
    async close() {
      await app.stop(2000).catch(() => {});
      await world.close();
    },
  };
}

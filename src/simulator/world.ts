// Owns a complete simulated world: the booking-service simulator, the Calendar emulator with one calendar per
// therapist, a service-account key the emulator trusts, and a validated Config pointing the daemon at both.
// Used by tests, benchmarks and `calbridge demo`, so they all exercise the production wiring.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Clock } from "../clock.ts";
import { type Config, type ConfigInput, ConfigSchema } from "../config/schema.ts";
import { secrets } from "../log.ts";
import { type BookingSimulator, type BookingSimulatorOptions, startBookingSimulator } from "./booking/index.ts";
import { type CalendarEmulator, type CalendarEmulatorOptions, startCalendarEmulator } from "./calendar/index.ts";

export const WORLD_WEBHOOK_SECRET = "whsec_world_0123456789abcdef";

export interface WorldOptions {
  /** Therapist ids (default th_1 .. th_N for a number). */
  therapists?: string[] | number;
  /** Map only these therapists in the config (default: all). */
  mapped?: string[];
  rateLimit?: BookingSimulatorOptions["rateLimit"];
  webhookTimeScale?: number;
  seed?: number;
  clock?: Clock;
  /** Folder for the key file and the store (default: a new temp folder). */
  dir?: string;
  /** Changes to the config before validation (sync settings, event templates, ...). */
  configure?: (raw: ConfigInput) => void;
  /** Store URL (default sqlite in `dir`). */
  storeUrl?: string;
  /**
   * Options of the Calendar emulator: Google's quotas (`limits`, on by default with Google's numbers), answer delay
   * (`latencyMs`, `latencyJitterMs`), `autoNotify`. The world's `clock` drives the emulator too.
   */
  google?: Omit<CalendarEmulatorOptions, "clock" | "port" | "host">;
}

export interface World {
  booking: BookingSimulator;
  google: CalendarEmulator;
  config: Config;
  dir: string;
  therapists: string[];
  calendarOf(therapistId: string): string;
  close(): Promise<void>;
}

export async function startWorld(options: WorldOptions = {}): Promise<World> {
  const therapists =
    typeof options.therapists === "number" || options.therapists === undefined
      ? Array.from({ length: typeof options.therapists === "number" ? options.therapists : 3 }, (_, i) => `th_${i + 1}`)
      : options.therapists;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), "calbridge-world-"));
  const booking = await startBookingSimulator({
    therapists,
    seed: options.seed ?? 7,
    rateLimit: options.rateLimit ?? false,
    webhookTimeScale: options.webhookTimeScale ?? 1 / 60_000,
    ...(options.clock ? { clock: options.clock } : {}),
  });
  const google = await startCalendarEmulator({ ...options.google, ...(options.clock ? { clock: options.clock } : {}) });
  const key = google.registerServiceAccount({ clientEmail: "calbridge@world.iam.gserviceaccount.com" });
  const keyFile = join(dir, "sa.json");
  writeFileSync(keyFile, JSON.stringify(key), { mode: 0o600 });
  const calendarOf = (t: string) => `${t}@clinic.test`;
  for (const t of therapists) google.createCalendar(calendarOf(t), calendarOf(t), { timeZone: "Europe/Berlin" });

  const raw: ConfigInput = {
    booking: { base_url: booking.url, api_key: booking.apiKey, requests_per_minute: 100_000 },
    webhooks: { listen: "127.0.0.1:0", signing_secrets: [WORLD_WEBHOOK_SECRET] },
    admin: { listen: "127.0.0.1:0" },
    google: {
      api_root: google.rootUrl,
      token_url: google.tokenUrl,
      auth_url: google.authUrl,
      auth: { type: "service_account", key_file: keyFile },
    },
    sync: { calendar_poll_seconds: 60 },
    store: { url: options.storeUrl ?? `sqlite://${join(dir, "calbridge.sqlite")}` },
    therapists: (options.mapped ?? therapists).map((t) => ({
      therapist_id: t,
      calendar_id: calendarOf(t),
      impersonate: calendarOf(t),
      timezone: "Europe/Berlin",
    })),
  };
  options.configure?.(raw);
  const config = ConfigSchema.parse(raw);
  secrets.add(config.booking.api_key);
  secrets.add(WORLD_WEBHOOK_SECRET);
  return {
    booking,
    google,
    config,
    dir,
    therapists,
    calendarOf,
    async close() {
      await booking.close();
      await google.close();
    },
  };
}

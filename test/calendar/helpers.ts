// Test support for calendar tests: an emulator with one therapist calendar, OAuth credentials and a gateway on it.
import { calendar_v3 } from "googleapis/build/src/apis/calendar/v3.js";
import { Registry } from "prom-client";
import { expect } from "vitest";
import { OAuthCredentials } from "../../src/calendar/auth.ts";
import { CalendarError } from "../../src/calendar/errors.ts";
import { CalendarGateway, type CalendarGatewayOptions } from "../../src/calendar/gateway.ts";
import {
  type CalendarEmulator,
  type CalendarEmulatorOptions,
  startCalendarEmulator,
} from "../../src/simulator/calendar/index.ts";

export const SUBJECT = "anna@clinic.example";
export const CALENDAR_ID = SUBJECT;

export interface Fixture {
  emulator: CalendarEmulator;
  auth: OAuthCredentials;
  gateway: CalendarGateway;
  registry: Registry;
  /** A raw googleapis client on the same calendar (no retries), for emulator checks. */
  api: calendar_v3.Calendar;
  client: { client_id: string; client_secret: string };
  close(): Promise<void>;
}

export async function setup(
  overrides: Partial<CalendarGatewayOptions> = {},
  emulatorOptions: CalendarEmulatorOptions = {},
): Promise<Fixture> {
  const emulator = await startCalendarEmulator(emulatorOptions);
  emulator.createCalendar(CALENDAR_ID, SUBJECT, { timeZone: "Europe/Berlin", summary: "Anna" });
  const client = emulator.registerOAuthClient();
  const auth = new OAuthCredentials({
    clientId: client.client_id,
    clientSecret: client.client_secret,
    refreshToken: emulator.issueRefreshToken(SUBJECT, client.client_id),
    tokenUrl: emulator.tokenUrl,
  });
  const registry = new Registry();
  const gateway = new CalendarGateway({
    therapistId: "th_anna",
    calendarId: CALENDAR_ID,
    apiRoot: emulator.rootUrl,
    auth,
    registry,
    random: () => 0,
    ...overrides,
  });
  const api = new calendar_v3.Calendar({ auth, rootUrl: emulator.rootUrl, retry: false });
  return {
    emulator,
    auth,
    gateway,
    registry,
    api,
    client,
    close: async () => {
      gateway.close();
      await emulator.close();
    },
  };
}

/** A minimal valid event body. */
export function body(
  summary: string,
  start = "2026-11-23T09:00:00Z",
  end = "2026-11-23T10:00:00Z",
  props: Record<string, string> = { calbridge_managed: "1" },
): calendar_v3.Schema$Event {
  return {
    summary,
    start: { dateTime: start, timeZone: "Europe/Berlin" },
    end: { dateTime: end, timeZone: "Europe/Berlin" },
    visibility: "private",
    extendedProperties: { private: props },
  };
}

/** Asserts that a googleapis call failed with Google's error shape, status and reason. */
export async function expectGoogleError(promise: Promise<unknown>, status: number, reason: string): Promise<void> {
  const err = (await promise.then(
    () => expect.fail(`expected ${status} ${reason}`),
    (e: unknown) => e,
  )) as { status?: number; response?: { data?: { error?: { code?: number; errors?: { reason?: string }[] } } } };
  expect(err.status).toBe(status);
  expect(err.response?.data?.error?.code).toBe(status);
  expect(err.response?.data?.error?.errors?.[0]?.reason).toBe(reason);
}

export async function metricValue(registry: Registry, name: string, labels: Record<string, string>): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return 0;
  const { values } = await metric.get();
  const match = values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
  return match?.value ?? 0;
}

/** The CalendarError `promise` rejects with (failing the test when it resolves or throws anything else). */
export async function rejection(promise: Promise<unknown>): Promise<CalendarError> {
  const err = await promise.then(
    () => expect.fail("expected a CalendarError"),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CalendarError);
  return err as CalendarError;
}

// A HealthSource for tests: every answer is a field the test can change.
import type { HealthSource } from "../../src/daemon/health.ts";
import type { StatusSnapshot, TherapistStatus } from "../../src/daemon/status-page.ts";

export interface FakeHealth extends HealthSource {
  pingError: Error | "hang" | undefined;
  writeError: Error | undefined;
  lastReconcile: number | undefined;
  booking: { ok: boolean; detail?: string };
  snapshot: StatusSnapshot;
}

export function therapist(over: Partial<TherapistStatus> = {}): TherapistStatus {
  return {
    therapistId: "th_anna",
    name: "Anna",
    calendarId: "anna@clinic.example",
    lastSyncAt: "2026-11-22T08:59:00.000Z",
    lastError: null,
    counts: { eventsMirrored: 12, writebacks: 2 },
    credentials: { ok: true },
    pausedUntil: null,
    writebacksHeld: 0,
    ...over,
  };
}

export function fakeHealth(now: number): FakeHealth {
  const fake: FakeHealth = {
    startedAt: now - 60_000,
    pingError: undefined,
    writeError: undefined,
    lastReconcile: now - 5 * 60_000,
    booking: { ok: true },
    snapshot: {
      generatedAt: new Date(now).toISOString(),
      instance: "host:1:abcd",
      leader: true,
      lastReconcileAt: new Date(now - 5 * 60_000).toISOString(),
      queues: { sync: 3, writeback: 0 },
      deadLetters: 1,
      writebacksHeld: 0,
      rateLimit: { limit: 60, remaining: 42, resetAt: "2026-11-22T09:01:00.000Z", pausedUntil: null },
      therapists: [therapist()],
    },
    storePing: () => {
      if (fake.pingError === "hang") return new Promise<void>(() => {});
      return fake.pingError ? Promise.reject(fake.pingError) : Promise.resolve();
    },
    storeWrite: () => (fake.writeError ? Promise.reject(fake.writeError) : Promise.resolve()),
    lastReconcileAt: () => fake.lastReconcile,
    bookingReachable: () => fake.booking,
    status: async () => fake.snapshot,
  };
  return fake;
}

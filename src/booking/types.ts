// Owns the booking client's option, query, body and stats types (what callers pass and get back).
import type { Registry } from "prom-client";
import type { Dispatcher } from "undici";
import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";
import type { Priority } from "./gate.ts";
import type { Appointment } from "./schemas.ts";

export interface BookingClientOptions {
  baseUrl: string;
  apiKey: string;
  /** Client-side ceiling (the plan's limit); the server's X-RateLimit headers restrict further. */
  requestsPerMinute: number;
  /** The ceiling's window; 60 000 unless time is scaled (tests, benchmarks). */
  rateWindowMs?: number;
  timeoutMs?: number;
  maxRetries?: number;
  /** 429s are not processed and the gate waits for the window: they get their own, larger bound (default 8). */
  maxRateLimitRetries?: number;
  /** Pages fetched ahead while listing, once total_pages is known (default 1: strictly one after another). */
  pageConcurrency?: number;
  /** At most this many requests in flight (default 16). */
  maxInFlight?: number;
  clock?: Clock;
  logger?: Logger;
  dispatcher?: Dispatcher;
  registry?: Registry;
  random?: () => number;
}

export interface CallOptions {
  priority?: Priority;
  signal?: AbortSignal;
  /**
   * A write: whether the appointment, read again, is still as the write was decided from (its time, therapist and
   * status). Before the write is sent again (after an answer that left its fate unknown, or a 429), the appointment is
   * read; one that is neither changed as asked nor still as decided from was changed by someone else meanwhile, and is
   * not written over: the call fails with `changed_meanwhile`, so the caller decides again from what it is now.
   */
  basis?: (now: Appointment) => boolean;
  /**
   * A write: run right before each send of it (the first and every resend), after the rate gate's wait. Throws to send
   * nothing: a write-back checks that the therapist's calendar change still stands (an Undo during a backoff, a 429's
   * pause, or a wait for budget is not followed by the write). Its error is the call's.
   */
  beforeSend?: () => Promise<void>;
}

export interface AppointmentQuery {
  /** Earliest start, an ISO 8601 instant (included); sent as a plain date a little earlier (date-range.ts). */
  dateFrom?: string;
  /** Latest start, an ISO 8601 instant (included); sent as a plain date a little later. */
  dateTo?: string;
  therapistId?: string;
  status?: string;
  customerId?: string;
}

export interface PatchBody {
  start_time?: string;
  therapist_id?: string;
  notes?: string;
  status?: string;
}

export interface CancelBody {
  reason?: string;
  notify_customer?: boolean;
  refund?: boolean;
}

export interface CreateBody {
  service_id: string;
  start_time: string;
  customer: { email: string; name: string; phone?: string };
  therapist_id?: string;
  notes?: string;
  addons?: string[];
  send_confirmation?: boolean;
}

export interface AvailabilityQuery {
  serviceId: string;
  date: string;
  therapistId?: string;
  duration?: number;
}

export interface BookingStats {
  requests: number;
  /** "2xx", "3xx", "4xx", "5xx", "network", "timeout". */
  byStatusClass: Record<string, number>;
  rateLimited: number;
  retries: number;
  /** Gate waits plus retry backoff, in ms of the client's clock. */
  waitedMs: number;
  gateWaitedMs: number;
  backoffMs: number;
}

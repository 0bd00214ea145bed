// Owns one HTTP exchange with the booking API (undici): headers, timeout, reading the body, and turning the answer
// into parsed data or a BookingApiError. No retries and no rate limiting here.
import { type Dispatcher, request } from "undici";
import type { z } from "zod";
import { deadline } from "../deadline.ts";
import { secrets } from "../log.ts";
import { BookingApiError, synthesizeCode } from "./errors.ts";
import { ErrorEnvelope } from "./schemas.ts";

export interface ExchangeInput {
  method: "GET" | "POST" | "PATCH";
  path: string;
  query?: Record<string, string | number | undefined> | undefined;
  body?: unknown;
  signal?: AbortSignal | undefined;
}

export interface TransportOptions {
  baseUrl: string;
  apiKey: string;
  userAgent: string;
  timeoutMs: number;
  dispatcher?: Dispatcher | undefined;
}

/** What came back, before the body is checked against a schema. */
export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  json: unknown;
  parsed: boolean;
  requestId: string | undefined;
}

export class Transport {
  readonly #base: URL;
  readonly #apiKey: string;
  readonly #opts: TransportOptions;

  constructor(opts: TransportOptions) {
    this.#opts = opts;
    this.#apiKey = opts.apiKey;
    // Paths carry the version prefix; a base address configured with "/v1" at its end is accepted too.
    const base = opts.baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
    this.#base = new URL(`${base}/`);
  }

  /** Removes the API key (and every registered secret) from text that may reach a message or a log line. */
  scrub(text: string): string {
    return secrets.scrub(this.#apiKey ? text.split(this.#apiKey).join("[REDACTED]") : text);
  }

  url(input: ExchangeInput): URL {
    const url = new URL(input.path.replace(/^\//, ""), this.#base);
    for (const [k, v] of Object.entries(input.query ?? {})) {
      if (v !== undefined && v !== "") url.searchParams.set(k, String(v));
    }
    return url;
  }

  /**
   * Sends once. Resolves with any HTTP answer (even 4xx/5xx); rejects with a BookingApiError of code
   * "timeout" or "network_error" when none came, or with the caller's abort reason.
   */
  async send(input: ExchangeInput): Promise<RawResponse> {
    // Ended below once the answer is read (AbortSignal.timeout's timer would fire long after it: see deadline.ts).
    const limit = deadline(this.#opts.timeoutMs, input.signal);
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.#apiKey}`,
      accept: "application/json",
      "user-agent": this.#opts.userAgent,
    };
    let body: string | undefined;
    if (input.body !== undefined) {
      body = JSON.stringify(input.body);
      headers["content-type"] = "application/json";
    }
    try {
      const res = await request(this.url(input), {
        method: input.method,
        headers,
        body,
        signal: limit.signal,
        ...(this.#opts.dispatcher ? { dispatcher: this.#opts.dispatcher } : {}),
      });
      const text = await res.body.text();
      let json: unknown;
      let parsed = false;
      try {
        json = JSON.parse(text);
        parsed = true;
      } catch {
        json = text;
      }
      return {
        status: res.statusCode,
        headers: res.headers,
        json,
        parsed,
        requestId: requestIdOf(json, res.headers),
      };
    } catch (cause) {
      if (input.signal?.aborted) throw input.signal.reason;
      const timedOut = limit.expired;
      throw new BookingApiError({
        code: timedOut ? "timeout" : "network_error",
        message: timedOut
          ? `no complete answer within ${this.#opts.timeoutMs} ms`
          : this.scrub(cause instanceof Error ? cause.message : String(cause)),
        method: input.method,
        path: input.path,
        details: timedOut ? { timeoutMs: this.#opts.timeoutMs } : errorDetails(cause),
      });
    } finally {
      limit.end();
    }
  }

  /** The data of a 2xx answer checked against `schema`, or the BookingApiError the answer stands for. */
  interpret<S extends z.ZodType>(input: ExchangeInput, res: RawResponse, schema: S): z.infer<S> {
    const base = { status: res.status, requestId: res.requestId, method: input.method, path: input.path };
    if (res.status >= 200 && res.status < 300) {
      const result = res.parsed ? schema.safeParse(res.json) : undefined;
      if (result?.success) return result.data;
      throw new BookingApiError({
        ...base,
        code: "invalid_response",
        message: res.parsed
          ? `unexpected response shape: ${this.scrub(summarize(result?.error))}`
          : "response body is not JSON",
        details: res.parsed ? {} : { body: this.scrub(snippet(res.json)) },
      });
    }
    const env = res.parsed ? ErrorEnvelope.safeParse(res.json) : undefined;
    if (env?.success) {
      const e = env.data.error;
      throw new BookingApiError({
        ...base,
        code: e.code,
        message: this.scrub(e.message ?? `HTTP ${res.status}`),
        details: scrubDeep(e.details ?? {}, (s) => this.scrub(s)),
      });
    }
    throw new BookingApiError({
      ...base,
      code: synthesizeCode(res.status),
      message:
        res.status === 404
          ? "HTTP 404 without the booking service's error envelope (a proxy or load balancer answering, or a wrong base_url?); not taken to mean the appointment is gone"
          : `HTTP ${res.status} without an error envelope`,
      details: { body: this.scrub(snippet(res.json)) },
    });
  }
}

function requestIdOf(json: unknown, headers: Record<string, string | string[] | undefined>): string | undefined {
  if (json && typeof json === "object") {
    const o = json as { meta?: { request_id?: unknown }; error?: { request_id?: unknown } };
    if (typeof o.meta?.request_id === "string") return o.meta.request_id;
    if (typeof o.error?.request_id === "string") return o.error.request_id;
  }
  const h = headers["x-request-id"];
  return Array.isArray(h) ? h[0] : h;
}

function snippet(body: unknown): string {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return text.length > 200 ? `${text.slice(0, 200)}...` : text;
}

function summarize(error: z.ZodError | undefined): string {
  if (!error) return "invalid";
  return error.issues
    .slice(0, 3)
    .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
    .join("; ");
}

function errorDetails(cause: unknown): Record<string, unknown> {
  const code = (cause as { code?: unknown } | null)?.code;
  return typeof code === "string" ? { cause: code } : {};
}

function scrubDeep(value: Record<string, unknown>, scrub: (s: string) => string): Record<string, unknown> {
  return JSON.parse(scrub(JSON.stringify(value))) as Record<string, unknown>;
}

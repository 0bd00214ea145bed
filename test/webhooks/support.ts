// Test harness for the webhook receiver: a real node:http server on 127.0.0.1:0 with the handler, a file-backed
// sqlite store, a signing client (undici), a recording sink, and a store that can be made to fail on demand.
import { mkdtempSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Registry } from "prom-client";
import { request } from "undici";
import { type Clock, ManualClock } from "../../src/clock.ts";
import { type Logger, SecretRegistry } from "../../src/log.ts";
import { openStore, type Store, type Table, type TableName } from "../../src/store/store.ts";
import type { BookingWebhookEvent } from "../../src/webhooks/event.ts";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { type EventSink, InboxProcessor, type InboxProcessorOptions } from "../../src/webhooks/processor.ts";
import { createWebhookHandler, type WebhookHandlerOptions } from "../../src/webhooks/route.ts";
import { sign } from "../../src/webhooks/signature.ts";
import { type CapturedLog, captureLog } from "../support/log-capture.ts";

export const SECRET = "whsec_test_0123456789abcdef";
export const OLD_SECRET = "whsec_old_fedcba9876543210";
export const PATH = "/webhooks/booking";

/**
 * openStore, retried on SQLITE_BUSY: opening a *fresh* sqlite file races the store's own connections
 * (PRAGMA journal_mode=WAL against the other tables' CREATE TABLE) in about 1-2% of opens. That belongs to
 * src/store/store.ts (reported to its owner); these tests are about webhooks, so they retry instead of flaking.
 */
export async function openTestStore(path: string): Promise<Store> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await openStore(`sqlite://${path}`);
    } catch (error) {
      if (attempt >= 5 || !String(error).includes("SQLITE_BUSY")) throw error;
    }
  }
}

export function tmpStorePath(): string {
  return join(mkdtempSync(join(tmpdir(), "cb-webhooks-")), "calbridge.sqlite");
}

// biome-ignore lint/correctness/useYield: it fails before its first entry, as a store that cannot be read does
async function* failingEntries<T>(): AsyncIterable<[string, T]> {
  throw new Error("SQLITE_IOERR: disk I/O error");
}

/** A store whose reads and writes (every table) fail while `failing` is set. */
export class FlakyStore implements Store {
  failing = false;
  readonly kind: Store["kind"];
  readonly #inner: Store;
  constructor(inner: Store) {
    this.#inner = inner;
    this.kind = inner.kind;
  }
  table<T>(name: TableName): Table<T> {
    const inner = this.#inner.table<T>(name);
    const guard = <A extends unknown[], R>(fn: (...args: A) => Promise<R>) => {
      return (...args: A): Promise<R> =>
        this.failing ? Promise.reject(new Error("SQLITE_IOERR: disk I/O error")) : fn(...args);
    };
    return {
      get: guard((key: string) => inner.get(key)),
      getMany: guard((keys: string[]) => inner.getMany(keys)),
      set: guard((key: string, value: T, ttl?: number) => inner.set(key, value, ttl)),
      delete: guard((key: string) => inner.delete(key)),
      setMany: guard((entries: { key: string; value: T; ttlMs?: number }[]) => inner.setMany(entries)),
      deleteMany: guard((keys: string[]) => inner.deleteMany(keys)),
      addMany: guard((entries: { key: string; value: T; ttlMs?: number }[]) => inner.addMany(entries)),
      replaceIf: guard((key: string, expected: T, value: T) => inner.replaceIf(key, expected, value)),
      entries: () => (this.failing ? failingEntries<T>() : inner.entries()),
    };
  }
  ping(): Promise<void> {
    return this.#inner.ping();
  }
  purgeExpired(): Promise<number> {
    return this.failing ? Promise.reject(new Error("SQLITE_IOERR: disk I/O error")) : this.#inner.purgeExpired();
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
}

export interface SinkCall {
  method: "appointment" | "customerUpdated";
  eventId: string;
  type: string;
  appointmentId: unknown;
}

/** Records hand-overs (`calls`, in order) and finishes (`finished`); `behaviour` may throw or hang. */
export class RecordingSink implements EventSink {
  readonly calls: SinkCall[] = [];
  readonly finished: SinkCall[] = [];
  readonly active = new Map<unknown, number>();
  maxActivePerKey = 0;
  behaviour: (event: BookingWebhookEvent, attempt: number) => Promise<void> | void = () => {};
  readonly #attempts = new Map<string, number>();

  appointment(event: BookingWebhookEvent, log: Logger): Promise<void> {
    return this.#record("appointment", event, log);
  }
  customerUpdated(event: BookingWebhookEvent, log: Logger): Promise<void> {
    return this.#record("customerUpdated", event, log);
  }
  async #record(method: SinkCall["method"], event: BookingWebhookEvent, log: Logger): Promise<void> {
    const key = event.data.object["id"];
    const attempt = (this.#attempts.get(event.id) ?? 0) + 1;
    this.#attempts.set(event.id, attempt);
    const now = (this.active.get(key) ?? 0) + 1;
    this.active.set(key, now);
    this.maxActivePerKey = Math.max(this.maxActivePerKey, now);
    const call = { method, eventId: event.id, type: event.type, appointmentId: key };
    this.calls.push(call);
    try {
      log.info({ attempt }, "sink called");
      await this.behaviour(event, attempt);
      this.finished.push(call);
    } finally {
      this.active.set(key, (this.active.get(key) ?? 1) - 1);
    }
  }
}

export function event(id: string, type: string, object: Record<string, unknown> = {}, extra: object = {}) {
  return { id, type, created_at: "2026-11-22T09:00:00Z", data: { object }, ...extra };
}

export interface Harness {
  url: string;
  clock: ManualClock;
  store: Store;
  flaky: FlakyStore;
  inbox: WebhookInbox;
  processor: InboxProcessor | undefined;
  sink: RecordingSink;
  log: CapturedLog;
  registry: Registry;
  server: Server;
  /** Signs with SECRET at the clock's time unless told otherwise. */
  post(body: unknown, opts?: PostOptions): Promise<{ status: number; json: Record<string, unknown> }>;
  close(): Promise<void>;
}

export interface PostOptions {
  secret?: string;
  timestampSec?: number;
  signature?: string | null;
  contentType?: string | null;
  method?: "POST" | "PUT" | "GET";
  path?: string;
  raw?: boolean;
}

export interface HarnessOptions {
  storePath?: string;
  processor?: boolean;
  processorOptions?: Partial<InboxProcessorOptions>;
  handler?: Partial<WebhookHandlerOptions>;
  clock?: ManualClock;
  log?: CapturedLog;
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const clock = options.clock ?? new ManualClock();
  const log = options.log ?? captureLog("debug", new SecretRegistry());
  const registry = new Registry();
  const store = await openTestStore(options.storePath ?? tmpStorePath());
  const flaky = new FlakyStore(store);
  const inbox = new WebhookInbox({ store: flaky, clock });
  const sink = new RecordingSink();
  const processor =
    options.processor === false
      ? undefined
      : new InboxProcessor({
          inbox,
          sink,
          logger: log.logger,
          clock: clock as Clock,
          registry,
          ...options.processorOptions,
        });
  await processor?.start();
  const handler = createWebhookHandler({
    path: PATH,
    secrets: [SECRET],
    toleranceSec: 300,
    maxBodyBytes: 64 * 1024,
    inbox,
    clock,
    logger: log.logger,
    registry,
    ...options.handler,
  });
  const server = createServer((req, res) => {
    void handler(req, res).then((handled) => {
      if (!handled) {
        res.writeHead(404).end("not found");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const post: Harness["post"] = async (body, opts = {}) => {
    const payload = opts.raw ? (body as string | Buffer) : JSON.stringify(body);
    const headers: Record<string, string> = {};
    if (opts.contentType !== null) headers["content-type"] = opts.contentType ?? "application/json";
    if (opts.signature !== null) {
      headers["x-service-signature"] =
        opts.signature ?? sign(payload, opts.secret ?? SECRET, opts.timestampSec ?? Math.floor(clock.now() / 1000));
    }
    const res = await request(url + (opts.path ?? PATH), { method: opts.method ?? "POST", body: payload, headers });
    const text = await res.body.text();
    let json: Record<string, unknown> = {};
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      json = { text };
    }
    return { status: res.statusCode, json };
  };

  return {
    url,
    clock,
    store,
    flaky,
    inbox,
    processor,
    sink,
    log,
    registry,
    server,
    post,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await processor?.stop(0);
      await store.close();
    },
  };
}

/** Lets retries run: advances the manual clock whenever something sleeps, until the processor is idle. */
export async function drive(clock: ManualClock, processor: InboxProcessor, stepMs = 60_000): Promise<void> {
  let idle = false;
  void processor.idle().then(() => {
    idle = true;
  });
  for (let i = 0; i < 5000 && !idle; i++) {
    await new Promise((r) => setTimeout(r, 1));
    if (clock.waiting > 0) await clock.advance(stepMs);
  }
  if (!idle) throw new Error("processor did not become idle");
}

export async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}

export interface RawUpload {
  /** Sends more of the body. */
  write(data: string | Buffer): void;
  /** The answer's status line and headers, as soon as they arrive (the body may still be unsent). */
  readonly answer: Promise<{ status: number; head: string }>;
  /** Resolves when the server closed the connection. */
  readonly closed: Promise<void>;
  /** Bytes of the body sent so far. */
  readonly sent: number;
  destroy(): void;
}

/**
 * A POST opened on a raw socket: the request line and headers are sent at once, the body only when written, so a test
 * can see what the server answers before (or without) reading a body.
 */
export function rawUpload(
  url: string,
  path: string,
  headers: Record<string, string | number>,
  /** The start of the body, sent in the same write as the headers (one segment on loopback). */
  first = "",
): RawUpload {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  socket.on("error", () => {});
  let sent = 0;
  let received = "";
  let resolveAnswer!: (a: { status: number; head: string }) => void;
  const answer = new Promise<{ status: number; head: string }>((r) => {
    resolveAnswer = r;
  });
  const closed = new Promise<void>((r) => socket.once("close", () => r()));
  socket.on("data", (d) => {
    received += d.toString("latin1");
    const end = received.indexOf("\r\n\r\n");
    if (end >= 0) {
      const head = received.slice(0, end);
      resolveAnswer({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]), head: head.toLowerCase() });
    }
  });
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  socket.write(`POST ${path} HTTP/1.1\r\nHost: ${hostname}\r\n${lines.join("")}\r\n${first}`);
  sent += Buffer.byteLength(first);
  return {
    write(data) {
      if (socket.destroyed) return;
      sent += Buffer.byteLength(data);
      socket.write(data);
    },
    answer,
    closed,
    get sent() {
      return sent;
    },
    destroy: () => socket.destroy(),
  };
}

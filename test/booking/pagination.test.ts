// List walking against servers that do not honour `page`: the walk fails with invalid_response instead of looping
// forever or ending short, and never fetches more pages than meta.total allows (or a generous bound without it).
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { BookingClient } from "../../src/booking/client.ts";
import { BookingApiError } from "../../src/booking/errors.ts";
import { DEFAULT_MAX_PAGES, type Page, paginate } from "../../src/booking/pagination.ts";
import { API_KEY } from "./support.ts";

type Body = { data: { id: string }[]; meta?: Record<string, number> };

interface Served {
  client: BookingClient;
  /** The `page` of every list request, in arrival order. */
  pages: number[];
  /** Aborted once the server has answered far more requests than any test needs: a runaway walk fails fast. */
  signal: AbortSignal;
  close(): Promise<void>;
}

let served: Served | undefined;
afterEach(async () => {
  await served?.close();
  served = undefined;
});

/** A small list endpoint on 127.0.0.1 answering with `respond(page, nth request)`, and a real client on it. */
async function serve(respond: (page: number, nth: number) => Body, pageConcurrency = 1): Promise<Served> {
  const pages: number[] = [];
  const runaway = new AbortController();
  const server = createServer((req: IncomingMessage, res) => {
    const page = Number(new URL(req.url!, "http://x").searchParams.get("page"));
    pages.push(page);
    if (pages.length > 200) runaway.abort(new Error("listing still fetching after 200 pages"));
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(respond(page, pages.length)));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const client = new BookingClient({
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    apiKey: API_KEY,
    requestsPerMinute: 10_000,
    registry: new Registry(),
    pageConcurrency,
  });
  return {
    client,
    pages,
    signal: runaway.signal,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ id: `apt_${from + i}` }));

/** Drains a listing, but gives up (instead of hanging the suite) once it has gone on far longer than it should. */
async function drain<T>(it: AsyncIterable<T>, limit = 2_000): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) {
    out.push(x);
    if (out.length > limit) throw new Error(`listing still going after ${limit} items`);
  }
  return out;
}

async function failure(work: Promise<unknown>): Promise<BookingApiError> {
  const e = await work.then(
    (v) => new Error(`expected a failure, the listing ended with ${(v as unknown[]).length} items`),
    (e: unknown) => e,
  );
  expect(e, String(e)).toBeInstanceOf(BookingApiError);
  return e as BookingApiError;
}

describe("listing from a server that does not honour page", () => {
  it("fails (invalid_response) when, without meta, every page is the same full page", async () => {
    served = await serve(() => ({ data: ids(0, 100) }));
    const e = await failure(drain(served.client.listAppointments({}, { signal: served.signal })));
    expect(e).toMatchObject({ code: "invalid_response", kind: "unknown", retryable: false });
    expect(e.details).toMatchObject({ reason: "page_repeated", page: 2 });
    expect(served.pages).toEqual([1, 2]);
  });

  it("fails (invalid_response) on an empty page that itself says more pages follow, instead of ending short", async () => {
    // Page 2 of 3 comes back empty with its meta unchanged: ended there, a reconciliation took the appointments of
    // page 3 for gone (the mass-deletion guard tripped on events whose appointments all exist).
    served = await serve((page) => ({
      data: page === 2 ? [] : ids((page - 1) * 100, 100),
      meta: { page, per_page: 100, total: 300, total_pages: 3 },
    }));
    const e = await failure(drain(served.client.listAppointments({}, { signal: served.signal })));
    expect(e).toMatchObject({ code: "invalid_response" });
    expect(e.details).toMatchObject({ reason: "empty_page_before_end", page: 2, total_pages: 3 });
  });

  it("ends at an empty page whose own meta says the list shrank to it (appointments removed while paging)", async () => {
    served = await serve((page) =>
      page === 1
        ? { data: ids(0, 100), meta: { page, per_page: 100, total: 300, total_pages: 3 } }
        : { data: [], meta: { page, per_page: 100, total: 100, total_pages: 1 } },
    );
    const items = await drain(served.client.listAppointments({}, { signal: served.signal }));
    expect(items).toHaveLength(100);
  });

  it("fails (invalid_response) when meta.page stays 1 while total_pages is 3, instead of ending 200 items short", async () => {
    served = await serve(() => ({ data: ids(0, 100), meta: { page: 1, per_page: 100, total: 300, total_pages: 3 } }));
    const e = await failure(drain(served.client.listAppointments({}, { signal: served.signal })));
    expect(e).toMatchObject({ code: "invalid_response", kind: "unknown" });
    expect(e.details).toMatchObject({ reason: "page_mismatch", page: 2, served_page: 1 });
    expect(e.message).toMatch(/asked for page 2/);
    expect(served.pages).toEqual([1, 2]);
  });

  it("fails as well when the repeated page carries total_pages but no meta.page, also fetching ahead", async () => {
    served = await serve(() => ({ data: ids(0, 100), meta: { per_page: 100, total: 300, total_pages: 3 } }), 4);
    const e = await failure(drain(served.client.listAppointments({}, { signal: served.signal })));
    expect(e).toMatchObject({ code: "invalid_response", kind: "unknown" });
    expect(e.details).toMatchObject({ reason: "page_repeated", page: 2 });
    expect(Math.max(...served.pages)).toBeLessThanOrEqual(3);
  });

  it("never fetches more than ceil(total / per_page) + 1 pages, even when every page brings new ids", async () => {
    // meta.total says 300 but there is neither total_pages nor an end: fresh full pages forever.
    served = await serve((_page, nth) => ({ data: ids(nth * 100, 100), meta: { total: 300 } }));
    const e = await failure(drain(served.client.listAppointments({}, { signal: served.signal })));
    expect(e).toMatchObject({ code: "invalid_response", kind: "unknown" });
    expect(e.details).toMatchObject({ reason: "too_many_pages", page: 5, max_pages: 4, total: 300 });
    expect(served.pages).toEqual([1, 2, 3, 4]);
  });

  it("holds the cap while total_pages keeps growing and pages are fetched ahead", async () => {
    served = await serve(
      (page) => ({ data: ids(page * 100, 100), meta: { page, per_page: 100, total: 300, total_pages: page + 2 } }),
      4,
    );
    const e = await failure(drain(served.client.listAppointments({}, { signal: served.signal })));
    expect(e.details).toMatchObject({ reason: "too_many_pages", max_pages: 4 });
    expect(new Set(served.pages)).toEqual(new Set([1, 2, 3, 4]));
  });

  it("still walks a server that honours page: total and total_pages growing, a short last page of repeats", async () => {
    const script: Record<number, [from: number, n: number, total: number]> = {
      1: [0, 100, 250],
      2: [100, 100, 320],
      3: [200, 100, 320],
      4: [290, 10, 320],
    };
    served = await serve((page) => {
      const [from, n, total] = script[page]!;
      return { data: ids(from, n), meta: { page, per_page: 100, total, total_pages: Math.ceil(total / 100) } };
    }, 2);
    const items = await drain(served.client.listAppointments({}, { signal: served.signal }));
    expect(items.length).toBe(300);
    expect(served.pages.sort()).toEqual([1, 2, 3, 4]);
  });
});

describe("paginate's bound without meta.total", () => {
  const endless =
    (calls: number[]) =>
    async (page: number): Promise<Page<{ id: string }>> => {
      calls.push(page);
      return { page, items: ids(page * 100, 100), meta: undefined };
    };

  it("stops at 10,000 pages with invalid_response", async () => {
    const calls: number[] = [];
    let yielded = 0;
    const e = await failure(
      (async () => {
        for await (const _ of paginate(endless(calls), 100)) {
          if (++yielded > 20_000) throw new Error("walk still going after 20,000 pages");
        }
        return [];
      })(),
    );
    expect(e).toMatchObject({ code: "invalid_response", kind: "unknown" });
    expect(DEFAULT_MAX_PAGES).toBe(10_000);
    expect(e.details).toMatchObject({ reason: "too_many_pages", max_pages: 10_000 });
    expect(calls.length).toBe(10_000);
    expect(yielded).toBe(10_000);
  });

  it("takes the bound and the item identity as options", async () => {
    const calls: number[] = [];
    const e = await failure(drain(paginate(endless(calls), 100, 1, { maxPages: 7 })));
    expect(e.details).toMatchObject({ reason: "too_many_pages", page: 8, max_pages: 7 });
    expect(calls.length).toBe(7);

    // Items told apart by another key: a repeat of page 1 is noticed through it.
    const rows = Array.from({ length: 10 }, (_, i) => ({ key: i }));
    const same = async (page: number) => ({ page, items: rows, meta: undefined });
    const e2 = await failure(drain(paginate(same, 10, 1, { idOf: (r) => r.key })));
    expect(e2.details).toMatchObject({ reason: "page_repeated", page: 2 });
  });
});

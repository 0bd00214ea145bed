// Owns walking a paginated list: stops at total_pages (the latest one seen, pages drift), or on a short/empty page
// when meta is missing; optionally fetches a few pages ahead once total_pages is known. A server that does not honour
// `page` fails the walk (invalid_response) rather than looping forever or ending it short: a listing is either
// complete or an error.
import { BookingApiError } from "./errors.ts";
import type { ListMeta } from "./schemas.ts";

export interface Page<T> {
  page: number;
  items: T[];
  meta: ListMeta | undefined;
}

/** The most pages a walk fetches when the server never said how many items there are. */
export const DEFAULT_MAX_PAGES = 10_000;

export interface PaginateOptions<T> {
  /** An item's identity, to notice a page that repeats what was already seen. Default: its `id` (string or number). */
  idOf?: (item: T) => string | number | undefined;
  /** The bound on pages fetched when `meta.total` is unknown. Default DEFAULT_MAX_PAGES. */
  maxPages?: number;
  /** Ends the walk after this many pages, without reading ahead past them (a sample of a long list). */
  stopAfter?: number;
}

function defaultIdOf(item: unknown): string | number | undefined {
  const id = typeof item === "object" && item !== null ? (item as { id?: unknown }).id : undefined;
  return typeof id === "string" || typeof id === "number" ? id : undefined;
}

const finite = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

function invalid(message: string, details: Record<string, unknown>): BookingApiError {
  return new BookingApiError({ code: "invalid_response", message, details });
}

export async function* paginate<T>(
  fetchPage: (page: number) => Promise<Page<T>>,
  perPage: number,
  concurrency = 1,
  options: PaginateOptions<T> = {},
): AsyncGenerator<Page<T>> {
  const idOf = options.idOf ?? defaultIdOf;
  const fallbackMax = options.maxPages ?? DEFAULT_MAX_PAGES;
  const stopAfter = options.stopAfter ?? Number.POSITIVE_INFINITY;
  const ahead = new Map<number, Promise<Page<T>>>();
  // Only the ids: enough to tell a page that brings nothing new (a server ignoring `page`) from real progress.
  const seen = new Set<string | number>();
  let totalPages: number | undefined;
  let total: number | undefined;
  let serverPerPage: number | undefined;
  /** ceil(total / per_page) + 1 (one page of slack for drift) once meta.total is known, else the generous bound. */
  const maxPages = (): number => {
    if (total === undefined) return fallbackMax;
    // A server paging by fewer than asked gets the bound its own page size implies.
    const size = serverPerPage !== undefined && serverPerPage >= 1 && serverPerPage < perPage ? serverPerPage : perPage;
    return Math.ceil(Math.max(0, total) / size) + 1;
  };
  const take = (n: number): Promise<Page<T>> => {
    const pending = ahead.get(n);
    ahead.delete(n);
    return pending ?? fetchPage(n);
  };
  try {
    for (let n = 1; ; n++) {
      if (n > maxPages()) {
        throw invalid(`list did not end within ${maxPages()} pages`, {
          reason: "too_many_pages",
          page: n,
          max_pages: maxPages(),
          total,
          total_pages: totalPages,
          per_page: perPage,
        });
      }
      const page = await take(n);
      const meta = page.meta;
      if (finite(meta?.page) && meta.page !== n) {
        throw invalid(`asked for page ${n}, the server answered page ${meta.page} (is it ignoring "page"?)`, {
          reason: "page_mismatch",
          page: n,
          served_page: meta.page,
          total,
          total_pages: meta.total_pages,
        });
      }
      // An empty page that itself says more pages follow is no end (a shrink while paging says fewer pages on it): ended
      // there, a reconciliation took the appointments of the pages after it for gone, and tripped the mass-deletion
      // guard on events whose appointments all still exist.
      if (page.items.length === 0 && finite(meta?.total_pages) && meta.total_pages > n) {
        throw invalid(`page ${n} is empty, but says there are ${meta.total_pages} pages`, {
          reason: "empty_page_before_end",
          page: n,
          total: meta.total,
          total_pages: meta.total_pages,
        });
      }
      if (finite(meta?.total_pages)) totalPages = meta.total_pages;
      if (finite(meta?.total)) total = meta.total;
      if (finite(meta?.per_page)) serverPerPage = meta.per_page;
      const last =
        page.items.length === 0 || (totalPages !== undefined ? n >= totalPages : page.items.length < perPage);

      // A page that brings no new id, when it is full or the walk would go on past it, is the server repeating
      // itself: following it loops forever (no meta) or ends short (total_pages reached on copies of page 1).
      let fresh = 0;
      let identified = 0;
      for (const item of page.items) {
        const id = idOf(item);
        if (id === undefined) continue;
        identified++;
        if (!seen.has(id)) {
          seen.add(id);
          fresh++;
        }
      }
      const repeated = page.items.length > 0 && identified === page.items.length && fresh === 0;
      if (repeated && (page.items.length >= perPage || !last)) {
        throw invalid(`page ${n} repeats items already listed (is the server ignoring "page"?)`, {
          reason: "page_repeated",
          page: n,
          items: page.items.length,
          total,
          total_pages: totalPages,
        });
      }

      if (!last && totalPages !== undefined) {
        for (let m = n + 1; m <= Math.min(totalPages, n + concurrency, maxPages(), stopAfter); m++) {
          if (ahead.has(m)) continue;
          const p = fetchPage(m);
          p.catch(() => {}); // surfaced when awaited; an abandoned prefetch must not be an unhandled rejection
          ahead.set(m, p);
        }
      }
      yield page;
      if (last || n >= stopAfter) return;
    }
  } finally {
    ahead.clear();
  }
}

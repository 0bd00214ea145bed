// Owns walking a paginated list: stops at total_pages (the latest one seen, pages drift), or on a short/empty page
// when meta is missing; optionally fetches a few pages ahead once total_pages is known.
import type { ListMeta } from "./schemas.ts";

export interface Page<T> {
  page: number;
  items: T[];
  meta: ListMeta | undefined;
}

export async function* paginate<T>(
  fetchPage: (page: number) => Promise<Page<T>>,
  perPage: number,
  concurrency = 1,
): AsyncGenerator<Page<T>> {
  const ahead = new Map<number, Promise<Page<T>>>();
  let totalPages: number | undefined;
  const take = (n: number): Promise<Page<T>> => {
    const pending = ahead.get(n);
    ahead.delete(n);
    return pending ?? fetchPage(n);
  };
  try {
    for (let n = 1; ; n++) {
      const page = await take(n);
      const reported = page.meta?.total_pages;
      if (typeof reported === "number" && Number.isFinite(reported)) totalPages = reported;
      const last =
        page.items.length === 0 || (totalPages !== undefined ? n >= totalPages : page.items.length < perPage);
      if (!last && totalPages !== undefined) {
        for (let m = n + 1; m <= Math.min(totalPages, n + concurrency); m++) {
          if (ahead.has(m)) continue;
          const p = fetchPage(m);
          p.catch(() => {}); // surfaced when awaited; an abandoned prefetch must not be an unhandled rejection
          ahead.set(m, p);
        }
      }
      yield page;
      if (last) return;
    }
  } finally {
    ahead.clear();
  }
}

// Owns events.list of the emulator: filters, time bounds, paging over a snapshot, sync tokens and their restrictions.
import { randomBytes } from "node:crypto";
import { type EventRecord, toDeletedResource, toResource } from "./event-model.ts";
import { ApiError } from "./http.ts";
import type { CalendarRecord, CalendarStore } from "./store.ts";
import { parseRfc3339 } from "./time.ts";

type Query = Record<string, string | string[]>;

const DEFAULT_PAGE = 250;
const MAX_PAGE = 2500;
const NOT_WITH_SYNC_TOKEN = [
  "iCalUID",
  "orderBy",
  "privateExtendedProperty",
  "sharedExtendedProperty",
  "q",
  "timeMin",
  "timeMax",
  "updatedMin",
];

interface PageState {
  calendarId: string;
  items: Record<string, unknown>[];
  nextSyncToken: string;
}

const one = (q: Query, key: string): string | undefined => {
  const v = q[key];
  return Array.isArray(v) ? v[0] : v;
};
const all = (q: Query, key: string): string[] => {
  const v = q[key];
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
};

function bound(q: Query, key: string): number | undefined {
  const text = one(q, key);
  if (text === undefined) return undefined;
  const ms = parseRfc3339(text);
  if (Number.isNaN(ms)) throw new ApiError(400, "badRequest", `Bad Request: ${key} must be RFC 3339 with an offset.`);
  return ms;
}

function propertyFilter(specs: string[], props: Record<string, string> | undefined): boolean {
  return specs.every((spec) => {
    const eq = spec.indexOf("=");
    if (eq < 1) throw new ApiError(400, "invalid", "Invalid extended property filter.");
    return props?.[spec.slice(0, eq)] === spec.slice(eq + 1);
  });
}

export interface ListFaults {
  /** True when this page should come back empty although items remain (Google does this). */
  takeEmptyPage(): boolean;
}

export class EventLister {
  readonly #store: CalendarStore;
  readonly #pages = new Map<string, PageState>();

  constructor(store: CalendarStore) {
    this.#store = store;
  }

  list(cal: CalendarRecord, q: Query, faults: ListFaults): Record<string, unknown> {
    const maxText = one(q, "maxResults");
    const max = maxText === undefined ? DEFAULT_PAGE : Number(maxText);
    if (!Number.isInteger(max) || max < 1) throw new ApiError(400, "invalid", "Invalid maxResults value.");
    const pageSize = Math.min(max, MAX_PAGE);
    const pageToken = one(q, "pageToken");
    let state: PageState;
    if (pageToken !== undefined) {
      const saved = this.#pages.get(pageToken);
      if (!saved || saved.calendarId !== cal.id) throw new ApiError(400, "invalid", "Invalid page token value.");
      this.#pages.delete(pageToken);
      state = saved;
    } else {
      state = this.#firstState(cal, q);
    }
    const body: Record<string, unknown> = {
      kind: "calendar#events",
      etag: `"p${this.#store.seq}"`,
      summary: cal.summary,
      updated: new Date().toISOString(),
      timeZone: cal.timeZone,
      accessRole: "owner",
      defaultReminders: [],
    };
    const take = state.items.length > 0 && faults.takeEmptyPage() ? 0 : pageSize;
    body.items = state.items.slice(0, take);
    const rest = state.items.slice(take);
    if (rest.length > 0 || take === 0) {
      const token = randomBytes(18).toString("base64url");
      this.#pages.set(token, { ...state, items: rest });
      this.#trim();
      body.nextPageToken = token;
    } else {
      body.nextSyncToken = state.nextSyncToken;
    }
    return body;
  }

  #trim(): void {
    while (this.#pages.size > 5000) {
      const oldest = this.#pages.keys().next().value;
      if (oldest === undefined) break;
      this.#pages.delete(oldest);
    }
  }

  #firstState(cal: CalendarRecord, q: Query): PageState {
    const syncToken = one(q, "syncToken");
    let records: EventRecord[];
    if (syncToken !== undefined) {
      const bad = NOT_WITH_SYNC_TOKEN.filter((k) => q[k] !== undefined);
      if (bad.length > 0)
        throw new ApiError(400, "invalid", `${bad.join(", ")} cannot be used together with syncToken.`);
      if (one(q, "showDeleted") === "false") {
        throw new ApiError(
          400,
          "invalid",
          "showDeleted cannot be false with syncToken: deleted events are always included.",
        );
      }
      const since = this.#store.syncPosition(cal, syncToken);
      records = [...cal.events.values()].filter((r) => r.seq > since).sort((a, b) => a.seq - b.seq);
    } else {
      records = this.#filtered(cal, q);
    }
    return {
      calendarId: cal.id,
      items: records.map((r) => (r.status === "cancelled" ? toDeletedResource(r) : toResource(r, cal))),
      nextSyncToken: this.#store.issueSyncToken(cal),
    };
  }

  #filtered(cal: CalendarRecord, q: Query): EventRecord[] {
    const timeMin = bound(q, "timeMin");
    const timeMax = bound(q, "timeMax");
    const updatedMin = bound(q, "updatedMin");
    if (timeMin !== undefined && timeMax !== undefined && timeMin >= timeMax) throw new ApiError(400, "timeRangeEmpty");
    const orderBy = one(q, "orderBy");
    if (orderBy !== undefined && orderBy !== "startTime" && orderBy !== "updated") {
      throw new ApiError(400, "invalid", "Invalid orderBy value.");
    }
    if (orderBy === "startTime" && one(q, "singleEvents") !== "true") {
      throw new ApiError(400, "badRequest", "The requested ordering is not available for the particular query.");
    }
    const showDeleted = one(q, "showDeleted") === "true";
    const privateSpecs = all(q, "privateExtendedProperty");
    const sharedSpecs = all(q, "sharedExtendedProperty");
    const text = one(q, "q")?.toLowerCase();
    const iCalUID = one(q, "iCalUID");
    const out = [...cal.events.values()].filter((r) => {
      if (r.status === "cancelled" && !showDeleted) return false;
      // timeMin bounds the end, timeMax the start, both exclusive.
      if (timeMin !== undefined && !(r.end.ms > timeMin)) return false;
      if (timeMax !== undefined && !(r.start.ms < timeMax)) return false;
      if (updatedMin !== undefined && r.updated < updatedMin) return false;
      if (iCalUID !== undefined && `${r.id}@google.com` !== iCalUID) return false;
      const props = r.fields.extendedProperties as {
        private?: Record<string, string>;
        shared?: Record<string, string>;
      };
      if (!propertyFilter(privateSpecs, props?.private)) return false;
      if (!propertyFilter(sharedSpecs, props?.shared)) return false;
      if (text) {
        const hay =
          `${r.fields.summary ?? ""}\n${r.fields.description ?? ""}\n${r.fields.location ?? ""}`.toLowerCase();
        if (!hay.includes(text)) return false;
      }
      return true;
    });
    if (orderBy === "startTime") out.sort((a, b) => a.start.ms - b.start.ms);
    else if (orderBy === "updated") out.sort((a, b) => a.updated - b.updated);
    else out.sort((a, b) => a.created - b.created || (a.id < b.id ? -1 : 1));
    return out;
  }
}

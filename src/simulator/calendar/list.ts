// Owns events.list and events.instances of the emulator: paging over a snapshot, sync tokens and their restrictions,
// and how each listed event is shown (a deleted one with or without its details).
import { randomBytes } from "node:crypto";
import { type EventRecord, toDeletedResource, toResource } from "./event-model.ts";
import { ApiError } from "./http.ts";
import { changedSince, one, type Query, selectEvents, selectInstances } from "./selection.ts";
import type { CalendarRecord, CalendarStore } from "./store.ts";

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
  /** Absent for events.instances, which has no incremental sync. */
  nextSyncToken?: string;
}

export interface ListFaults {
  /** True when this page should come back empty although items remain (Google does this). */
  takeEmptyPage(): boolean;
}

/**
 * A listed event. A deleted one shows its details only when the request asked for deleted events: Google's reference
 * (Event.status) says deleted events keep their details on the organizer's calendar "so that they can be restored",
 * but "incremental sync requests with showDeleted set to false will not return these details"; the entry a move left
 * behind, and an instance that vanished from a series, never have them.
 */
function shown(rec: EventRecord, cal: CalendarRecord, showDeleted: boolean): Record<string, unknown> {
  if (rec.status !== "cancelled") return toResource(rec, cal);
  return showDeleted && !rec.movedAway && !rec.vanished ? toResource(rec, cal) : toDeletedResource(rec, cal);
}

export class EventLister {
  readonly #store: CalendarStore;
  readonly #pages = new Map<string, PageState>();

  constructor(store: CalendarStore) {
    this.#store = store;
  }

  list(cal: CalendarRecord, q: Query, faults: ListFaults): Record<string, unknown> {
    return this.#page(cal, q, faults, () => this.#firstState(cal, q));
  }

  instances(cal: CalendarRecord, master: EventRecord, q: Query, faults: ListFaults): Record<string, unknown> {
    return this.#page(cal, q, faults, () => {
      const showDeleted = one(q, "showDeleted") === "true";
      const records = selectInstances(cal, master, q, this.#store.clock.now());
      return { calendarId: cal.id, items: records.map((r) => shown(r, cal, showDeleted)) };
    });
  }

  #page(cal: CalendarRecord, q: Query, faults: ListFaults, first: () => PageState): Record<string, unknown> {
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
      state = first();
    }
    const body: Record<string, unknown> = {
      kind: "calendar#events",
      etag: `"p${this.#store.seq}"`,
      summary: cal.summary,
      updated: new Date(this.#store.clock.now()).toISOString(),
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
    } else if (state.nextSyncToken !== undefined) {
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
    const now = this.#store.clock.now();
    const syncToken = one(q, "syncToken");
    const singleEvents = one(q, "singleEvents") === "true";
    const showDeleted = one(q, "showDeleted") === "true";
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
      const position = this.#store.syncPosition(cal, syncToken);
      // Google's reference (events.list syncToken): "All other query parameters should be the same as for the initial
      // synchronization to avoid undefined behavior". Expanding or not is the one that changes what the token means;
      // the emulator refuses the mix instead of picking a behaviour.
      if (position.singleEvents !== singleEvents) {
        throw new ApiError(
          400,
          "invalid",
          `singleEvents=${singleEvents} differs from the listing that issued this syncToken ` +
            `(singleEvents=${position.singleEvents}); Google leaves that undefined.`,
        );
      }
      records = changedSince(cal, position.seq, singleEvents, now);
    } else {
      records = selectEvents(cal, q, now);
    }
    return {
      calendarId: cal.id,
      items: records.map((r) => shown(r, cal, showDeleted)),
      nextSyncToken: this.#store.issueSyncToken(cal, singleEvents),
    };
  }
}

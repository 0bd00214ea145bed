// Owns the simulated service's data and its rules: create, update, cancel, complete, no-show, customer changes,
// list queries. Every change bumps updated_at (strictly increasing) and emits the spec's event.
import type { Clock } from "../../clock.ts";
import {
  ADDONS,
  parseTime,
  type SimAppointment,
  type SimCustomer,
  SimError,
  type SimService,
  type SimTherapist,
} from "./model.ts";
import { FIRST_NAMES, fnv1a, LAST_NAMES, type Rng } from "./random.ts";
import { cancelledForm, changedEvent, createdEvent, customerForm, type Lookup } from "./views.ts";

export type Emit = (type: string, object: Record<string, unknown>, previous?: Record<string, unknown>) => void;

export interface WorkingHours {
  /** UTC hour the day starts (inclusive) and ends (exclusive end of the last appointment). */
  start: number;
  end: number;
}

export interface StoreOptions {
  rng: Rng;
  clock: Clock;
  services: SimService[];
  workingHours: WorkingHours;
  blockedEmails: string[];
  emit: Emit;
}

export interface ChangeOptions {
  /** Staff override (the data API): skip the availability rules (past, working hours, overlap, blocked customer). */
  force?: boolean;
}

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const PATCH_STATUSES = new Set(["confirmed", "completed", "no_show"]);

const invalid = (field: string, message: string) => new SimError(400, "invalid_request", message, { field });
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function optional<T>(body: Record<string, unknown>, field: string, type: string): T | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== type) throw invalid(field, `${field} must be a ${type}`);
  return v as T;
}

export class BookingStore implements Lookup {
  readonly services = new Map<string, SimService>();
  readonly therapists = new Map<string, SimTherapist>();
  readonly customers = new Map<string, SimCustomer>();
  readonly appointments = new Map<string, SimAppointment>();
  readonly #byEmail = new Map<string, SimCustomer>();
  readonly #o: StoreOptions;
  #ordered: SimAppointment[] | undefined;
  #lastStamp = 0;

  constructor(options: StoreOptions) {
    this.#o = options;
    for (const s of options.services) this.services.set(s.id, { ...s });
  }

  get rng(): Rng {
    return this.#o.rng;
  }

  get workingHours(): WorkingHours {
    return this.#o.workingHours;
  }

  now(): number {
    return this.#o.clock.now();
  }

  service = (id: string) => this.services.get(id);
  therapist = (id: string) => this.therapists.get(id);
  customer = (id: string) => this.customers.get(id);

  addTherapist(id: string, name?: string): SimTherapist {
    const existing = this.therapists.get(id);
    if (existing) return existing;
    const base = id.replace(/^th_/, "");
    const t = { id, name: name ?? base.charAt(0).toUpperCase() + base.slice(1) };
    this.therapists.set(id, t);
    return t;
  }

  /** updated_at/created_at values: the clock's time, but always after the previous one (also within one ms). */
  stamp(): string {
    this.#lastStamp = Math.max(this.#o.clock.now(), this.#lastStamp + 1);
    return new Date(this.#lastStamp).toISOString();
  }

  /** Appointments in the list order: a stable hash of the id, unrelated to time. */
  ordered(): SimAppointment[] {
    this.#ordered ??= [...this.appointments.values()].sort(
      (a, b) => fnv1a(a.id) - fnv1a(b.id) || (a.id < b.id ? -1 : 1),
    );
    return this.#ordered;
  }

  newId(prefix: string): string {
    for (;;) {
      const id = `${prefix}_${this.#o.rng.token(12)}`;
      if (!this.appointments.has(id) && !this.customers.has(id)) return id;
    }
  }

  /** Adds without rules or events (seeding). */
  insert(a: SimAppointment): void {
    this.appointments.set(a.id, a);
    this.#ordered = undefined;
  }

  newCustomer(name: string, email: string, phone: string | undefined, emitEvent: boolean): SimCustomer {
    const c: SimCustomer = {
      id: this.newId("cus"),
      name,
      email,
      phone,
      blocked: this.#o.blockedEmails.includes(email.toLowerCase()),
    };
    this.customers.set(c.id, c);
    this.#byEmail.set(email.toLowerCase(), c);
    if (emitEvent) this.#o.emit("customer.created", customerForm(c));
    return c;
  }

  randomCustomer(): SimCustomer {
    const rng = this.#o.rng;
    const first = rng.pick(FIRST_NAMES);
    const last = rng.pick(LAST_NAMES);
    const n = this.customers.size + 1;
    const email = `${first}.${last}${n}@example.com`
      .toLowerCase()
      .normalize("NFD")
      .replace(/[^\x20-\x7e]/g, "");
    return this.newCustomer(`${first} ${last}`, email, `+49 30 ${rng.int(1_000_000, 9_999_999)}`, false);
  }

  within(start: number, end: number): boolean {
    const { start: from, end: to } = this.#o.workingHours;
    const day = Math.floor(start / DAY) * DAY;
    return start >= day + from * HOUR && end <= day + to * HOUR;
  }

  /** A confirmed appointment of the therapist overlapping [start, end), other than `except`. */
  overlapping(therapistId: string, start: number, end: number, except?: string): SimAppointment | undefined {
    for (const a of this.appointments.values()) {
      if (
        a.therapist_id === therapistId &&
        a.status === "confirmed" &&
        a.id !== except &&
        a.start < end &&
        start < a.end
      ) {
        return a;
      }
    }
    return undefined;
  }

  /** POST /v1/appointments (and the data API's create). Checks run in the order of the spec's error list. */
  create(body: unknown, options: ChangeOptions = {}): SimAppointment {
    if (!isObject(body)) throw invalid("body", "request body must be a JSON object");
    const serviceId = body.service_id;
    if (typeof serviceId !== "string" || serviceId === "") throw invalid("service_id", "service_id is required");
    const start =
      typeof body.start_time === "string" && body.start_time.includes("T") ? parseTime(body.start_time) : undefined;
    if (start === undefined) throw invalid("start_time", "start_time is required, as an ISO 8601 date-time");
    const customer = body.customer;
    if (!isObject(customer)) throw invalid("customer", "customer is required");
    const email = customer.email;
    if (typeof email !== "string" || !/^[^@\s]+@[^@\s]+$/.test(email))
      throw invalid("customer.email", "customer.email is required");
    const name = customer.name;
    if (typeof name !== "string" || name.trim() === "") throw invalid("customer.name", "customer.name is required");
    const phone = optional<string>(customer, "phone", "string");
    const notes = optional<string>(body, "notes", "string") ?? "";
    const therapistId = optional<string>(body, "therapist_id", "string");
    optional<boolean>(body, "send_confirmation", "boolean");
    const addons = body.addons ?? [];
    if (!Array.isArray(addons) || !addons.every((x) => typeof x === "string")) {
      throw invalid("addons", "addons must be an array of add-on identifiers");
    }
    const service = this.services.get(serviceId);
    if (!service) throw new SimError(404, "service_not_found", `no service ${serviceId}`, { field: "service_id" });
    if (therapistId !== undefined && !this.therapists.has(therapistId))
      throw invalid("therapist_id", `no therapist ${therapistId}`);
    const end = start + service.duration_minutes * 60_000;
    const known = this.#byEmail.get(email.toLowerCase());
    if (!options.force) {
      if (start < this.#o.clock.now())
        throw new SimError(422, "past_booking", "start_time is in the past", { field: "start_time" });
      if (known?.blocked || this.#o.blockedEmails.includes(email.toLowerCase())) {
        throw new SimError(403, "customer_blocked", "this customer cannot book", { field: "customer.email" });
      }
    }
    const therapist = therapistId ?? this.#assign(start, end, options.force === true);
    if (!options.force && therapistId !== undefined) {
      if (!this.within(start, end)) {
        throw new SimError(409, "therapist_unavailable", "the therapist does not work at that time", {
          field: "therapist_id",
        });
      }
      if (this.overlapping(therapistId, start, end)) {
        throw new SimError(409, "slot_unavailable", "the requested time is no longer available", {
          field: "start_time",
        });
      }
    }
    const c = known ?? this.newCustomer(name, email, phone, true);
    const stamp = this.stamp();
    const a: SimAppointment = {
      id: this.newId("apt"),
      service_id: service.id,
      therapist_id: therapist,
      customer_id: c.id,
      start,
      end,
      status: "confirmed",
      notes,
      addons: (addons as string[]).map((id) => ({ id, name: ADDONS[id] ?? id })),
      price: service.price,
      currency: service.currency,
      payment_status: "paid",
      created_at: stamp,
      updated_at: stamp,
    };
    this.insert(a);
    this.#o.emit("appointment.created", createdEvent(a, this));
    return a;
  }

  /** Auto-assignment: the first therapist (in a per-slot hash order) who works then and is free. */
  #assign(start: number, end: number, force: boolean): string {
    const ids = [...this.therapists.keys()].sort((a, b) => fnv1a(`${start}${a}`) - fnv1a(`${start}${b}`));
    const free = ids.find((id) => force || (this.within(start, end) && !this.overlapping(id, start, end)));
    if (!free)
      throw new SimError(409, "slot_unavailable", "no therapist is available at that time", { field: "start_time" });
    return free;
  }

  get(id: string): SimAppointment {
    const a = this.appointments.get(id);
    if (!a) throw new SimError(404, "not_found", `no appointment ${id}`, { id });
    return a;
  }

  /**
   * PATCH /v1/appointments/:id. Moving or reassigning needs status confirmed (else 409 invalid_state); status may go
   * confirmed -> completed | no_show (cancel has its own endpoint); setting a value it already has changes nothing.
   */
  update(id: string, body: unknown, options: ChangeOptions = {}): SimAppointment {
    const a = this.get(id);
    if (!isObject(body)) throw invalid("body", "request body must be a JSON object");
    const startText = optional<string>(body, "start_time", "string");
    const therapistId = optional<string>(body, "therapist_id", "string");
    const notes = optional<string>(body, "notes", "string");
    const status = optional<string>(body, "status", "string");
    if (startText === undefined && therapistId === undefined && notes === undefined && status === undefined) {
      throw invalid("body", "nothing to update: give start_time, therapist_id, notes or status");
    }
    const start = startText === undefined ? a.start : startText.includes("T") ? parseTime(startText) : undefined;
    if (start === undefined) throw invalid("start_time", "start_time must be an ISO 8601 date-time");
    if (therapistId !== undefined && !this.therapists.has(therapistId))
      throw invalid("therapist_id", `no therapist ${therapistId}`);
    if (status !== undefined && status !== a.status) {
      if (status === "cancelled") throw invalid("status", "use POST /v1/appointments/:id/cancel to cancel");
      if (!PATCH_STATUSES.has(status)) throw invalid("status", `unknown status ${status}`);
      if (a.status !== "confirmed" || status === "confirmed") {
        throw new SimError(409, "invalid_state", `cannot change status from ${a.status} to ${status}`, {
          status: a.status,
        });
      }
    }
    const therapist = therapistId ?? a.therapist_id;
    const end = start + (a.end - a.start);
    const moves = start !== a.start || therapist !== a.therapist_id;
    if (moves && a.status !== "confirmed") {
      throw new SimError(409, "invalid_state", `a ${a.status} appointment cannot be moved`, { status: a.status });
    }
    if (moves && !options.force) {
      if (start < this.#o.clock.now())
        throw new SimError(422, "past_booking", "start_time is in the past", { field: "start_time" });
      const field = therapist !== a.therapist_id ? "therapist_id" : "start_time";
      if (!this.within(start, end)) {
        throw new SimError(409, "therapist_unavailable", "the therapist does not work at that time", { field });
      }
      if (this.overlapping(therapist, start, end, a.id)) {
        if (therapist !== a.therapist_id) {
          throw new SimError(409, "therapist_unavailable", "the therapist is not available at that time", { field });
        }
        throw new SimError(409, "slot_unavailable", "the requested time is no longer available", { field });
      }
    }
    const newStatus = status ?? a.status;
    const changed = moves || (notes !== undefined && notes !== a.notes) || newStatus !== a.status;
    if (!changed) return a;
    a.start = start;
    a.end = end;
    a.therapist_id = therapist;
    if (notes !== undefined) a.notes = notes;
    const statusChanged = newStatus !== a.status;
    a.status = newStatus;
    a.updated_at = this.stamp();
    this.#o.emit("appointment.updated", changedEvent(a, this));
    if (statusChanged) this.#o.emit(`appointment.${newStatus}`, changedEvent(a, this));
    return a;
  }

  /**
   * POST /v1/appointments/:id/cancel. Only a confirmed appointment can be cancelled: cancelling again (or a completed
   * one) is 409 invalid_state. Refund: `refund` true = the price, false = 0, omitted = the policy (price when at
   * least 24 h ahead, else 0). refund_status "processing" when something is refunded, else "none".
   */
  cancel(id: string, body: unknown = {}): SimAppointment {
    const a = this.get(id);
    const b = body ?? {};
    if (!isObject(b)) throw invalid("body", "request body must be a JSON object");
    const reason = optional<string>(b, "reason", "string");
    optional<boolean>(b, "notify_customer", "boolean");
    const refund = optional<boolean>(b, "refund", "boolean");
    if (a.status !== "confirmed") {
      const message =
        a.status === "cancelled"
          ? "the appointment is already cancelled"
          : `a ${a.status} appointment cannot be cancelled`;
      throw new SimError(409, "invalid_state", message, { status: a.status });
    }
    const amount =
      refund === true ? a.price : refund === false ? 0 : a.start - this.#o.clock.now() >= DAY ? a.price : 0;
    const stamp = this.stamp();
    a.status = "cancelled";
    a.cancelled_at = stamp;
    a.updated_at = stamp;
    a.cancellation_reason = reason ?? "";
    a.refund_amount = amount;
    a.refund_status = amount > 0 ? "processing" : "none";
    const { refund_status: _, ...object } = cancelledForm(a);
    this.#o.emit("appointment.cancelled", object, { status: "confirmed" });
    return a;
  }

  /** Data API: the service marks a confirmed appointment completed or no_show (status field "no_show"). */
  finish(id: string, status: "completed" | "no_show"): SimAppointment {
    const a = this.get(id);
    if (a.status !== "confirmed") {
      throw new SimError(409, "invalid_state", `cannot change status from ${a.status} to ${status}`, {
        status: a.status,
      });
    }
    a.status = status;
    a.updated_at = this.stamp();
    this.#o.emit(`appointment.${status}`, changedEvent(a, this));
    return a;
  }

  /**
   * Data API: staff take a cancellation back (the customer changed their mind): confirmed again, the cancellation's
   * fields cleared, appointment.updated. The spec shows no such move; a service may well allow it, so calbridge must
   * not take the old state for the new one.
   */
  restoreCancelled(id: string): SimAppointment {
    const a = this.get(id);
    if (a.status !== "cancelled") {
      throw new SimError(409, "invalid_state", `only a cancelled appointment can be restored (it is ${a.status})`, {
        status: a.status,
      });
    }
    a.status = "confirmed";
    for (const key of ["cancelled_at", "cancellation_reason", "refund_amount", "refund_status"] as const) delete a[key];
    a.updated_at = this.stamp();
    this.#o.emit("appointment.updated", changedEvent(a, this));
    return a;
  }

  /** Data API: customer record changes (customer.updated). Appointments' updated_at is not touched. */
  updateCustomer(
    id: string,
    fields: { name?: string; email?: string; phone?: string; blocked?: boolean },
  ): SimCustomer {
    const c = this.customers.get(id);
    if (!c) throw new SimError(404, "not_found", `no customer ${id}`, { id });
    if (fields.email !== undefined && fields.email !== c.email) {
      this.#byEmail.delete(c.email.toLowerCase());
      c.email = fields.email;
      this.#byEmail.set(c.email.toLowerCase(), c);
    }
    if (fields.name !== undefined) c.name = fields.name;
    if (fields.phone !== undefined) c.phone = fields.phone;
    if (fields.blocked !== undefined) c.blocked = fields.blocked;
    this.#o.emit("customer.updated", customerForm(c));
    return c;
  }
}

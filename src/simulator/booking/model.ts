// Owns the simulator's records (services, therapists, customers, appointments), its error type and time formatting.

export interface SimService {
  id: string;
  name: string;
  duration_minutes: number;
  price: number;
  currency: string;
}

export interface SimTherapist {
  id: string;
  name: string;
}

export interface SimCustomer {
  id: string;
  name: string;
  email: string;
  phone: string | undefined;
  blocked: boolean;
}

export interface SimAppointment {
  id: string;
  service_id: string;
  therapist_id: string;
  customer_id: string;
  /** Epoch ms. */
  start: number;
  end: number;
  /** confirmed | cancelled | completed | no_show */
  status: string;
  notes: string;
  addons: { id: string; name: string }[];
  price: number;
  currency: string;
  payment_status: string;
  created_at: string;
  updated_at: string;
  cancelled_at?: string;
  cancellation_reason?: string;
  refund_amount?: number;
  refund_status?: string;
  /** Fields the list and Get forms show as null (an unassigned appointment, one without a fixed end): showNull(). */
  shownNull?: readonly ("therapist_id" | "start_time" | "end_time" | "status")[];
}

/** A refusal with the HTTP status and error envelope the simulator answers with. */
export class SimError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: Record<string, unknown>;

  constructor(status: number, code: string, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = "SimError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** ISO 8601 UTC; whole seconds drop the ".000". */
export function iso(ms: number): string {
  const s = new Date(ms).toISOString();
  return s.endsWith(".000Z") ? `${s.slice(0, -5)}Z` : s;
}

/** Full ISO 8601 with a zone (Z or an offset) or a plain date; anything else is not accepted. */
export function parseTime(value: unknown): number | undefined {
  if (typeof value !== "string") return undefined;
  if (!/^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2}))?$/.test(value)) return undefined;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? undefined : ms;
}

export const DEFAULT_SERVICES: SimService[] = [
  { id: "svc_massage_60", name: "Massage 60 min", duration_minutes: 60, price: 8000, currency: "eur" },
  { id: "svc_massage_90", name: "Massage 90 min", duration_minutes: 90, price: 11000, currency: "eur" },
  { id: "svc_physio_30", name: "Physiotherapy 30 min", duration_minutes: 30, price: 5000, currency: "eur" },
  { id: "svc_consult_45", name: "Consultation 45 min", duration_minutes: 45, price: 6500, currency: "eur" },
];

export const ADDONS: Record<string, string> = {
  addon_hot_stones: "Hot stones",
  addon_aromatherapy: "Aromatherapy",
};

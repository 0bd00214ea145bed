// Owns the shape of calbridge's YAML configuration: one zod schema, the source of validation, defaults,
// TypeScript types and the JSON Schema that `calbridge config-schema` prints.
import { validate as validateCron } from "node-cron";
import { z } from "zod";
import { placeholder } from "../calendar/placeholders.ts";
import { PRESET_NAMES, PRESETS } from "../calendar/presets.ts";
import { MAX_REMINDER_MINUTES, MAX_REMINDERS } from "../calendar/reminders.ts";
import { bracedOf } from "../calendar/template.ts";
import { CONNECT_PATH, HEALTHZ_PATH, PUSH_PATH } from "../public-paths.ts";

const url = (what: string) =>
  z.string().refine(
    (v) => {
      try {
        const u = new URL(v);
        return u.protocol === "http:" || u.protocol === "https:";
      } catch {
        return false;
      }
    },
    { message: `expected an http(s) URL, e.g. https://${what}.example` },
  );

const httpsUrl = (what: string) =>
  url(what).refine((v) => v.startsWith("https://"), { message: "must be an https:// URL (the sender requires HTTPS)" });

/** Hosts the booking API may be reached on over plain http: the demo, simulators and tests run there. */
const LOOPBACK_HOSTS = new Set(["localhost", "127.0.0.1", "[::1]"]);

/**
 * An http(s) URL that must be https unless it points at this machine: `carried` names the secrets that would travel
 * in clear text over http:// (an emulator or a proxy on loopback may still use it).
 */
const httpsUnlessLoopback = (what: string, carried = "the API key") =>
  url(what).refine(
    (v) => {
      try {
        const u = new URL(v);
        return u.protocol !== "http:" || LOOPBACK_HOSTS.has(u.hostname);
      } catch {
        return true; // `url` already reports it
      }
    },
    {
      message: `must be an https:// URL: over http:// ${carried} would travel in clear text (http:// is allowed only for localhost, 127.0.0.1 and [::1])`,
    },
  );

/**
 * What is wrong with the whitespace at the ends of a secret, if anything, without showing the secret. A stray newline
 * (a Kubernetes secret, `echo` into a file) would otherwise fail every request or signature, far from its cause.
 */
function secretWhitespaceProblem(value: string): string | undefined {
  if (value.length === 0) return undefined;
  if (value.trim() === "") return "is only whitespace (from the file or environment variable?); set the secret";
  const describe = (end: "leading" | "trailing", ws: string) => {
    const newline = /[\r\n]/.test(ws);
    const other = /[^\r\n]/.test(ws);
    const spaces = /^[ ]+$/.test(ws.replace(/[\r\n]/g, "")) ? "spaces" : "whitespace";
    return newline && other ? `a ${end} newline and ${spaces}` : newline ? `a ${end} newline` : `${end} ${spaces}`;
  };
  const lead = /^\s+/.exec(value)?.[0];
  const trail = /\s+$/.exec(value)?.[0];
  if (!lead && !trail) return undefined;
  const found = [lead && describe("leading", lead), trail && describe("trailing", trail)].filter(Boolean);
  return `has ${found.join(" and ")} (from the file or environment variable?); remove it`;
}

const noStrayWhitespace = (ctx: z.core.ParsePayload<string>) => {
  const problem = secretWhitespaceProblem(ctx.value);
  // The value is never part of the message (nor of the input kept on the issue): it is a secret.
  if (problem) ctx.issues.push({ code: "custom", message: problem, input: "[secret]" });
};

/** A value's kind, for a message that must not show the value itself. */
function kindOf(value: unknown): string {
  if (value === null) return "nothing (null)";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "a mapping";
  return /^[aeiou]/.test(typeof value) ? `an ${typeof value}` : `a ${typeof value}`;
}

/**
 * The message of a secret (or list of secrets) of the wrong type: the type found, never the value. An API key of digits
 * left unquoted is a YAML number, and "expected string, found number 12345678901234" went to the log of a refused
 * reload; a list of secrets written as one string showed its start. A missing value is left to the loader ("required").
 */
const typeOnly =
  (expected: string, hint: string) =>
  (iss: z.core.$ZodRawIssue): string | undefined =>
    iss.code === "invalid_type" && iss.input !== undefined
      ? `expected ${expected}, found ${kindOf(iss.input)}; ${hint}`
      : undefined;

const secret = (what: string) =>
  z
    .string({ error: typeOnly("a string", "quote it or use a ${...} reference") })
    .min(1, `${what} is empty`)
    .check(noStrayWhitespace);

/** A list of secrets; written otherwise, its message names the type found, never the value. */
const secretList = <T extends z.ZodType>(item: T) =>
  z.array(item, { error: typeOnly("a list", "write each secret as a list item: - ${NAME}") });

/**
 * Where people's browsers reach the daemon: https, or http on a loopback host (Google accepts http redirect URIs only
 * for localhost: https://developers.google.com/identity/protocols/oauth2/web-server#uri-validation). No query or
 * fragment: paths are appended to it.
 */
const publicBaseUrl = url("sync.clinic").refine(
  (v) => {
    try {
      const u = new URL(v);
      return (u.protocol === "https:" || LOOPBACK_HOSTS.has(u.hostname)) && !u.search && !u.hash;
    } catch {
      return true; // `url` already reports it
    }
  },
  {
    message:
      "must be an https:// address without query or fragment (Google accepts http:// redirect URIs only for localhost, 127.0.0.1 and [::1])",
  },
);

/** A key for secrets at rest: a secret, long enough to be one (it is stretched by HKDF, not by a slow hash). */
const storeKey = (what: string) =>
  secret(what).refine((v) => v.length >= 32, {
    message: "must be at least 32 characters (random: `openssl rand -base64 32` gives 44)",
  });

/**
 * A therapist's zone is written as every event's timeZone, which Google takes only as "an IANA Time Zone Database name"
 * (EventDateTime.timeZone) and answers anything else with 400 "Invalid time zone definition" (n8n-io/n8n#2995,
 * phw198/OutlookGoogleCalendarSync#1525). Node's Intl also takes UTC offsets (`+01:00`, `+0100`, `-05`): refused here.
 * Intl matches names whatever their case, Google's list need not: a name in another case is written as Intl spells it
 * (`europe/berlin` becomes `Europe/Berlin`). A link written in mixed case is kept as written (Intl would give its CLDR
 * target: `Asia/Kolkata` would become `Asia/Calcutta`); one written all in lower or upper case takes Intl's spelling.
 */
const IANA_HINT = "expected an IANA time zone such as Europe/Berlin";
export function ianaZone(tz: string): { zone: string } | { problem: string } {
  let resolved: string;
  try {
    resolved = new Intl.DateTimeFormat("en-US", { timeZone: tz }).resolvedOptions().timeZone;
  } catch {
    return { problem: IANA_HINT };
  }
  const offset = /^([+-])(\d{2}):(\d{2})$/.exec(resolved);
  if (offset || /^[+\-\u2212]/.test(tz.trim())) {
    const hours = offset && offset[3] === "00" ? Number(offset[2]) : undefined;
    const sign = offset?.[1] === "+" ? "-" : "+"; // Etc/GMT-1 is one hour ahead of UTC
    const fixed =
      hours === 0
        ? " (for +00:00: UTC)"
        : hours !== undefined && hours <= (sign === "-" ? 14 : 12)
          ? ` (a fixed ${resolved} is Etc/GMT${sign}${hours}, the sign inverted)`
          : "";
    return { problem: `${IANA_HINT}, not a UTC offset (${tz}): Google Calendar takes only zone names${fixed}` };
  }
  if (resolved === tz) return { zone: tz };
  const oneCase = tz === tz.toLowerCase() || (tz.includes("/") && tz === tz.toUpperCase());
  return { zone: oneCase || resolved.toLowerCase() === tz.toLowerCase() ? resolved : tz };
}

const timezone = z
  .string()
  .superRefine((tz, ctx) => {
    const read = ianaZone(tz);
    if ("problem" in read) ctx.addIssue({ code: "custom", message: read.problem });
  })
  .overwrite((tz) => {
    const read = ianaZone(tz);
    return "zone" in read ? read.zone : tz;
  });

const listen = z
  .string()
  .regex(/^(\[[0-9a-fA-F:]+\]|[^:\s]+):\d{1,5}$/, "expected host:port, e.g. 0.0.0.0:8080")
  // Only a well-formed address has a port to judge (else the one problem is the form).
  .refine((v) => !/:\d{1,5}$/.test(v) || Number(v.slice(v.lastIndexOf(":") + 1)) <= 65535, {
    message: "port out of range",
  });

/**
 * Why no booking delivery could reach this webhook path: the listener answers /healthz itself, the route before
 * Google's and the connect pages would take their requests (or they its own), and the route matches the request's
 * path without its query, so a `?` in it never matches.
 */
function webhookPathProblem(path: string, ctx: z.RefinementCtx): void {
  const say = (message: string) => ctx.addIssue({ code: "custom", message });
  const bare = path.replace(/\/+$/, "");
  if (/[?#]/.test(path))
    say("a path only: a query or fragment (?, #) is never part of the path a request is matched by");
  else if (bare === HEALTHZ_PATH) say(`${HEALTHZ_PATH} is the listener's own health answer`);
  else if (bare === PUSH_PATH) say(`${PUSH_PATH} is the route of Google's push notifications`);
  else if (bare === CONNECT_PATH || bare.startsWith(`${CONNECT_PATH}/`))
    say(`${CONNECT_PATH} and the paths under it are the connect pages'`);
}

/**
 * One of Google's event colours, "1" to "11" (colors.get, `event`); written as a number too (`completed: 5`). Another
 * id loaded fine and then failed the write of every completed or no-show event: 400 "Invalid color ID".
 */
const COLOR_ID = "^(?:[1-9]|1[01])$";
const colorId = z
  .union([z.string(), z.number()])
  .transform((v) => String(v))
  .refine((v) => new RegExp(COLOR_ID).test(v), { message: 'expected one of Google\'s event colour ids, "1" to "11"' });

/**
 * The JSON Schema of what a value accepts, for the values whose zod schema cannot tell it (a refine, a transform):
 * configJsonSchema writes it in place of zod's. pattern applies to strings only, minimum and maximum to numbers only.
 */
export const jsonInputForm = z.registry<Record<string, unknown>>();
jsonInputForm.add(colorId, { type: ["string", "integer"], pattern: COLOR_ID, minimum: 1, maximum: 11 });

const ReminderSchema = z.strictObject({
  method: z.enum(["popup", "email"]).describe("popup (on the therapist's devices) or email (to the calendar's owner)."),
  minutes: z
    .number()
    .int()
    .min(0)
    .max(MAX_REMINDER_MINUTES, `at most ${MAX_REMINDER_MINUTES} (four weeks): Google's limit`)
    .describe("Minutes before the start."),
});

/** A union's own message: the branch the value's shape was meant for says what is wrong (zod says "Invalid input"). */
function remindersError(iss: z.core.$ZodRawIssue): string | undefined {
  if (iss.code !== "invalid_union" || !("errors" in iss)) return undefined;
  const expected = "expected default, none, or a list of { method: popup | email, minutes }";
  const listed = Array.isArray(iss.input);
  const first = (listed ? iss.errors[1] : iss.errors[0])?.[0];
  if (!first) return expected;
  if (!listed) return `${expected}, found ${JSON.stringify(iss.input)}`;
  const at = first.path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
  return `${at ? `${at.replace(/^\./, "")}: ` : ""}${first.code === "invalid_value" ? `expected one of ${first.values.map((v) => JSON.stringify(v)).join(", ")}` : first.message}`;
}

export const RemindersSchema = z.union(
  [
    z.enum(["default", "none"]),
    z
      .array(ReminderSchema)
      .min(1, "an empty list: write `none` for no reminders")
      .max(MAX_REMINDERS, `at most ${MAX_REMINDERS} reminders: Google's limit`)
      .superRefine((list, ctx) => {
        const seen = new Set<string>();
        list.forEach((r, i) => {
          const key = `${r.method}/${r.minutes}`;
          if (seen.has(key))
            ctx.addIssue({ code: "custom", path: [i], message: `duplicate reminder ${r.method} ${r.minutes}` });
          seen.add(key);
        });
      }),
  ],
  { error: remindersError },
);

export const WritebackSchema = z.strictObject({
  reschedule: z.boolean().default(true).describe("A moved event reschedules the appointment (PATCH start_time)."),
  cancel: z.boolean().default(true).describe("A deleted event cancels the appointment (POST .../cancel)."),
  reassign: z
    .boolean()
    .default(false)
    .describe("An event moved to another mapped therapist's calendar reassigns the appointment."),
  notify_customer: z.boolean().default(true).describe("Passed as notify_customer when cancelling."),
  reason: z
    .string()
    .default("Cancelled in the therapist's calendar")
    .describe("Cancellation reason sent to the booking service."),
  cancel_grace_seconds: z
    .number()
    .int()
    .min(0)
    .max(86_400, "at most 86400 (a day)")
    .default(60)
    .describe(
      "A deleted event cancels the appointment only once it has stayed deleted this long, in seconds (at most 86400), so Google's Undo and a quick restore from the Bin take it back (below 30, `doctor` warns).",
    ),
  reschedule_grace_seconds: z
    .number()
    .int()
    .min(0)
    .max(86_400, "at most 86400 (a day)")
    .default(30)
    .describe(
      "A moved event reschedules the appointment only once it has stayed moved this long, in seconds (at most 86400; a move moved back).",
    ),
});
export type WritebackConfig = z.infer<typeof WritebackSchema>;

const GoogleAuthSchema = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("service_account").describe("service_account (domain-wide delegation) or oauth (per therapist)."),
    key_file: z.string().min(1).describe("Path to the service account's JSON key (domain-wide delegation)."),
  }),
  z.strictObject({ type: z.literal("oauth") }),
]);

const TherapistAuthSchema = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("oauth"),
    refresh_token: secret("refresh_token")
      .optional()
      .describe(
        "Refresh token; omit to use the one stored by the connect pages or `calbridge authorize` (one set here wins).",
      ),
  }),
  z.strictObject({ type: z.literal("service_account") }),
]);

export const TherapistSchema = z.strictObject({
  therapist_id: z.string().min(1).describe("The booking service's therapist id."),
  calendar_id: z
    .string()
    .min(1)
    .describe(
      "Google Calendar id (an address, or `primary`: an OAuth user's own calendar, or with impersonate the delegated account's); one calendar per therapist. Changed later, calbridge moves its events there (README: Changing the mapping).",
    ),
  name: z.string().optional().describe("Display name used in logs and /status."),
  impersonate: z
    .string()
    .optional()
    .describe(
      "Domain-wide delegation subject (the therapist's address). With calendar_id `primary` the calendar is this account's own, so changing it moves the events.",
    ),
  timezone: timezone
    .default("UTC")
    .describe(
      "IANA time zone name of the therapist's events, the only form Google takes: a UTC offset such as `+01:00` is refused, a name in another case is written as spelled in the database (`europe/berlin` becomes `Europe/Berlin`).",
    ),
  auth: TherapistAuthSchema.optional().describe("Overrides google.auth for this therapist."),
  writeback: WritebackSchema.partial().optional().describe("Overrides sync.writeback for this therapist."),
  reminders: RemindersSchema.optional().describe("Overrides event.reminders for this therapist's events."),
  email: z
    .email("expected an e-mail address")
    .optional()
    .describe(
      "The therapist's own address: e-mailed about their own broken credentials by an e-mail target with `therapists: true`.",
    ),
});
export type TherapistConfig = z.infer<typeof TherapistSchema>;

/**
 * Why a service-account therapist on `primary` with no delegated account cannot be synced: the service account acts as
 * itself, and `primary` is its own calendar, which no therapist sees (every such therapist would share it). Undefined
 * for everyone else (OAuth therapists' `primary` is their own account's calendar).
 */
export function serviceAccountOwnCalendar(
  t: Pick<TherapistConfig, "calendar_id" | "impersonate" | "auth">,
  defaultAuth: { type: string },
): string | undefined {
  if (t.calendar_id !== "primary" || t.impersonate || (t.auth?.type ?? defaultAuth.type) !== "service_account") {
    return undefined;
  }
  return `"primary" without impersonate is the service account's own calendar, which no therapist sees: set impersonate to the therapist's address (domain-wide delegation), or use OAuth (auth: { type: oauth }) or a calendar id shared with the service account`;
}

const targetName = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,40}$/, "expected 1 to 40 letters, digits, _ or -")
  .optional()
  .describe("Name in logs and metrics (default: the type and its place in the list, e.g. webhook-1).");

export const NotifyTargetSchema = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("webhook").describe("webhook (a chat's incoming webhook) or email (SMTP)."),
    name: targetName,
    url: httpsUnlessLoopback("hooks.chat", "the webhook's token and the messages")
      .check(noStrayWhitespace)
      .describe("Incoming-webhook address; it holds the chat's secret token: use a ${...} reference."),
    format: z
      .enum(["slack", "matrix", "teams"])
      .default("slack")
      .describe("Payload: slack ({text}, also Mattermost), matrix (hookshot {text, html}) or teams (Workflows card)."),
  }),
  z.strictObject({
    type: z.literal("email"),
    name: targetName,
    smtp: z
      .strictObject({
        host: z.string().min(1).describe("SMTP server."),
        port: z.number().int().min(1).max(65535).default(587).describe("SMTP port."),
        secure: z
          .boolean()
          .default(false)
          .describe("TLS from the first byte (port 465); false upgrades with STARTTLS when the server offers it."),
        auth: z
          .strictObject({
            user: z.string().min(1).describe("SMTP user name."),
            pass: secret("notify.targets[].smtp.auth.pass").describe("SMTP password; use a ${...} reference."),
          })
          .optional()
          .describe("SMTP login, when the server asks for one."),
      })
      .describe("The outgoing mail server."),
    from: z.email("expected an e-mail address").describe("Sender address."),
    to: z
      .array(z.email("expected an e-mail address"))
      .min(1, "at least one recipient")
      .describe("Recipients of every notification."),
    therapists: z
      .boolean()
      .default(false)
      .describe(
        "Also e-mail each OAuth therapist with an `email` about their own credentials (off by default; with several such targets, through the first only).",
      ),
  }),
]);
export type NotifyTargetConfig = z.infer<typeof NotifyTargetSchema>;

export const ConfigSchema = z
  .strictObject({
    booking: z.strictObject({
      base_url: httpsUnlessLoopback("api.booking", "the API key").describe(
        "Booking service address (without /v1); https:// (http:// only for a loopback host).",
      ),
      api_key: secret("booking.api_key").describe("API key; use ${BOOKING_API_KEY} or ${file:/run/secrets/...}."),
      requests_per_minute: z
        .number()
        .int()
        .positive()
        .default(60)
        .describe("Plan ceiling; the server's X-RateLimit headers always win when lower."),
      timeout_ms: z
        .number()
        .int()
        .positive()
        .max(300_000, "at most 300000 (5 minutes): a booking service that takes longer is not answering")
        .default(15000)
        .describe("Per-request timeout, in milliseconds (at most 300000, 5 minutes)."),
    }),
    webhooks: z
      .strictObject({
        listen: listen
          .default("0.0.0.0:8080")
          .describe(
            "Address of the public listener: the booking webhook, POST /webhooks/google, /healthz and, with connect configured, GET /connect and /connect/callback; nothing else. Expose it behind TLS.",
          ),
        path: z
          .string()
          .startsWith("/")
          .superRefine(webhookPathProblem)
          .default("/webhooks/booking")
          .describe("Path of the booking webhook route (no query; not /healthz, /webhooks/google or under /connect)."),
        signing_secrets: secretList(secret("signing secret"))
          .min(1, "at least one signing secret is required")
          .describe("Endpoint signing secrets; list two while rotating."),
        tolerance_seconds: z
          .number()
          .int()
          .positive()
          .max(
            300,
            "at most 300: the booking service's receivers reject deliveries more than 300 seconds (5 minutes) old, and a larger value widens the replay window",
          )
          .default(300)
          .describe("Maximum age (and future skew) of a signature timestamp, in seconds (at most 300)."),
        max_body_bytes: z
          .number()
          .int()
          .positive()
          .default(65_536)
          .describe(
            "Largest webhook body held and read as an event. A larger one is read on without being held, up to `max_verified_body_bytes`, to check its signature: correctly signed, it is acknowledged and kept in the dead letters (its appointment follows at the next reconciliation); otherwise 401.",
          ),
        max_verified_body_bytes: z
          .number()
          .int()
          .positive()
          .default(8_388_608)
          .describe(
            "Largest webhook body whose signature is checked: beyond it (or when it is at most `max_body_bytes`, for bodies over that) the answer is 413, which the booking service retries 7 times before it disables the endpoint.",
          ),
        max_connections: z
          .number()
          .int()
          .positive()
          .default(512)
          .describe("Open connections to the public listener at most; connections beyond it are closed at once."),
        max_buffered_bytes: z
          .number()
          .int()
          .positive()
          .default(33_554_432)
          .describe(
            "Webhook bodies held in memory at once, over every request in flight; a request that would go over is answered 503 with Retry-After.",
          ),
        public_url: httpsUrl("sync.clinic")
          .optional()
          .describe("Where the booking service delivers; `doctor` looks for it in GET /v1/webhooks."),
        dead_letter_days: z
          .number()
          .int()
          .positive()
          .max(365, "at most 365 (a year)")
          .default(30)
          .describe(
            "Days a webhook event that could not be processed is kept in the dead letters (its id, type, attempts and reason; never its body); at most 365.",
          ),
      })
      .describe("The booking service's signed webhooks."),
    admin: z
      .strictObject({
        listen: listen
          .default("127.0.0.1:9090")
          .describe(
            "Address of the admin listener: /status, /status.html, /history/APPOINTMENT_ID, /metrics, /readyz and /healthz. Never expose it to the internet.",
          ),
        bearer_token: secret("admin.bearer_token")
          .optional()
          .describe(
            "When set, every admin route but /healthz requires `Authorization: Bearer <token>`; use a ${...} reference.",
          ),
      })
      .prefault({})
      .describe("The admin listener (status, metrics, readiness), for operators and Prometheus inside the network."),
    google: z
      .strictObject({
        api_root: httpsUnlessLoopback("www.googleapis", "the calendar's access tokens and every event")
          .default("https://www.googleapis.com/")
          .describe(
            "Root of every Calendar API call (an emulator or proxy for tests); https:// (http:// only for a loopback host).",
          ),
        token_url: httpsUnlessLoopback(
          "oauth2.googleapis",
          "refresh tokens, the OAuth client secret and signed assertions",
        )
          .default("https://oauth2.googleapis.com/token")
          .describe(
            "Where every token request goes, service-account assertions included; https:// (http:// only for a loopback host).",
          ),
        auth_url: httpsUnlessLoopback("accounts.google", "the consent page (and the sign-in it leads to)")
          .default("https://accounts.google.com/o/oauth2/v2/auth")
          .describe(
            "OAuth consent page, used by `calbridge authorize` and the connect pages; https:// (http:// only for a loopback host).",
          ),
        auth: GoogleAuthSchema.describe("Default credentials for every therapist."),
        oauth: z
          .strictObject({
            client_id: z
              .string()
              .min(1)
              .describe(
                "OAuth client id (Google Cloud console): type Web application for the connect pages (redirect URI <connect.public_url>/connect/callback), Desktop app for `calbridge authorize` alone.",
              ),
            client_secret: secret("google.oauth.client_secret").describe(
              "OAuth client secret; use a ${...} reference.",
            ),
          })
          .optional()
          .describe("OAuth client, required when any therapist uses auth.type oauth."),
        push: z
          .strictObject({
            public_url: httpsUnlessLoopback("sync.clinic", "each channel's token").describe(
              "HTTPS address of POST /webhooks/google (Google delivers to HTTPS addresses only; http:// only for a loopback host, e.g. an emulator).",
            ),
            token: secret("google.push.token")
              .optional()
              .describe(
                "Token every channel carries; when omitted (better) each channel gets a random one of its own. Only its SHA-256 is stored.",
              ),
            ttl_seconds: z
              .number()
              .int()
              .positive()
              .max(2_592_000, "at most 2592000 (30 days); channels are renewed before they expire anyway")
              .default(604800),
          })
          .optional()
          .describe("Push channels (events.watch); polling stays on as the safety net."),
        quota_pause_seconds: z
          .number()
          .int()
          .positive()
          .max(86_400, "at most 86400 (a day): Google's daily quota is renewed within a day")
          .default(3600)
          .describe("Pause after quotaExceeded, in seconds (at most 86400, a day)."),
        quota: z
          .strictObject({
            project_per_minute: z
              .number()
              .int()
              .positive()
              .default(10_000)
              .describe(
                "Google Calendar API requests per minute for the whole Cloud project (Google's default quota: 10,000); calbridge stays below it.",
              ),
            user_per_minute: z
              .number()
              .int()
              .positive()
              .default(600)
              .describe(
                "Requests per minute per therapist (per quotaUser; Google's default quota per user: 600); calbridge stays below it.",
              ),
          })
          .prefault({})
          .describe(
            "The Google quotas calbridge paces its requests by (sliding one-minute windows; an events.patch counts 3). Lower them when other applications share the Cloud project.",
          ),
      })
      .describe("Google Calendar access."),
    connect: z
      .strictObject({
        public_url: publicBaseUrl.describe(
          "Public address of the daemon's connect pages (https); invitation links are <public_url>/connect?invite=..., and <public_url>/connect/callback is the OAuth client's redirect URI.",
        ),
        secret: secret("connect.secret")
          .check((ctx) => {
            // An unresolved ${...} reference was already reported as such by the loader.
            if (ctx.value.trim().length > 0 && ctx.value.length < 32 && !/^\$\{[^}]*\}$/.test(ctx.value)) {
              ctx.issues.push({
                code: "custom",
                message: "too short: use at least 32 characters (e.g. the output of `openssl rand -base64 32`)",
                input: "[secret]",
              });
            }
          })
          .describe("Signs invitation links (HMAC-SHA256); use a ${...} reference. Changing it voids every open link."),
        clinic_name: z
          .string()
          .min(1)
          .max(200)
          .describe("The clinic's name, shown to therapists on the connect pages."),
      })
      .optional()
      .describe(
        "Web pages where OAuth therapists connect (or reconnect) their Google Calendar through a link from `calbridge invite`.",
      ),
    sync: z
      .strictObject({
        window: z
          .strictObject({
            past_days: z
              .number()
              .int()
              .nonnegative()
              .max(3650, "at most 3650 (ten years)")
              .default(7)
              .describe("Days before today that are kept in sync (at most 3650)."),
            future_days: z
              .number()
              .int()
              .positive()
              .max(3650, "at most 3650 (ten years)")
              .default(90)
              .describe("Days after today that are kept in sync (at most 3650)."),
          })
          .prefault({}),
        reconcile_cron: z
          .string()
          .default("*/15 * * * *")
          .refine((v) => validateCron(v), { message: "not a valid cron expression" }),
        calendar_poll_seconds: z
          .number()
          .int()
          .min(5)
          .max(
            86_400,
            "at most 86400 (a day); for fewer polls use google.push: a calendar with a working channel is polled every sync.push_safety_poll_minutes",
          )
          .default(60),
        push_safety_poll_minutes: z
          .number()
          .int()
          .min(1)
          .max(1440, "at most 1440 (a day)")
          .default(20)
          .describe(
            "How often a calendar whose push channel works (google.push) is polled anyway, in minutes (at most 1440), give or take a quarter at random; calendars without one are polled every calendar_poll_seconds.",
          ),
        calendar_full_listing_hours: z
          .number()
          .min(0)
          .max(168, "at most 168 (a week)")
          .default(24)
          .describe(
            "How often the reconciliation lists each calendar in full, in hours (at most 168, give or take a quarter); between, a calendar's side is its incremental sync and the reconciliation sends it no request. 0: every run.",
          ),
        cancelled_events: z.enum(["delete", "keep"]).default("delete"),
        max_delete_ratio: z.number().min(0).max(1).default(0.2),
        conflict: z.enum(["booking_wins", "calendar_wins"]).default("booking_wins"),
        concurrency: z
          .number()
          .int()
          .positive()
          .default(4)
          .describe(
            "Appointments synced at once, at least; while Google answers slowly more run (up to max_concurrency), as many as it takes to use the Google quota.",
          ),
        max_concurrency: z
          .number()
          .int()
          .positive()
          .default(64)
          .describe("Appointments synced at once, at most (each therapist's share is sized by the per-user quota)."),
        retry: z
          .strictObject({
            attempts: z
              .number()
              .int()
              .positive()
              .default(5)
              .describe(
                "Tries of one appointment's sync (backing off from 5 s to 5 min) before it is a dead letter; a webhook joining a failing sync gives it these tries once more.",
              ),
            unavailable_grace_minutes: z
              .number()
              .int()
              .positive()
              .max(10_080, "at most 10080 (a week)")
              .default(1440)
              .describe(
                "How long a therapist's calendar may be unusable (credentials broken, quota pause, calendar not found) before the syncs waiting on it become dead letters, in minutes (at most 10080, a week); they do not spend their tries meanwhile.",
              ),
          })
          .prefault({})
          .describe("How failed syncs are retried; every sync (webhook, reconciliation, calendar change) follows it."),
        writeback: WritebackSchema.prefault({}),
        writeback_guard: z
          .strictObject({
            window_minutes: z
              .number()
              .int()
              .positive()
              .max(10_080, "at most 10080 (a week)")
              .default(60)
              .describe(
                "The sliding window over which a therapist's write-backs are counted, in minutes (at most 10080, a week; each change from when it was first seen, for the window plus the therapist's longest grace period).",
              ),
            max_ratio: z
              .number()
              .min(0)
              .max(1)
              .default(0.2)
              .describe(
                "More cancellations or moves from one calendar within the window than this share of its managed events are held for a person to decide.",
              ),
            floor: z
              .number()
              .int()
              .min(0)
              .default(3)
              .describe("A therapist may always write back this many within the window, whatever the share."),
          })
          .prefault({})
          .describe(
            "Holds a burst of cancellations and moves from one calendar (a phone app wiping it, a compromised account) until `calbridge writeback held --apply` or `--restore`.",
          ),
      })
      .prefault({}),
    event: z
      .strictObject({
        preset: z
          .enum(PRESET_NAMES)
          .optional()
          .describe(
            `What events show, as a shortcut for title and description (either set replaces the preset's): ${PRESET_NAMES.map((n) => `${n} (${PRESETS[n].shows})`).join("; ")}. Without either: full.`,
          ),
        title: z
          .string()
          .optional()
          .describe(
            `Event title template (default: the preset's; \`${PRESETS.full.title}\` without one); {placeholder}s as README lists them.`,
          ),
        description: z
          .string()
          .optional()
          .describe(
            `Event description template (default: the preset's; \`${PRESETS.full.description.replace("\n", "\\n")}\` without one); same placeholders as title.`,
          ),
        include_customer_contact: z
          .boolean()
          .default(false)
          .describe("Add the customer's e-mail and phone to the description (only without a preset, or with full)."),
        reminders: RemindersSchema.optional().describe(
          "Reminders of every event: default (the calendar's), none, or a list of {method, minutes}; leave it out and calbridge leaves each event's reminders alone.",
        ),
        colors: z
          .strictObject({
            completed: colorId
              .default("2")
              .describe("Colour id of completed appointments (Google's event colours 1 to 11)."),
            no_show: colorId.default("11").describe("Colour id of no-shows (Google's event colours 1 to 11)."),
          })
          .prefault({}),
      })
      .prefault({}),
    store: z
      .strictObject({
        url: z
          .string()
          .default("sqlite://./data/calbridge.sqlite")
          .refine((v) => /^(sqlite|redis|rediss):\/\/./.test(v), {
            message: "expected sqlite://PATH, redis://HOST:PORT or rediss://HOST:PORT",
          }),
        lease_seconds: z
          .number()
          .int()
          .min(2)
          .max(300, "at most 300 (5 minutes): a standby waits this long before it takes over from a leader that died")
          .default(15)
          .describe(
            "Leader lease in seconds (at most 300) before a standby takes over: Redis replicas, or a second daemon on the same SQLite file.",
          ),
        min_free_mb: z
          .number()
          .int()
          .nonnegative()
          .default(64)
          .describe(
            "SQLite: /readyz reports not ready when the store's folder has less free space than this, in MiB (0: no check).",
          ),
        encryption_key: storeKey("store.encryption_key")
          .optional()
          .describe(
            "Key that encrypts the secrets calbridge stores (OAuth refresh tokens from `calbridge authorize`), AES-256-GCM; 32 or more characters, e.g. ${CALBRIDGE_STORE_KEY}. Without it `authorize` stores nothing.",
          ),
        previous_encryption_keys: secretList(storeKey("store.previous_encryption_keys[]"))
          .default([])
          .describe(
            "Earlier keys, while rotating: what they encrypted is still read, and encrypted again with encryption_key.",
          ),
      })
      .prefault({}),
    notify: z
      .strictObject({
        label: z
          .string()
          .min(1)
          .max(60)
          .default("calbridge")
          .describe("Names this installation in every message (its subject starts with [label])."),
        targets: z
          .array(NotifyTargetSchema)
          .default([])
          .describe("Where messages go; none: conditions are tracked (and exported as metrics) but nobody is told."),
        min_interval_seconds: z
          .number()
          .int()
          .nonnegative()
          .max(86_400, "at most 86400 (a day)")
          .default(60)
          .describe(
            "Per target and recipient: at most one message this often, in seconds (at most 86400, a day); what comes up meanwhile is sent as one summary.",
          ),
        reconcile_failures: z
          .number()
          .int()
          .positive()
          .default(3)
          .describe("Reconciliations failing in a row before a message."),
        dead_letters_after_seconds: z
          .number()
          .int()
          .nonnegative()
          .max(86_400, "at most 86400 (a day)")
          .default(300)
          .describe(
            "How long appointments must stay in the dead letters before a message, in seconds (at most 86400, a day; retries clear most).",
          ),
        webhook_check_hours: z
          .number()
          .positive()
          .max(168, "at most 168 (a week)")
          .default(6)
          .describe(
            "How often GET /v1/webhooks is asked whether webhooks.public_url is registered and enabled, in hours (at most 168, a week; lowest priority).",
          ),
      })
      .prefault({})
      .describe("Messages to people when something breaks, and when it recovers."),
    history: z
      .strictObject({
        retention_days: z
          .number()
          .int()
          .positive()
          .max(3650, "at most 3650 (ten years)")
          .default(90)
          .describe(
            "Days an appointment's history entries are kept (`calbridge history`), at most 3650; the store's hourly purge removes older ones.",
          ),
        max_entries: z
          .number()
          .int()
          .min(10)
          .default(100)
          .describe(
            "Entries kept per appointment at most; the oldest go first (a step repeated in a row is counted, not listed again).",
          ),
      })
      .prefault({})
      .describe(
        "Every decision calbridge takes about an appointment, and who caused it: ids, times, statuses, reasons and error codes, never customer details.",
      ),
    therapists: z.array(TherapistSchema).min(1, "map at least one therapist"),
  })
  .superRefine((cfg, ctx) => {
    // Two listeners on one port clash when their hosts are the same or either is a wildcard (EADDRINUSE at start).
    const split = (address: string) => {
      const i = address.lastIndexOf(":");
      // `localhost` is bound as 127.0.0.1 (http.ts parseListen): the same address written another way.
      const host = address.slice(0, i).toLowerCase();
      return { host: host === "localhost" ? "127.0.0.1" : host, port: Number(address.slice(i + 1)) };
    };
    const wildcard = (host: string) => host === "0.0.0.0" || host === "[::]";
    const [admin, pub] = [split(cfg.admin.listen), split(cfg.webhooks.listen)];
    if (
      admin.port !== 0 &&
      admin.port === pub.port &&
      (admin.host === pub.host || wildcard(admin.host) || wildcard(pub.host))
    ) {
      ctx.addIssue({
        code: "custom",
        path: ["admin", "listen"],
        message: `must use another port than webhooks.listen (${cfg.webhooks.listen}): the admin routes are never served on the public port`,
      });
    }
    const names = new Map<string, number>();
    cfg.notify.targets.forEach((target, i) => {
      const name = targetNameOf(target, i);
      const first = names.get(name);
      if (first !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["notify", "targets", i, "name"],
          message: `duplicate target name "${name}" (first at notify.targets[${first}])`,
        });
      } else names.set(name, i);
    });
    if (cfg.sync.max_concurrency < cfg.sync.concurrency) {
      ctx.addIssue({
        code: "custom",
        path: ["sync", "max_concurrency"],
        message: `${cfg.sync.max_concurrency} is below sync.concurrency (${cfg.sync.concurrency}): the most syncs at once cannot be fewer than the least`,
      });
    }
    if (cfg.connect && !cfg.google.oauth) {
      ctx.addIssue({
        code: "custom",
        path: ["google", "oauth"],
        message: `required by connect: a Web application OAuth client whose redirect URI is ${cfg.connect.public_url.replace(/\/+$/, "")}/connect/callback`,
      });
    }
    eventIssues(cfg.event, ctx);
    const seen = new Map<string, number>();
    // One calendar per therapist: calbridge tells a therapist's changes apart by the calendar they are in. Two
    // therapists on one calendar see each other's events, and a reassignment between them reads as a deletion (a
    // cancellation written back). "primary" without impersonate is each OAuth account's own calendar: not shared; for
    // a service-account therapist it is the service account's own calendar, refused (serviceAccountOwnCalendar).
    const calendars = new Map<string, number>();
    cfg.therapists.forEach((t, i) => {
      const own = serviceAccountOwnCalendar(t, cfg.google.auth);
      if (own) ctx.addIssue({ code: "custom", path: ["therapists", i, "calendar_id"], message: own });
      // `impersonate` names the calendar only for a service account: an OAuth `primary` is the consenting account's.
      const delegated = (t.auth?.type ?? cfg.google.auth.type) === "service_account" ? t.impersonate : undefined;
      const calendar = t.calendar_id === "primary" && delegated ? delegated : t.calendar_id;
      const sharer = calendars.get(calendar.toLowerCase());
      if (calendar !== "primary" && sharer !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["therapists", i, "calendar_id"],
          message: `${calendar} is already the calendar of ${cfg.therapists[sharer]!.therapist_id} (therapists[${sharer}]): each therapist needs a calendar of their own`,
        });
      } else if (calendar !== "primary") calendars.set(calendar.toLowerCase(), i);
      const first = seen.get(t.therapist_id);
      if (first !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["therapists", i, "therapist_id"],
          message: `duplicate therapist_id "${t.therapist_id}" (first at therapists[${first}])`,
        });
      } else seen.set(t.therapist_id, i);
      const type = t.auth?.type ?? cfg.google.auth.type;
      if (type === "oauth" && !cfg.google.oauth) {
        ctx.addIssue({
          code: "custom",
          path: ["google", "oauth"],
          message: `required because therapists[${i}] (${t.therapist_id}) uses OAuth`,
        });
      }
      if (type === "service_account" && cfg.google.auth.type !== "service_account") {
        ctx.addIssue({
          code: "custom",
          path: ["therapists", i, "auth"],
          message: "service_account needs google.auth.type service_account with a key_file",
        });
      }
    });
  });

export type Config = z.infer<typeof ConfigSchema>;

type EventSection = {
  preset?: string | undefined;
  title?: string | undefined;
  description?: string | undefined;
  include_customer_contact: boolean;
};

/** Contact details under a preset that shows less of the customer, placeholders nobody knows. */
function eventIssues(event: EventSection, ctx: z.core.$RefinementCtx): void {
  if (event.preset !== undefined) {
    if (event.preset !== "full" && event.include_customer_contact) {
      ctx.addIssue({
        code: "custom",
        path: ["event", "include_customer_contact"],
        message: `the preset ${event.preset} shows less of the customer; customer contact details contradict it (remove one of the two)`,
      });
    }
  }
  for (const key of ["title", "description"] as const) {
    // Also what is almost a placeholder ({Service_Name}, { customer_name }): it was printed as written in every event.
    const unknown = [
      ...new Set(bracedOf(event[key] ?? "").filter((b) => !/^\{[a-z_]+\}$/.test(b) || !placeholder(b.slice(1, -1)))),
    ];
    if (unknown.length > 0) {
      ctx.addIssue({
        code: "custom",
        path: ["event", key],
        message: `unknown placeholder${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")} (README lists the placeholders, e.g. {service_name}, {customer_name}, {notes}, each in single braces)`,
      });
    }
  }
}
export type ConfigInput = z.input<typeof ConfigSchema>;

/** A notification target's name: its own, or its type and place in the list ("webhook-1"). */
export function targetNameOf(target: NotifyTargetConfig, index: number): string {
  return target.name ?? `${target.type}-${index + 1}`;
}

/** The writeback settings in force for one therapist (global settings overlaid by the mapping's). */
export function writebackFor(cfg: Config, therapist: TherapistConfig): WritebackConfig {
  return { ...cfg.sync.writeback, ...therapist.writeback };
}

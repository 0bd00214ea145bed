// Every duration of the configuration has an upper bound, with a message saying it (review18). Unbounded, a
// sync.calendar_poll_seconds of 3,000,000 (~35 days, "push does it") reached setTimeout past 2^31-1 ms, which Node
// fires after 1 ms: the poller and the credentials check spun every millisecond.
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { configJsonSchema } from "../../src/config/json-schema.ts";
import { ConfigError, parseConfig } from "../../src/config/load.ts";
import { SecretRegistry } from "../../src/log.ts";

const base = {
  booking: { base_url: "https://api.booking.example", api_key: "k" },
  webhooks: { signing_secrets: ["s"] },
  google: { auth: { type: "service_account", key_file: "/k" } },
  therapists: [{ therapist_id: "a", calendar_id: "a@x" }],
};

type Tree = Record<string, unknown>;
function withValue(path: string, value: number): Tree {
  const cfg = structuredClone(base) as Tree;
  let node = cfg;
  const keys = path.split(".");
  for (const key of keys.slice(0, -1)) {
    if (key === "therapists[]") {
      node = (node.therapists as Tree[])[0]!;
      continue;
    }
    node[key] ??= key === "push" ? { public_url: "https://sync.example/webhooks/google" } : {};
    node = node[key] as Tree;
  }
  node[keys.at(-1)!] = value;
  return cfg;
}

function problems(cfg: Tree): string[] {
  try {
    parseConfig(stringify(cfg), { env: {}, secrets: new SecretRegistry() });
    return [];
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
}

const MAXIMA: Record<string, number> = {
  "booking.timeout_ms": 300_000,
  "webhooks.tolerance_seconds": 300,
  "webhooks.dead_letter_days": 365,
  "google.push.ttl_seconds": 2_592_000,
  "google.quota_pause_seconds": 86_400,
  "sync.window.past_days": 3650,
  "sync.window.future_days": 3650,
  "sync.calendar_poll_seconds": 86_400,
  "sync.push_safety_poll_minutes": 1440,
  "sync.calendar_full_listing_hours": 168,
  "sync.retry.unavailable_grace_minutes": 10_080,
  "sync.writeback.cancel_grace_seconds": 86_400,
  "sync.writeback.reschedule_grace_seconds": 86_400,
  "sync.writeback_guard.window_minutes": 10_080,
  "store.lease_seconds": 300,
  "notify.min_interval_seconds": 86_400,
  "notify.dead_letters_after_seconds": 86_400,
  "notify.webhook_check_hours": 168,
  "history.retention_days": 3650,
  "therapists[].writeback.cancel_grace_seconds": 86_400,
  "therapists[].writeback.reschedule_grace_seconds": 86_400,
};

/** Every key of the JSON Schema named as a duration (…_ms, _seconds, _minutes, _hours, _days, minutes), with its maximum. */
function durations(): Map<string, number | undefined> {
  const out = new Map<string, number | undefined>();
  const walk = (n: Tree, prefix: string) => {
    for (const v of [...((n.anyOf as Tree[]) ?? []), ...((n.oneOf as Tree[]) ?? [])]) walk(v, prefix);
    if (n.type === "array" && n.items) walk(n.items as Tree, `${prefix}[]`);
    for (const [key, child] of Object.entries((n.properties as Record<string, Tree>) ?? {})) {
      const path = prefix ? `${prefix}.${key}` : key;
      if (/(^|_)(ms|seconds|minutes|hours|days)$/.test(key) && (child.type === "integer" || child.type === "number"))
        out.set(path, child.maximum as number | undefined);
      walk(child, path);
    }
  };
  walk(configJsonSchema() as Tree, "");
  return out;
}

describe("durations", () => {
  it("every one has a maximum (a new one needs one too)", () => {
    const found = durations();
    const unbounded = [...found].filter(([, max]) => max === undefined).map(([path]) => path);
    expect(unbounded).toEqual([]);
    for (const [path, max] of Object.entries(MAXIMA)) expect([path, found.get(path)]).toEqual([path, max]);
    // reminders' minutes: Google's limit
    expect([...found.keys()].filter((p) => !(p in MAXIMA) && !p.endsWith("reminders[].minutes"))).toEqual([]);
  });

  it.each(Object.entries(MAXIMA))("%s takes its maximum %d and refuses more, saying the limit", (path, max) => {
    expect(problems(withValue(path, max))).toEqual([]);
    const refused = problems(withValue(path, max + 1));
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatch(
      new RegExp(`^${path.replace("[]", "[0]").replace(/[.[\]]/g, "\\$&")}: at most ${max}\\b`),
    );
  });

  it("a poll interval past the timers' limit is refused, not spun on", () => {
    expect(problems(withValue("sync.calendar_poll_seconds", 3_000_000))).toEqual([
      expect.stringMatching(
        /^sync\.calendar_poll_seconds: at most 86400 \(a day\); for fewer polls use google\.push: a calendar with a working channel is polled every sync\.push_safety_poll_minutes \(line \d+\)$/,
      ),
    ]);
  });
});

// Scrapes /metrics over HTTP from the admin listener (as Prometheus does) and evaluates the shipped alert rules and
// dashboard queries by hand over several replicas, each scrape target getting its own `instance` label. Each evaluator
// is pinned to the expression it stands for: shipped() reads it from deploy/, and a test compares the two, so a rule
// changed in deploy/ without its evaluator here fails instead of testing something else.
import { readFileSync } from "node:fs";
import { request } from "undici";
import { parse } from "yaml";
import type { App } from "../../src/daemon/app.ts";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function parseMetrics(text: string, instance: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = { instance };
    for (const l of (m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** GET /metrics on the app's admin listener; nothing else (no /status) is asked. */
export async function scrape(app: App, instance: string): Promise<Sample[]> {
  const res = await request(`${app.admin!.url}/metrics`);
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`/metrics answered ${res.statusCode}`);
  return parseMetrics(text, instance);
}

export const series = (samples: Sample[], name: string) => samples.filter((s) => s.name === name);

/** `name` per instance: { a: 3, b: 0 }. */
export const byInstance = (samples: Sample[], name: string): Record<string, number> =>
  Object.fromEntries(series(samples, name).map((s) => [s.labels.instance!, s.value]));

/** PromQL without its layout: one space between tokens, none inside parentheses. */
export const squash = (expr: string) => expr.replace(/\s+/g, " ").replace(/\( /g, "(").replace(/ \)/g, ")").trim();

const alerts = (
  parse(readFileSync("deploy/prometheus/calbridge-alerts.yml", "utf8")) as {
    groups: { rules: { alert: string; expr: string }[] }[];
  }
).groups[0]!.rules;
const panels = (
  JSON.parse(readFileSync("deploy/grafana/calbridge.json", "utf8")) as {
    panels: { title: string; targets?: { expr: string; refId: string }[] }[];
  }
).panels;

/** The shipped expression of an alert rule, or of a dashboard panel's query ("Panel title/refId"). */
export function shipped(what: string): string {
  const rule = alerts.find((r) => r.alert === what);
  if (rule) return squash(rule.expr);
  const [title, refId] = what.split("/");
  const expr = panels.find((p) => p.title === title)?.targets?.find((t) => t.refId === refId)?.expr;
  if (expr === undefined) throw new Error(`no alert rule or panel query ${what}`);
  return squash(expr);
}

const LEADER = "* on (instance) group_left () (calbridge_leader == 1)";

/** `X * on (instance) group_left () (calbridge_leader == 1)`: X's series on replicas whose calbridge_leader is 1. */
export function onLeader(samples: Sample[], xs: Sample[]): Sample[] {
  const leaders = new Set(
    series(samples, "calbridge_leader")
      .filter((s) => s.value === 1)
      .map((s) => s.labels.instance),
  );
  return xs.filter((s) => leaders.has(s.labels.instance));
}

/** An evaluator and the shipped expression it stands for. */
export interface Evaluated<T> {
  expr: string;
  evaluate(samples: Sample[]): T;
}

/** CalbridgeCredentialsBroken: the therapists it fires for. */
export const credentialsBroken: Evaluated<string[]> = {
  expr: squash(`
    max by (therapist) ((calbridge_google_credentials_ok == 0) ${LEADER})
    or
    max by (therapist) (((calbridge_therapist_credentials_ok == 0)
      unless on (instance, therapist) calbridge_google_credentials_ok) ${LEADER})`),
  evaluate(samples) {
    const google = series(samples, "calbridge_google_credentials_ok");
    const refused = onLeader(
      samples,
      google.filter((s) => s.value === 0),
    );
    const noneLoaded = onLeader(
      samples,
      series(samples, "calbridge_therapist_credentials_ok")
        .filter((s) => s.value === 0)
        .filter(
          (s) =>
            !google.some((g) => g.labels.instance === s.labels.instance && g.labels.therapist === s.labels.therapist),
        ),
    );
    return [...new Set([...refused, ...noneLoaded].map((s) => s.labels.therapist!))].sort();
  },
};

/** `max(NAME * on (instance) group_left () (calbridge_leader == 1)) OP threshold`: whether it fires. */
function leaderMax(name: string, op: ">=" | "==", threshold: number): Evaluated<boolean> {
  return {
    expr: squash(`max(${name} ${LEADER}) ${op} ${threshold}`),
    evaluate(samples) {
      const values = onLeader(samples, series(samples, name)).map((s) => s.value);
      if (values.length === 0) return false;
      const max = Math.max(...values);
      return op === ">=" ? max >= threshold : max === threshold;
    },
  };
}

export const reconcileFailing = leaderMax("calbridge_reconcile_consecutive_failures", ">=", 3);
export const webhookEndpointDisabled = leaderMax("calbridge_booking_webhook_endpoint_disabled", "==", 1);

/** The "Rate limit" panel's "remaining" line: the lowest budget a replica knows (-1, unknown, left out). */
export const rateLimitRemaining: Evaluated<number | undefined> = {
  expr: squash("min(calbridge_booking_ratelimit_remaining >= 0)"),
  evaluate(samples) {
    const known = series(samples, "calbridge_booking_ratelimit_remaining").filter((s) => s.value >= 0);
    return known.length === 0 ? undefined : Math.min(...known.map((s) => s.value));
  },
};

// Checks what ships under deploy/: the Prometheus alert rules and the Grafana dashboard parse, every PromQL expression
// in them is valid (Prometheus' own grammar, @prometheus-io/lezer-promql), and every metric they name is exported by
// the daemon built by the production wiring (a histogram's _bucket/_sum/_count by its histogram), so renaming a
// metric breaks this test instead of an alert.
import { readFileSync } from "node:fs";
import { parser } from "@prometheus-io/lezer-promql";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { type Harness, harness } from "../sync/support.ts";

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: { severity: string };
  annotations: { summary: string; description: string };
}

const rules = (parse(readFileSync("deploy/prometheus/calbridge-alerts.yml", "utf8")) as { groups: { rules: Rule[] }[] })
  .groups[0]!.rules;
const dashboard = JSON.parse(readFileSync("deploy/grafana/calbridge.json", "utf8")) as {
  uid: string;
  panels: {
    id: number;
    type: string;
    title: string;
    datasource?: { uid: string };
    targets?: { expr: string; refId: string }[];
  }[];
};
const dashboardExprs = dashboard.panels.flatMap((p) =>
  (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })),
);

/** Grafana's interval variables stand for a duration; the rest of an expression is plain PromQL. */
const asPromQL = (expr: string) => expr.replaceAll(/\$__(rate_interval|interval|range)/g, "5m");

/** The metric names an expression selects, and whether Prometheus' grammar accepts it. */
function selected(expr: string): { names: string[]; valid: boolean } {
  const text = asPromQL(expr);
  const names: string[] = [];
  let valid = true;
  parser.parse(text).iterate({
    enter(node) {
      if (node.type.isError) valid = false;
      if (node.name === "VectorSelector") {
        const id = node.node.getChild("Identifier");
        if (id) names.push(text.slice(id.from, id.to));
      }
    },
  });
  return { names, valid };
}

let h: Harness;
let exported: Map<string, string>;
beforeAll(async () => {
  h = await harness({ therapists: 1 });
  await h.app.start();
  exported = new Map((await h.app.registry.getMetricsAsJSON()).map((m) => [m.name, String(m.type)]));
});
afterAll(() => h.close());

/** Whether the daemon exports `name`: a metric of its own, or a histogram's series. */
function exists(name: string): boolean {
  if (exported.has(name)) return true;
  const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
  return base !== undefined && exported.get(base) === "histogram";
}

describe("deploy/prometheus/calbridge-alerts.yml", () => {
  it("has valid rules for every condition the notifications tell about and more", () => {
    expect(rules.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        "CalbridgeCredentialsBroken",
        "CalbridgeCalendarPaused",
        "CalbridgeDeadLetters",
        "CalbridgeMassDeleteGuardTripped",
        "CalbridgeReconcileStale",
        "CalbridgeReconcileFailing",
        "CalbridgeWebhookIngestionFailing",
        "CalbridgeWebhookEndpointDisabled",
        "CalbridgeInboxBacklogGrowing",
        "CalbridgeBookingRateLimited",
        "CalbridgeLeaderNotExactlyOne",
      ]),
    );
    expect(new Set(rules.map((r) => r.alert)).size).toBe(rules.length);
    for (const r of rules) {
      expect(["critical", "warning"], r.alert).toContain(r.labels.severity);
      expect(r.annotations.summary, r.alert).toBeTruthy();
      expect(r.annotations.description, r.alert).toBeTruthy();
      if (r.for !== undefined) expect(r.for, r.alert).toMatch(/^\d+[smh]$/);
      const { names, valid } = selected(r.expr);
      expect(valid, `${r.alert}: not valid PromQL:\n${r.expr}`).toBe(true);
      expect(names.length, `${r.alert} selects no metric`).toBeGreaterThan(0);
    }
  });

  it("names only metrics the daemon exports", () => {
    const missing = rules.flatMap((r) =>
      selected(r.expr)
        .names.filter((n) => !exists(n))
        .map((n) => `${r.alert}: ${n}`),
    );
    expect(missing).toEqual([]);
  });
});

describe("deploy/grafana/calbridge.json", () => {
  it("is a dashboard of valid queries on the datasource variable, with unique panel ids", () => {
    expect(dashboard.uid).toBe("calbridge");
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(dashboardExprs.length).toBeGreaterThan(25);
    for (const p of dashboard.panels.filter((x) => x.type !== "row")) {
      expect(p.datasource?.uid, p.title).toBe("${datasource}");
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
    }
    for (const { panel, expr } of dashboardExprs) {
      const { names, valid } = selected(expr);
      expect(valid, `${panel}: not valid PromQL:\n${expr}`).toBe(true);
      expect(names.length, `${panel}: ${expr} selects no metric`).toBeGreaterThan(0);
    }
  });

  it("names only metrics the daemon exports, and shows every calbridge metric", () => {
    const named = new Set(dashboardExprs.flatMap((e) => selected(e.expr).names));
    expect([...named].filter((n) => !exists(n))).toEqual([]);
    const shown = new Set(
      [...named].map((n) => (exists(n) && !exported.has(n) ? n.replace(/_(bucket|sum|count)$/, "") : n)),
    );
    const calbridge = [...exported.keys()].filter((n) => n.startsWith("calbridge_"));
    expect(calbridge.filter((n) => !shown.has(n))).toEqual([]);
  });
});

describe("the metric names check itself", () => {
  it("finds metrics, histogram series and syntax errors", () => {
    expect(selected('sum by (le) (rate(calbridge_webhook_response_seconds_bucket{a="b"}[$__rate_interval]))')).toEqual({
      names: ["calbridge_webhook_response_seconds_bucket"],
      valid: true,
    });
    expect(exists("calbridge_webhook_response_seconds_bucket")).toBe(true);
    expect(exists("calbridge_webhooks_total_count")).toBe(false); // a counter has no _count series
    expect(exists("calbridge_webhook_total")).toBe(false);
    expect(selected("sum(rate(calbridge_webhooks_total[5m])").valid).toBe(false);
  });
});

// README's metric list is the daemon's: every metric it names exists on the running daemon's registry, and every
// metric of calbridge's own the daemon exports is named in it.
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { type Harness, harness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

describe("README metrics", () => {
  it("names only metrics the daemon exports", async () => {
    h = await harness({ therapists: 1 });
    await h.app.start();
    const readme = readFileSync("README.md", "utf8");
    const section = readme.slice(readme.indexOf("**Metrics**"), readme.indexOf("**Rate limit.**"));
    const named = [...section.matchAll(/`([a-z][a-z_]*[a-z])(\{[^}]*\})?`/g)].map((m) => `calbridge_${m[1]}`);
    expect(named.length).toBeGreaterThan(15);
    const exported = new Set((await h.app.registry.getMetricsAsJSON()).map((m) => m.name));
    expect(named.filter((n) => !exported.has(n))).toEqual([]);
    // And the other way: an alert rule or a panel may use any of them (booking_ratelimited_total was left out).
    const mentioned = new Set(named);
    const own = [...exported].filter((n) => n.startsWith("calbridge_"));
    expect(own.filter((n) => !mentioned.has(n) && !mentioned.has(n.replace(/_(bucket|sum|count)$/, "")))).toEqual([]);
  });
});

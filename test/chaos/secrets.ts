// The last test of the suite: no line logged by any daemon of the whole run (in-process apps at level debug, child
// daemons and CLI runs with LOG_LEVEL=debug, stdout and stderr) shows a secret: the booking API key, a webhook signing
// secret, a Google private key, OAuth client secret, refresh token, access token or signed assertion.
import { describe, expect, it } from "vitest";
import { allLines, knownSecrets } from "./logs.ts";

/** Shapes of Google credentials, whoever issued them. */
const SHAPES: [string, RegExp][] = [
  ["Google access token", /ya29\.[A-Za-z0-9_-]{16,}/],
  ["Google refresh token", /\b1\/\/[A-Za-z0-9_-]{16,}/],
  ["signed JWT (service-account assertion)", /eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\./],
  ["bearer credential", /bearer\s+[A-Za-z0-9._~+/-]{12,}/i],
  ["PEM private key", /PRIVATE KEY-----/],
  ["OAuth client secret", /GOCSPX-[A-Za-z0-9_-]{8,}/],
];

/** What to look for per known secret: the value, and for a PEM key each line of its body (a partial leak counts). */
function needles(value: string): string[] {
  if (!value.includes("PRIVATE KEY")) return [value];
  return value
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.length >= 32 && !l.startsWith("-----"));
}

export function secretTests(): void {
  describe("secrets", () => {
    it("no log line of the whole suite shows an API key, a webhook secret, or a Google token, client secret or private key", () => {
      const lines = allLines();
      // The collection is real: many sources, thousands of lines, debug level among them, children included.
      const sources = new Set(lines.map((l) => l.source));
      expect(sources.size).toBeGreaterThanOrEqual(8);
      expect(lines.length).toBeGreaterThan(5000);
      expect(lines.some((l) => l.line.includes('"level":20') && l.source.includes("crash daemon"))).toBe(true);
      expect(lines.some((l) => l.line.includes('"level":20') && l.source.includes("faults daemon"))).toBe(true);
      const labels = new Set(knownSecrets.values());
      for (const label of ["booking api key", "webhook signing secret", "service account private key"]) {
        expect(labels).toContain(label);
      }
      expect(labels).toContain("google refresh token");
      expect(labels).toContain("google oauth client secret");

      const leaks: string[] = [];
      const searches = [...knownSecrets].flatMap(([value, label]) => needles(value).map((n) => [n, label] as const));
      for (const { source, line } of lines) {
        for (const [needle, label] of searches) {
          if (line.includes(needle))
            leaks.push(`${source}: ${label} in ${line.split(needle).join(`<${label}>`).slice(0, 300)}`);
        }
        for (const [label, shape] of SHAPES) {
          if (shape.test(line)) leaks.push(`${source}: ${label} in ${line.replace(shape, `<${label}>`).slice(0, 300)}`);
        }
      }
      expect(leaks.slice(0, 10)).toEqual([]);
      console.log(
        `[chaos] secrets: ${lines.length} log lines from ${sources.size} sources searched for ${searches.length} secrets and ${SHAPES.length} shapes`,
      );
    });
  });
}

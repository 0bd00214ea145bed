// Tests `calbridge demo` (runDemo): the real daemon against the built-in simulators, with bookings created, moved,
// cancelled and a therapist moving an event, shows a live summary line per step and ends with both sides agreeing.
import { describe, expect, it } from "vitest";
import { runDemo } from "../../src/cli/demo.ts";
import { silentLogger } from "../../src/log.ts";
import { runCli } from "./support.ts";

describe("calbridge demo", () => {
  it("runs the daemon against the simulators, prints a live summary, and converges", async () => {
    const lines: string[] = [];
    const result = await runDemo({
      durationSec: 6,
      intervalMs: 300,
      logger: silentLogger,
      write: (l) => lines.push(l),
    });

    expect(result.converged, lines.join("\n")).toBe(true);
    expect(result.steps).toBeGreaterThanOrEqual(10);
    expect(result.events).toBe(result.bookings);
    expect(result.bookings).toBeGreaterThan(0);

    // The header tells a newcomer where everything is.
    expect(lines[0]).toMatch(/^calbridge demo: booking simulator http:\/\/127\.0\.0\.1:\d+, calendar emulator http/);
    expect(lines[1]).toMatch(/^daemon at http:\/\/127\.0\.0\.1:\d+ \(status: .*\/status, metrics: .*\/metrics\)$/);
    // One live line per step: time, what happened, events/bookings per therapist.
    const live = lines.filter((l) => /^\d\d:\d\d:\d\d {2}/.test(l));
    expect(live).toHaveLength(result.steps);
    for (const l of live) expect(l).toMatch(/ anna \d+\/\d+ {2}ben \d+\/\d+ {2}chen \d+\/\d+$/);
    const what = live.join("\n");
    expect(what).toMatch(/booked apt_\S+ with th_/);
    expect(what).toMatch(/moved apt_\S+ by a day \(booking side\)/);
    expect(what).toMatch(/cancelled apt_\S+ \(booking side\)/);
    expect(what).toMatch(/therapist moved apt_\S+ \+2h in the calendar|therapist move skipped/);
    expect(lines.at(-1)).toBe(
      `\ncalendars match the bookings: ${result.bookings} confirmed bookings, ${result.events} events`,
    );
  }, 40_000);

  it("`calbridge demo --duration N` stops by itself and exits 0 when the calendars match", async () => {
    const r = await runCli("demo", "--duration", "3");
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^calbridge demo: booking simulator /);
    expect(r.stdout).toMatch(/\ncalendars match the bookings: \d+ confirmed bookings, \d+ events\n$/);
  }, 30_000);
});

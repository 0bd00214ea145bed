import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { writeJsonInPieces } from "../../src/cli/plan-output.ts";

/** A slow output: answers false to every write and drains a moment later, so the writer must wait for it. */
class SlowOutput extends Writable {
  pieces: string[] = [];
  constructor() {
    super({ highWaterMark: 1, decodeStrings: false });
  }
  override _write(chunk: string | Buffer, _enc: BufferEncoding, done: (error?: Error | null) => void): void {
    this.pieces.push(String(chunk));
    setTimeout(done, 1);
  }
}

async function written(value: unknown): Promise<{ text: string; pieces: number }> {
  const out = new SlowOutput();
  await writeJsonInPieces(out, value);
  await new Promise<void>((resolve) => out.end(resolve));
  return { text: out.pieces.join(""), pieces: out.pieces.length };
}

function report(entries: number) {
  return {
    ok: true,
    dryRun: false,
    window: { from: "2026-11-01T00:00:00.000Z", to: "2027-01-30T00:00:00.000Z" },
    appointments: entries,
    plan: Array.from({ length: entries }, (_, i) => ({
      kind: i % 3 === 0 ? "create" : "update",
      appointmentId: `apt_${i}`,
      therapistId: `th_${i % 50}`,
      reason: `line one\nline "two" ${"é".repeat(i % 5)}`,
      nested: { list: [i, null, [], {}], empty: {} },
      gone: undefined,
    })),
    counts: { create: Math.ceil(entries / 3) },
    empty: [],
    skipped: undefined,
    fn: () => 1,
    when: new Date(0),
    calendarErrors: {},
  };
}

describe("writeJsonInPieces", () => {
  it("writes a large report byte for byte as JSON.stringify(report, null, 2) does, in several pieces", async () => {
    const value = report(5000);
    const { text, pieces } = await written(value);
    expect(text).toBe(`${JSON.stringify(value, null, 2)}\n`);
    // About 64 KB a piece: a report of ~1.3 MB is written in many writes, none of them the whole report.
    expect(text.length).toBeGreaterThan(1_000_000);
    expect(pieces).toBeGreaterThan(10);
  });

  it("matches JSON.stringify on small, empty and non-object values", async () => {
    const values: unknown[] = [
      report(0),
      report(1),
      {},
      { only: undefined },
      { a: [undefined, () => 1, 2] },
      { a: [[]], b: [{}] },
      [1, { a: [2] }],
      "text",
      42,
      null,
      { toJSON: () => ({ replaced: [1, 2] }) },
      { date: new Date(0), list: [new Date(1)] },
    ];
    for (const value of values) {
      expect((await written(value)).text).toBe(`${JSON.stringify(value, null, 2)}\n`);
    }
  });
});

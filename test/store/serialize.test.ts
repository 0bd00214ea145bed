import { defaultDeserialize, defaultSerialize } from "@keyv/serialize";
import { describe, expect, it } from "vitest";
import { serializeForKeyv } from "../../src/store/serialize.ts";
import { openStore } from "../../src/store/store.ts";

/** A small deterministic generator, so a failure names a value that can be replayed. */
function random(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const PIECES = [":", "::", ":base64:", '"', '\\"', ",", "{", "[", '":', "é", "😀", "\n", "a", "type", "Buffer", " "];

function value(next: () => number, depth: number): unknown {
  const r = next();
  const text = () =>
    Array.from({ length: Math.floor(next() * 4) }, () => PIECES[Math.floor(next() * PIECES.length)]).join("");
  if (depth > 5 || r < 0.3) {
    const leaf = Math.floor(next() * 9);
    if (leaf === 0) return text();
    if (leaf === 1) return Math.floor(next() * 1e6) - 5e5;
    if (leaf === 2) return next();
    if (leaf === 3) return next() < 0.5;
    if (leaf === 4) return null;
    if (leaf === 5) return new Date(Math.floor(next() * 2e12));
    if (leaf === 6) return Buffer.from(text());
    if (leaf === 7) return undefined;
    return `:${text()}`;
  }
  if (r < 0.55) return Array.from({ length: Math.floor(next() * 4) }, () => value(next, depth + 1));
  const out: Record<string, unknown> = {};
  for (let i = Math.floor(next() * 4); i > 0; i--)
    out[next() < 0.2 ? `:${text()}` : text() || "k"] = value(next, depth + 1);
  if (next() < 0.1) out.type = "Buffer";
  return out;
}

describe("serializeForKeyv", () => {
  it("writes exactly what keyv's own serializer writes, for values of every shape", () => {
    const next = random(16);
    for (let i = 0; i < 20_000; i++) {
      const data = { value: value(next, 0), expires: next() < 0.5 ? undefined : Math.floor(next() * 2e12) };
      expect(serializeForKeyv(data), JSON.stringify(data)).toBe(defaultSerialize(data));
    }
  });

  it("keeps the cases where JSON.stringify differs: colon strings, Buffers, Dates, nested values", () => {
    const cases: unknown[] = [
      { value: ":leading colon" },
      { value: ["a", ":b"] },
      { value: { nested: { deeper: "::two" } } },
      { value: Buffer.from("bytes") },
      { value: { b: Buffer.from([0, 1, 2]) } },
      { value: { when: new Date(0), list: [new Date(1)] } },
      { value: { ":key": "plain" } },
      { value: { quote: 'he said ":"' } },
      { value: "top-level string", expires: 5 },
      { value: undefined, expires: undefined },
    ];
    for (const data of cases) {
      const text = serializeForKeyv(data);
      expect(text).toBe(defaultSerialize(data));
      expect(defaultDeserialize(text)).toEqual(defaultDeserialize(defaultSerialize(data)));
    }
  });

  it("leaves a long or deeply nested value to keyv's serializer, which refuses what it cannot read back", () => {
    const long = { value: { text: "x".repeat(10_000) } };
    expect(serializeForKeyv(long)).toBe(defaultSerialize(long));
    let deep: unknown = {};
    for (let i = 0; i < 20_000; i++) deep = { a: deep };
    expect(() => serializeForKeyv({ value: deep })).toThrow(RangeError);
  });

  it("is the serializer of every table: a value with colon strings and a Buffer reads back the same", async () => {
    const store = await openStore("sqlite://:memory:");
    try {
      const table = store.table<unknown>("meta");
      const stored = { a: ":colon", b: Buffer.from("raw"), c: [":x", { d: "::y" }], e: "plain" };
      await table.set("k", stored);
      expect(await table.get("k")).toEqual(stored);
      await table.setMany([{ key: "m", value: stored }]);
      expect(await table.get("m")).toEqual(stored);
    } finally {
      await store.close();
    }
  });
});

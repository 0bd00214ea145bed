// The webhook route bounded before authenticated, over real sockets: the signature header is judged before a byte of
// the body is read (refused at once, connection closed), a Content-Length over the limit is refused unread, the bytes
// held across requests in flight have a budget (503 with Retry-After beyond it), a stalled body times out, and a
// flood of refused requests is logged in a few lines while the metrics count every one.
import { Readable } from "node:stream";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { sign } from "../../src/webhooks/signature.ts";
import { collect, event, type Harness, PATH, rawUpload, SECRET, startHarness } from "./support.ts";

const harnesses: Harness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

async function harness(...args: Parameters<typeof startHarness>) {
  const h = await startHarness(...args);
  harnesses.push(h);
  return h;
}

const MIB = 1024 * 1024;
/** A valid delivery padded with spaces to `size` bytes (JSON allows trailing whitespace). */
const padded = (id: string, size: number) =>
  JSON.stringify(event(id, "appointment.created", { id: "apt_1", status: "confirmed" })).padEnd(size, " ");
/** A header that passes every check made before the body (present, well-formed, current) but signs nothing. */
const forged = (h: Harness) => `t=${Math.floor(h.clock.now() / 1000)},v1=${"0".repeat(64)}`;
/** Lets the server take in what a raw socket sent (its handler runs as soon as the headers arrive). */
const settle = () => new Promise((r) => setTimeout(r, 100));

describe("the signature header is judged before the body", () => {
  it("refuses a missing, malformed, stale or future header at once, without waiting for the body, and closes", async () => {
    const h = await harness();
    const now = Math.floor(h.clock.now() / 1000);
    const cases: [Record<string, string>, number, string][] = [
      [{}, 400, "missing"],
      [{ "x-service-signature": "v1=abc" }, 400, "malformed"],
      [{ "x-service-signature": `t=${now - 301},v1=${"0".repeat(64)}` }, 401, "stale"],
      [{ "x-service-signature": `t=${now + 301},v1=${"0".repeat(64)}` }, 401, "future"],
    ];
    for (const [headers, status, reason] of cases) {
      // 1 MiB announced, not one byte sent: an answer proves the body was not awaited.
      const upload = rawUpload(h.url, PATH, { "content-type": "application/json", "content-length": MIB, ...headers });
      const answer = await upload.answer;
      expect(answer.status, reason).toBe(status);
      expect(answer.head).toContain("connection: close");
      await upload.closed;
      expect(upload.sent).toBe(0);
    }
    const text = await h.registry.metrics();
    expect(text).toContain('calbridge_webhooks_total{result="rejected_signature"} 2');
    expect(text).toContain('calbridge_webhooks_total{result="rejected_stale"} 2');
  });

  it("refuses a Content-Length over the verified limit with 413 before reading, even with a plausible header", async () => {
    const h = await harness({ handler: { maxBodyBytes: 64 * 1024, maxVerifiedBodyBytes: 256 * 1024 } });
    const upload = rawUpload(h.url, PATH, { "content-length": 256 * 1024 + 1, "x-service-signature": forged(h) });
    expect((await upload.answer).status).toBe(413);
    await upload.closed;
    expect(upload.sent).toBe(0);
    // With the second limit off (not above the first), so is one just over max_body_bytes.
    const off = await harness({ handler: { maxBodyBytes: 64 * 1024, maxVerifiedBodyBytes: 64 * 1024 } });
    const over = rawUpload(off.url, PATH, { "content-length": 64 * 1024 + 1, "x-service-signature": forged(off) });
    expect((await over.answer).status).toBe(413);
    await over.closed;
    expect(over.sent).toBe(0);
    // One byte under max_body_bytes is read, and judged by its signature.
    expect((await h.post(padded("evt_max", 64 * 1024), { raw: true })).status).toBe(200);
  });
});

describe("a body over max_body_bytes", () => {
  const limits = { maxBodyBytes: 64 * 1024, maxVerifiedBodyBytes: 4 * MIB };
  const deadLetters = async (h: Harness) => {
    const out: [string, Record<string, unknown>][] = [];
    for await (const [key, letter] of h.inbox.deadLetters())
      out.push([key, letter as unknown as Record<string, unknown>]);
    return out;
  };

  it("is read to its end unheld and, correctly signed, acknowledged and set aside, never read as an event", async () => {
    const h = await harness({ handler: limits });
    // An authentic event made large by one long field (the spec names no limit on field lengths), 1 MiB.
    const big = JSON.stringify(
      event("evt_big", "appointment.updated", { id: "apt_1", status: "confirmed", notes: "n".repeat(MIB) }),
    );
    const first = await h.post(big, { raw: true });
    expect(first).toEqual({ status: 200, json: { received: true } });
    // The sender's retry of it (no answer reached it, say), and the same body sent chunked: one dead letter.
    expect((await h.post(big, { raw: true })).status).toBe(200);
    async function* chunks() {
      for (let i = 0; i < big.length; i += 50_000) yield Buffer.from(big.slice(i, i + 50_000));
    }
    const signature = sign(big, SECRET, Math.floor(h.clock.now() / 1000));
    const chunked = await request(h.url + PATH, {
      method: "POST",
      body: Readable.from(chunks()),
      headers: { "content-type": "application/json", "x-service-signature": signature },
    });
    expect(chunked.statusCode).toBe(200);
    await chunked.body.dump();

    const letters = await deadLetters(h);
    expect(letters).toHaveLength(1);
    const [key, letter] = letters[0]!;
    expect(key).toMatch(/^oversized:[0-9a-f]{32}$/);
    expect(letter).toMatchObject({ bytes: Buffer.byteLength(big) });
    expect(String(letter["reason"])).toContain("max_body_bytes");
    expect(JSON.stringify(letter)).not.toContain("nnnn"); // never the body
    // Nothing was read as an event: the inbox has no entry and the processor saw nothing.
    expect(await collect(h.inbox.pending())).toEqual([]);
    await h.processor!.idle();
    expect(h.sink.calls).toEqual([]);
    expect(await h.registry.metrics()).toContain('calbridge_webhooks_total{result="oversized"} 3');
    const errors = h.log.lines.filter((l) => l["level"] === 50 && String(l["msg"]).includes("max_body_bytes"));
    expect(errors).toHaveLength(3);
    expect(errors[0]).toMatchObject({ bytes: Buffer.byteLength(big), max_body_bytes: 64 * 1024 });
    // A small delivery after them is taken as usual.
    expect((await h.post(event("evt_small", "appointment.created", { id: "apt_2" }))).status).toBe(200);
  });

  it("answers 401 when the signature does not match, and 413 once a chunked body passes the verified limit", async () => {
    const h = await harness({ handler: { maxBodyBytes: 64 * 1024, maxVerifiedBodyBytes: 512 * 1024 } });
    const body = padded("evt_forged", 300 * 1024);
    expect((await h.post(body, { raw: true, signature: forged(h) })).status).toBe(401);
    expect((await h.post(body, { raw: true, secret: "whsec_someone_else_entirely" })).status).toBe(401);
    // Chunked with a current header: read, unheld, until it passes 512 KiB; then answered at once and closed.
    const cut = rawUpload(h.url, PATH, { "transfer-encoding": "chunked", "x-service-signature": forged(h) });
    let written = 0;
    while (!(await Promise.race([cut.answer.then(() => true), settle().then(() => false)])) && written < 40) {
      cut.write(`10000\r\n${" ".repeat(0x10000)}\r\n`);
      written++;
    }
    const answer = await cut.answer;
    expect(answer.status).toBe(413);
    expect(answer.head).toContain("connection: close");
    expect(written).toBeGreaterThanOrEqual(8); // not before 512 KiB had come
    await cut.closed;
    expect(await deadLetters(h)).toEqual([]);
    const text = await h.registry.metrics();
    expect(text).toContain('calbridge_webhooks_total{result="rejected_signature"} 2');
    expect(text).toContain('calbridge_webhooks_total{result="too_large"} 1');
    expect(text).not.toContain('result="oversized"');
  });

  it("times out when it stops arriving, as a held body does", async () => {
    const h = await harness({ handler: { ...limits, bodyIdleTimeoutMs: 150 } });
    const stalled = rawUpload(h.url, PATH, { "content-length": 200_000, "x-service-signature": forged(h) });
    stalled.write(" ".repeat(100_000));
    const answer = await stalled.answer;
    expect(answer.status).toBe(408);
    expect(answer.head).toContain("connection: close");
    await stalled.closed;
    expect(await h.registry.metrics()).toContain('calbridge_webhooks_total{result="timeout"} 1');
  });
});

describe("the budget of bytes in flight", () => {
  it("answers 503 with Retry-After when a body would not fit, and takes bodies again once the bytes are given back", async () => {
    const h = await harness({ handler: { maxBodyBytes: 64 * 1024, maxBufferedBytes: 100_000 } });
    // A holds 60,000 bytes of the budget while its body trickles in.
    const a = rawUpload(h.url, PATH, { "content-length": 60_000, "x-service-signature": forged(h) });
    a.write(" ".repeat(1000));
    await settle();
    // B would take 50,000 more: refused at once, unread.
    const b = rawUpload(h.url, PATH, { "content-length": 50_000, "x-service-signature": forged(h) });
    const busy = await b.answer;
    expect(busy.status).toBe(503);
    expect(busy.head).toContain("retry-after: 10");
    expect(busy.head).toContain("connection: close");
    await b.closed;
    // A chunked body is counted as it comes, and cut off when it would go over.
    const c = rawUpload(h.url, PATH, { "transfer-encoding": "chunked", "x-service-signature": forged(h) });
    for (let i = 0; i < 3 && !(await Promise.race([c.answer.then(() => true), settle().then(() => false)])); i++) {
      c.write(`4e20\r\n${" ".repeat(20_000)}\r\n`);
    }
    expect((await c.answer).status).toBe(503);
    await c.closed;
    // A ends: 401 (forged), and its 60,000 bytes are free again.
    a.write(" ".repeat(59_000));
    expect((await a.answer).status).toBe(401);
    expect((await h.post(padded("evt_after", 60_000), { raw: true })).status).toBe(200);
    expect(await h.registry.metrics()).toContain('calbridge_webhooks_total{result="over_budget"} 2');
  });

  it("times out a body that stops arriving (408, connection closed) and gives its bytes back", async () => {
    const h = await harness({ handler: { maxBufferedBytes: 70_000, bodyIdleTimeoutMs: 150 } });
    const stalled = rawUpload(h.url, PATH, { "content-length": 60_000, "x-service-signature": forged(h) });
    stalled.write("{");
    const answer = await stalled.answer;
    expect(answer.status).toBe(408);
    expect(answer.head).toContain("connection: close");
    await stalled.closed;
    expect((await h.post(padded("evt_next", 60_000), { raw: true })).status).toBe(200);
    expect(await h.registry.metrics()).toContain('calbridge_webhooks_total{result="timeout"} 1');
  });

  it("times out a body of which no byte comes, and one that stops within the segment that carried the headers", async () => {
    const h = await harness({ handler: { bodyIdleTimeoutMs: 150 } });
    const headers = { "content-length": 60_000, "x-service-signature": forged(h) };
    const silent = rawUpload(h.url, PATH, headers);
    // The parser ends the segment with the body's start but not its end: the timer must be armed all the same.
    const cut = rawUpload(h.url, PATH, headers, `{"id":"evt_cut",`);
    for (const stalled of [silent, cut]) {
      expect((await stalled.answer).status).toBe(408);
      await stalled.closed;
    }
    expect(await h.registry.metrics()).toContain('calbridge_webhooks_total{result="timeout"} 2');
    // A whole delivery in the segment of its headers needs no timer, and is taken.
    const body = JSON.stringify(event("evt_whole", "appointment.created", { id: "apt_1", status: "confirmed" }));
    const signature = sign(body, SECRET, Math.floor(h.clock.now() / 1000));
    const whole = rawUpload(
      h.url,
      PATH,
      { "content-length": Buffer.byteLength(body), "x-service-signature": signature, connection: "close" },
      body,
    );
    expect((await whole.answer).status).toBe(200);
    expect(await h.registry.metrics()).toContain('calbridge_webhooks_total{result="accepted"} 1');
  });
});

describe("the log of refused requests", () => {
  it("logs the first of each reason at warn, then one summary a period (with the secret hint); metrics count all", async () => {
    // A secret with a stray newline: deliveries fail as mismatches, and the fix-it hint must not get lost.
    const h = await harness({ handler: { secrets: [`${SECRET}\n`] } });
    const warnings = () => h.log.lines.filter((l) => l["level"] === 40 && l["component"] === "webhooks");
    const before = warnings().length; // the start-up hint about the secret
    const now = Math.floor(h.clock.now() / 1000);
    for (let i = 0; i < 30; i++) await h.post(event(`evt_m${i}`, "appointment.created"));
    for (let i = 0; i < 20; i++) await h.post(event(`evt_n${i}`, "appointment.created"), { signature: null });
    for (let i = 0; i < 10; i++) await h.post(event(`evt_s${i}`, "appointment.created"), { timestampSec: now - 900 });
    const flood = warnings().slice(before);
    expect(flood.map((l) => l["reason"])).toEqual(["mismatch", "missing", "stale"]);
    expect(flood[0]).toMatchObject({ event_id: "evt_m0", hint: expect.stringMatching(/whitespace/) });

    await h.clock.advance(60_000);
    await h.post(event("evt_late", "appointment.created"));
    const [summary, next] = warnings().slice(before + 3);
    expect(summary).toMatchObject({
      refused: { mismatch: 29, missing: 19, stale: 9 },
      period_seconds: 60,
      hint: expect.stringMatching(/#1 has leading or trailing whitespace/),
    });
    expect(String(summary!["msg"])).toMatch(/^57 more webhook requests refused in the last 60s/);
    // A new period: the first of each reason is shown in full again.
    expect(next).toMatchObject({ reason: "mismatch", event_id: "evt_late" });
    const text = await h.registry.metrics();
    expect(text).toContain('calbridge_webhooks_total{result="rejected_signature"} 51');
    expect(text).toContain('calbridge_webhooks_total{result="rejected_stale"} 10');
  });
});

// The webhook route bounded before authenticated, over real sockets: the signature header is judged before a byte of
// the body is read (refused at once, connection closed), a Content-Length over the limit is refused unread, the bytes
// held across requests in flight have a budget (503 with Retry-After beyond it), a stalled body times out, and a
// flood of refused requests is logged in a few lines while the metrics count every one.
import { afterEach, describe, expect, it } from "vitest";
import { sign } from "../../src/webhooks/signature.ts";
import { event, type Harness, PATH, rawUpload, SECRET, startHarness } from "./support.ts";

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

  it("refuses a Content-Length over the limit with 413 before reading, even with a plausible header", async () => {
    const h = await harness({ handler: { maxBodyBytes: 64 * 1024 } });
    const upload = rawUpload(h.url, PATH, { "content-length": 64 * 1024 + 1, "x-service-signature": forged(h) });
    expect((await upload.answer).status).toBe(413);
    await upload.closed;
    expect(upload.sent).toBe(0);
    // One byte under it is read, and judged by its signature.
    expect((await h.post(padded("evt_max", 64 * 1024), { raw: true })).status).toBe(200);
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

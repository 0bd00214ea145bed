// Tests deliveries with a Content-Encoding (a sender, or a proxy in front of it, may compress). A gzip body signed as
// sent was acknowledged and set aside as "not JSON" (the change it announced lost until the next reconciliation); one
// signed over the decoded JSON was refused as a signature mismatch (the sender retries, then disables the endpoint).
// gzip and deflate are decoded within the body limit, either signature form verifies, and another encoding is refused
// (415) before the body is read, so the sender knows.
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { deflateSync, gzipSync } from "node:zlib";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { sign } from "../../src/webhooks/signature.ts";
import { collect, drive, event, type Harness, PATH, SECRET, startHarness } from "./support.ts";

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function post(id: string, encoding: string, signOver: "sent" | "decoded") {
  const plain = Buffer.from(JSON.stringify(event(id, "appointment.cancelled", { id: `apt_${id}` })));
  const body = encoding === "gzip" ? gzipSync(plain) : encoding === "deflate" ? deflateSync(plain) : plain;
  const t = Math.floor(h!.clock.now() / 1000);
  const res = await request(h!.url + PATH, {
    method: "POST",
    body,
    headers: {
      "content-type": "application/json",
      "content-encoding": encoding,
      "x-service-signature": sign(signOver === "sent" ? body : plain, SECRET, t),
    },
  });
  return { status: res.statusCode, body: await res.body.text() };
}

describe("Content-Encoding", () => {
  it("gzip and deflate bodies are decoded and processed, signed as sent or as decoded", async () => {
    h = await startHarness();
    expect((await post("evt_gz_sent", "gzip", "sent")).status).toBe(200);
    expect((await post("evt_gz_plain", "gzip", "decoded")).status).toBe(200);
    expect((await post("evt_deflate", "deflate", "sent")).status).toBe(200);
    await drive(h.clock, h.processor!);
    expect(await collect(h.inbox.deadLetters())).toEqual([]);
    expect(h.sink.calls.map((c) => c.eventId).sort()).toEqual(["evt_deflate", "evt_gz_plain", "evt_gz_sent"]);
  });

  it("another encoding is refused with 415 before the body is read; nothing is accepted", async () => {
    h = await startHarness();
    const res = await post("evt_br", "br", "sent");
    expect(res.status).toBe(415);
    expect(JSON.parse(res.body)).toMatchObject({ error: "unsupported_encoding" });
    await drive(h.clock, h.processor!);
    expect(h.sink.calls).toEqual([]);
  });

  it("a signed body that is not valid gzip is set aside (authentic but broken), not taken for a forgery", async () => {
    h = await startHarness();
    const body = Buffer.from("not gzip at all");
    const res = await request(h.url + PATH, {
      method: "POST",
      body,
      headers: {
        "content-encoding": "gzip",
        "x-service-signature": sign(body, SECRET, Math.floor(h.clock.now() / 1000)),
      },
    });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    const dead = await collect(h.inbox.deadLetters());
    expect(dead.map(([, d]) => d.reason)).toEqual([expect.stringMatching(/^malformed: gzip body not decoded: /)]);
  });

  // A compressed delivery over max_body_bytes (once decoded, or even as sent) was judged by its bytes as sent alone:
  // one signed over its decoded JSON was refused 401, retried 7 times and then the endpoint disabled.
  describe("over max_body_bytes, signed over the decoded JSON", () => {
    const LIMIT = 4096;
    /** An authentic event whose JSON is `size` bytes of a long note. */
    function bigEvent(id: string, size: number, noteOf: (n: number) => string) {
      const base = event(id, "appointment.updated", { id: `apt_${id}`, notes: "" });
      const plain = Buffer.from(JSON.stringify(base));
      const note = noteOf(size - plain.length);
      return Buffer.from(JSON.stringify(event(id, "appointment.updated", { id: `apt_${id}`, notes: note })));
    }
    async function send(body: Buffer, signed: Buffer, chunked = false) {
      const t = Math.floor(h!.clock.now() / 1000);
      const res = await request(h!.url + PATH, {
        method: "POST",
        // A generator is sent chunked (no Content-Length), as a streaming proxy would.
        body: chunked
          ? Readable.from(
              (function* () {
                for (let i = 0; i < body.length; i += 1000) yield body.subarray(i, i + 1000);
              })(),
            )
          : body,
        headers: { "content-encoding": "gzip", "x-service-signature": sign(signed, SECRET, t) },
      });
      return { status: res.statusCode, body: await res.body.text() };
    }

    it("small as sent, over the limit once decoded: acknowledged and kept as oversized, not refused 401", async () => {
      h = await startHarness({ handler: { maxBodyBytes: LIMIT } });
      const plain = bigEvent("evt_gz_grows", 40_000, (n) => "a".repeat(n));
      const body = gzipSync(plain);
      expect(body.length).toBeLessThan(LIMIT);
      expect((await send(body, plain)).status).toBe(200);
      // Signed as sent, such a body is kept the same way (it was set aside as "malformed: gzip body not decoded").
      const sent = gzipSync(bigEvent("evt_gz_grows2", 40_000, (n) => "b".repeat(n)));
      expect((await send(sent, sent)).status).toBe(200);
      const dead = await collect(h.inbox.deadLetters());
      const reason = expect.stringContaining(`more than ${LIMIT} once decoded`);
      expect(dead.map(([key, d]) => [key.split(":")[0], d.reason])).toEqual([
        ["oversized", reason],
        ["oversized", reason],
      ]);
    });

    it("over the limit as sent (chunked or not), signed over the decoded JSON: acknowledged and kept", async () => {
      h = await startHarness({ handler: { maxBodyBytes: LIMIT } });
      // Random text does not compress: the body is over the limit as sent too.
      const noise = (n: number) =>
        randomBytes(Math.ceil(n / 2))
          .toString("hex")
          .slice(0, n);
      // The megabyte one pauses its request while the decoder catches up.
      for (const [id, chunked, size] of [
        ["evt_gz_big", false, 60_000],
        ["evt_gz_big_chunked", true, 60_000],
        ["evt_gz_huge_chunked", true, 1_000_000],
      ] as const) {
        const plain = bigEvent(id, size, noise);
        const body = gzipSync(plain);
        expect(body.length).toBeGreaterThan(LIMIT);
        expect((await send(body, plain, chunked)).status).toBe(200);
      }
      const dead = await collect(h.inbox.deadLetters());
      expect(dead.map(([key]) => key.split(":")[0])).toEqual(["oversized", "oversized", "oversized"]);
    });

    it("a forgery is still refused 401, and a body that decodes past max_verified_body_bytes is not taken as signed", async () => {
      h = await startHarness({ handler: { maxBodyBytes: LIMIT, maxVerifiedBodyBytes: 100_000 } });
      const plain = bigEvent("evt_gz_forged", 40_000, (n) => "c".repeat(n));
      const t = Math.floor(h.clock.now() / 1000);
      const forged = await request(h.url + PATH, {
        method: "POST",
        body: gzipSync(plain),
        headers: { "content-encoding": "gzip", "x-service-signature": sign(plain, "whsec_someone_else_0123", t) },
      });
      expect(forged.statusCode).toBe(401);
      await forged.body.text();
      // 200 KB once decoded, over the 100 KB this receiver verifies: its signature cannot be checked.
      const bomb = bigEvent("evt_gz_bomb", 200_000, (n) => "d".repeat(n));
      expect((await send(gzipSync(bomb), bomb)).status).toBe(401);
      expect(await collect(h.inbox.deadLetters())).toEqual([]);
    });
  });
});

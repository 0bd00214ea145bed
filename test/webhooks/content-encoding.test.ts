// Tests deliveries with a Content-Encoding (a sender, or a proxy in front of it, may compress). A gzip body signed as
// sent was acknowledged and set aside as "not JSON" (the change it announced lost until the next reconciliation); one
// signed over the decoded JSON was refused as a signature mismatch (the sender retries, then disables the endpoint).
// gzip and deflate are decoded within the body limit, either signature form verifies, and another encoding is refused
// (415) before the body is read, so the sender knows.
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
});

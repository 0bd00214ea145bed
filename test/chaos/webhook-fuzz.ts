// Bad input at the daemon's front door: random and garbage signature headers, bodies, methods, content types and
// paths against the webhook route of a running daemon (a child process), and raw, broken HTTP on its socket. Never a
// 5xx, never a crash, and nothing in any calendar or booking changes because of it.
import { connect } from "node:net";
import { Agent, request } from "undici";
import { describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { startWorld, WORLD_WEBHOOK_SECRET } from "../../src/simulator/world.ts";
import { sign } from "../../src/webhooks/signature.ts";
import { type Daemon, daemonFor } from "./daemon.ts";
import { removeWhenPassed } from "./dirs.ts";
import { eventually, stateProblems } from "./expected.ts";
import { type Random, random } from "./random.ts";

const DAY = 86_400_000;

/** Sends raw bytes on a new connection; resolves with the status of the answer, if any came. */
function raw(port: number, bytes: string | Buffer, options: { endAfterMs?: number } = {}): Promise<number | undefined> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    let answer = "";
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(answer);
      resolve(m ? Number(m[1]) : undefined);
    };
    const timer = setTimeout(done, options.endAfterMs ?? 1500);
    socket.on("data", (c) => {
      answer += c.toString("latin1");
    });
    socket.on("error", done);
    socket.on("close", done);
    socket.on("connect", () => {
      socket.write(bytes);
      if (options.endAfterMs === 0) done();
    });
  });
}

function fuzzCase(r: Random, realIds: string[], now: number) {
  const hex = (n: number) => Array.from({ length: n }, () => "0123456789abcdef"[r.int(16)]).join("");
  const event = (type: string, object: Record<string, unknown>) =>
    JSON.stringify({ id: `evt_fuzz_${hex(12)}`, type, created_at: new Date(now).toISOString(), data: { object } });
  const bodies: (() => Buffer)[] = [
    () => r.bytes(r.int(400)),
    () => Buffer.from(r.text(300)),
    () => Buffer.from(r.pick(["null", "[]", "{}", '""', "1e999", "true", '{"id":"x"', '{"__proto__":{"id":"p"}}', ""])),
    () => Buffer.from(`${"[".repeat(20_000)}${"]".repeat(20_000)}`),
    () => Buffer.from(JSON.stringify({ id: r.int(1e6), type: null, data: r.text(20) })),
    () => Buffer.from(JSON.stringify({ id: "e".repeat(300), type: "appointment.updated", data: { object: [] } })),
    () => Buffer.from(JSON.stringify({ id: `evt_${hex(8)}`, type: "appointment.updated", data: "x" })),
    // Well-formed events about appointments nobody has, or of types nobody knows.
    () =>
      Buffer.from(
        event(r.pick(["appointment.updated", "appointment.cancelled", "appointment.created"]), {
          id: `apt_fuzz_${hex(6)}`,
        }),
      ),
    () =>
      Buffer.from(
        event(r.pick(["payment.succeeded", "x.y", "appointment.", "customer.updated"]), { id: `cus_fuzz_${hex(6)}` }),
      ),
    // Real appointments with garbage payloads in events whose payload is never trusted (the engine fetches).
    () =>
      Buffer.from(
        event(r.pick(["appointment.updated", "appointment.completed", "appointment.no_show"]), {
          id: r.pick(realIds),
          status: "cancelled",
          start_time: r.text(10),
          therapist_id: r.text(5),
        }),
      ),
    // Real appointments in a created event with times that are not times.
    () =>
      Buffer.from(
        event("appointment.created", {
          id: r.pick(realIds),
          start_time: "soon",
          end_time: "later",
          therapist_id: "th_1",
          status: "confirmed",
        }),
      ),
    () => Buffer.alloc(1_048_576 + 1 + r.int(1000), 0x7b),
  ];
  const headers: ((b: Buffer) => string | string[] | undefined)[] = [
    () => undefined,
    () => "",
    () => r.text(200),
    () => `t=${now / 1000},v1=${hex(64)}`,
    () =>
      `t=${r.pick([String(Math.floor(now / 1000)), "-1", "", "NaN", "1e21", "0x10", " 5", "99999999999999"])},v1=${hex(r.int(80))}`,
    () =>
      Array.from({ length: r.int(40) }, () => r.pick(["t=", "v1=", ",", "=", "v0=", hex(8), " ", "\u00ff"])).join(""),
    (b) => sign(b, WORLD_WEBHOOK_SECRET, Math.floor(now / 1000) + r.pick([0, -299, 299, -301, 301, -1e6, 1e6])),
    (b) => `${sign(b, WORLD_WEBHOOK_SECRET, Math.floor(now / 1000))},v1=${hex(64)},t=${Math.floor(now / 1000)}`,
    (b) =>
      sign(
        b,
        r.pick(["wrong_secret_123", `${WORLD_WEBHOOK_SECRET} `, WORLD_WEBHOOK_SECRET.toUpperCase(), ""]),
        Math.floor(now / 1000),
      ),
    (b) => [sign(b, WORLD_WEBHOOK_SECRET, Math.floor(now / 1000)), r.text(20)],
    () => `t=${Math.floor(now / 1000)},v1=${"a".repeat(r.pick([64, 6000]))}`,
  ];
  const body = r.pick(bodies)();
  const sig = r.pick(headers)(body);
  // Mostly the real route with a good method and type, so that most requests reach the signature check.
  const method = r.chance(0.9) ? "POST" : r.pick(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]);
  const contentType = r.chance(0.85)
    ? "application/json"
    : r.pick([
        "text/plain",
        "",
        "application/x+json",
        "*/*",
        "application/json; charset=utf-8",
        "multipart/form-data",
        "\u00e9",
      ]);
  const path = r.chance(0.92)
    ? "/webhooks/booking"
    : r.pick([
        "/webhooks/booking?x=1",
        "/webhooks/booking/",
        "//webhooks/booking",
        "/webhooks/../webhooks/booking",
        "/webhooks/BOOKING",
        `/${r.text(50).replace(/[^a-z]/g, "")}`,
        `/webhooks/booking${"/a".repeat(2000)}`,
      ]);
  return { body, sig, method, contentType, path };
}

export function webhookFuzzTests(seed: number): void {
  describe("bad input at the webhook route of a running daemon", () => {
    it("800 random signature headers, bodies, methods, content types and paths, and broken HTTP: never a 5xx, never a crash, nothing deleted or cancelled", async () => {
      const r = random(seed + 7);
      const world = await startWorld({ therapists: 2, seed: seed + 7, webhookTimeScale: 1 / 6000 });
      removeWhenPassed(world.dir);
      let daemon: Daemon | undefined;
      const agent = new Agent({ connections: 16 });
      try {
        const realIds: string[] = [];
        for (let i = 0; i < 12; i++) {
          const start = new Date(Date.now() + (1 + i) * DAY);
          start.setUTCHours(9 + (i % 8), 0, 0, 0);
          realIds.push(
            String(world.booking.create({ therapist_id: `th_${1 + (i % 2)}`, start_time: start.toISOString() }).id),
          );
        }
        daemon = await daemonFor(world, { name: "fuzzed daemon" });
        await daemon.start();
        expect(await eventually(() => stateProblems(world), 30_000)).toEqual([]);
        const writesBefore = world.google.writes;
        const port = Number(new URL(daemon.url).port);

        const statuses = new Map<number, number>();
        const fivexx: string[] = [];
        const send = async () => {
          const c = fuzzCase(r, realIds, Date.now());
          const headers: Record<string, string | string[]> = {};
          if (c.contentType) headers["content-type"] = c.contentType;
          if (c.sig !== undefined) headers["x-service-signature"] = c.sig;
          try {
            const res = await request(`${daemon!.url}${c.path}`, {
              method: c.method as "POST",
              headers,
              body: c.method === "GET" || c.method === "HEAD" ? undefined : c.body,
              dispatcher: agent,
            });
            await res.body.dump();
            statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
            if (res.statusCode >= 500) {
              fivexx.push(
                `${res.statusCode} ${c.method} ${c.path.slice(0, 60)} ${String(c.sig).slice(0, 80)} ${c.body.toString("latin1").slice(0, 80)}`,
              );
            }
          } catch (err) {
            // The daemon may close the connection on a body over the limit before reading it: no answer is not a 5xx.
            const code = (err as { code?: string }).code ?? (err as Error).message;
            statuses.set(-1, (statuses.get(-1) ?? 0) + 1);
            if (!/ECONNRESET|EPIPE|UND_ERR_SOCKET|other side closed/i.test(code)) throw err;
          }
        };
        for (let i = 0; i < 800; i += 8) await Promise.all(Array.from({ length: 8 }, send));

        // Broken HTTP on the raw socket: garbage, lies about the length, smuggling attempts, bodies cut off.
        const head = (extra: string) =>
          `POST /webhooks/booking HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}\r\n`;
        const rawStatuses = await Promise.all([
          raw(port, "GARBAGE\r\n\r\n"),
          raw(port, Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00])), // a TLS hello
          raw(port, `${head("Content-Length: 500\r\n")}{"id":"evt_cut"`, { endAfterMs: 0 }),
          raw(port, `${head("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n")}0\r\n\r\n`),
          raw(port, `${head("Transfer-Encoding: chunked\r\n")}zz\r\nabc\r\n0\r\n\r\n`),
          raw(port, `${head("Content-Length: -1\r\n")}`),
          raw(port, `${head(`X-Service-Signature: ${"t=1,".repeat(5000)}\r\n`)}`),
          raw(port, `POST /webhooks/booking HTTP/1.1\r\nHost: x\r\n${"X-A: b\r\n".repeat(3000)}\r\n`),
          raw(port, `${head("Content-Length: 2\r\n")}{}`, { endAfterMs: 300 }),
        ]);
        for (const s of rawStatuses) if (s !== undefined) expect(s).toBeLessThan(500);

        expect(fivexx).toEqual([]);
        expect([...statuses.keys()].sort()).toEqual(expect.arrayContaining([200, 400, 401]));
        // Still up, still healthy, never restarted, and it logged no unexpected failure.
        expect(daemon.alive()).toBe(true);
        expect(daemon.unexpectedExits).toEqual([]);
        const health = await fetch(`${daemon.url}/healthz`);
        expect(health.status).toBe(200);
        const failures = daemon.lines().filter((l) => /handler failed|uncaught|unhandled/i.test(l));
        expect(failures).toEqual([]);

        // Nothing changed because of it: no booking write, no calendar write, the calendars as they were.
        expect(world.booking.requests.filter((q) => q.method !== "GET")).toEqual([]);
        expect(world.google.writes).toBe(writesBefore);
        expect(stateProblems(world)).toEqual([]);

        // And it still works: a real delivery is applied, even right after a correctly signed event about the same
        // appointment whose payload cannot be used (it must not hold up the appointment's later events).
        const poison = JSON.stringify({
          id: "evt_unusable_payload",
          type: "appointment.created",
          created_at: new Date().toISOString(),
          data: {
            object: {
              id: realIds[0],
              start_time: "soon",
              end_time: "later",
              therapist_id: "th_1",
              status: "confirmed",
            },
          },
        });
        const accepted = await request(daemon.webhookUrl, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "x-service-signature": sign(poison, WORLD_WEBHOOK_SECRET, Math.floor(Date.now() / 1000)),
          },
          body: poison,
          dispatcher: agent,
        });
        await accepted.body.dump();
        expect(accepted.statusCode).toBe(200);
        world.booking.addWebhookEndpoint({ url: daemon.webhookUrl, secret: WORLD_WEBHOOK_SECRET, events: ["*"] });
        const moved = new Date(Date.now() + 20 * DAY);
        moved.setUTCHours(12, 0, 0, 0);
        world.booking.move(realIds[0]!, moved);
        expect(await eventually(() => stateProblems(world), 20_000)).toEqual([]);
        const ev = world.google.event(world.calendarOf("th_1"), eventIdFor(realIds[0]!));
        expect(Date.parse(String((ev!.start as { dateTime: string }).dateTime))).toBe(moved.getTime());
        console.log(
          `[chaos] webhook fuzz: statuses ${JSON.stringify(Object.fromEntries(statuses))}, raw ${JSON.stringify(rawStatuses)}`,
        );
      } finally {
        await agent.close();
        await daemon?.kill9();
        await world.close();
      }
    });
  });
}

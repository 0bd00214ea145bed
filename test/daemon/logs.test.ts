// Tests the daemon's logs on a real run (App against a simulated world, webhooks delivered by the booking simulator):
// pino JSON lines; a webhook's lines carry its event_id and appointment_id (child loggers); one line per meaningful
// event; the API key, the webhook signing secret and the service account's private key never appear in any line.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { createLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { captureLog } from "../support/log-capture.ts";

const HOUR = 3_600_000;
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("daemon logs", () => {
  it("are JSON lines, one per event, with a child logger per webhook, and never show a secret", async () => {
    const world: World = await startWorld({ therapists: ["th_anna"] });
    cleanups.push(() => world.close());
    const log = captureLog("debug");
    const app: App = await createApp(world.config, { logger: log.logger, listen: "127.0.0.1:0" });
    cleanups.push(() => app.stop(2000));
    await app.start();
    // Bookings made while the start-up reconciliation runs would race it; this test is about the logs.
    await waitFor("the start-up reconciliation", () => log.lines.some((l) => l.msg === "reconciliation finished"));
    world.booking.addWebhookEndpoint({
      url: `${app.http!.url}${world.config.webhooks.path}`,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["appointment.created", "appointment.updated", "appointment.cancelled"],
    });

    // A booking: the simulator delivers the signed webhook, the daemon accepts it and mirrors the appointment.
    const start = new Date(Date.now() + 30 * HOUR);
    start.setUTCMinutes(0, 0, 0);
    const appt = world.booking.create({ therapist_id: "th_anna", start_time: start.toISOString() }, { force: true });
    const apptId = String(appt.id);
    const event = world.booking.events.find(
      (e) => e.type === "appointment.created" && (e.data as { object: { id: string } }).object.id === apptId,
    )!;
    const calendar = world.calendarOf("th_anna");
    await waitFor("the event in the calendar", () => world.google.event(calendar, eventIdFor(apptId)) !== undefined);
    await waitFor("the webhook processed", () => log.lines.some((l) => l.msg === "webhook event processed"));
    // A forged delivery: refused and logged, with the reason but without the secret that would have signed it.
    const forged = await fetch(`${app.http!.url}${world.config.webhooks.path}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-service-signature": `t=${Math.floor(Date.now() / 1000)},v1=00`,
      },
      body: JSON.stringify({ id: "evt_forged", type: "appointment.created", data: { object: { id: apptId } } }),
    });
    expect(forged.status).toBe(401);
    // Even a careless line that puts secrets in fields and in the message comes out clean.
    const apiKey = world.config.booking.api_key;
    app.logger.error(
      { api_key: apiKey, headers: { authorization: `Bearer ${apiKey}` }, secrets: [WORLD_WEBHOOK_SECRET] },
      `request with ${apiKey} signed by ${WORLD_WEBHOOK_SECRET} failed`,
    );
    await app.stop(2000);
    expect(world.booking.get(apptId)?.status).toBe("confirmed");

    // --- JSON lines, each with the pino basics
    expect(log.raw.length).toBeGreaterThan(5);
    expect(log.lines).toHaveLength(log.raw.length);
    for (const line of log.lines) {
      expect(line).toMatchObject({ name: "calbridge", level: expect.any(Number), msg: expect.any(String) });
      expect(String(line.time)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }
    // Bindings are not repeated by nested child loggers (a JSON object with a key twice).
    for (const raw of log.raw) expect(raw.match(/"component":/g)?.length ?? 0, raw).toBeLessThanOrEqual(1);

    // --- the webhook's lines share its event_id (and its appointment), from the HTTP edge to the processor
    const ofEvent = log.lines.filter((l) => l.event_id === event.id);
    const messages = ofEvent.map((l) => l.msg);
    expect(messages).toContain("webhook accepted");
    expect(messages).toContain("webhook event processed");
    for (const l of ofEvent) expect(l).toMatchObject({ appointment_id: apptId, event_type: "appointment.created" });
    // One line per meaningful event: accepted once, processed once.
    expect(messages.filter((m) => m === "webhook accepted")).toHaveLength(1);
    expect(messages.filter((m) => m === "webhook event processed")).toHaveLength(1);
    // The forged delivery is one warning, naming the reason.
    const refused = log.lines.filter((l) => l.event_id === "evt_forged");
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ level: 40, reason: "mismatch" });
    // Lifecycle lines are there once each.
    for (const msg of ["calbridge started", "calbridge stopped"]) {
      expect(log.lines.filter((l) => l.msg === msg)).toHaveLength(1);
    }

    // --- no secret anywhere: not the API key, not the signing secret, not any piece of the private key
    const privateKey = (JSON.parse(readFileSync(join(world.dir, "sa.json"), "utf8")) as { private_key: string })
      .private_key;
    const keyLines = privateKey.split("\n").filter((l) => l.length > 40 && !l.startsWith("-----"));
    expect(keyLines.length).toBeGreaterThan(3);
    const everything = log.raw.join("\n");
    expect(everything).not.toContain(apiKey);
    expect(everything).not.toContain(WORLD_WEBHOOK_SECRET);
    for (const piece of keyLines) expect(everything).not.toContain(piece);
    const careless = log.lines.find((l) => String(l.msg).startsWith("request with"));
    expect(careless).toMatchObject({
      api_key: "[REDACTED]",
      msg: "request with [REDACTED] signed by [REDACTED] failed",
    });
  }, 30_000);

  it("takes its level from LOG_LEVEL", () => {
    const saved = process.env.LOG_LEVEL;
    process.env.LOG_LEVEL = "warn";
    try {
      const lines: string[] = [];
      const logger = createLogger({ destination: { write: (l: string) => void lines.push(l) } });
      logger.info("not shown");
      logger.warn("shown");
      expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(["shown"]);
    } finally {
      if (saved === undefined) delete process.env.LOG_LEVEL;
      else process.env.LOG_LEVEL = saved;
    }
  });

  // `script` runs a command on a pseudo-terminal (util-linux, on every Debian machine).
  const hasScript = spawnSync("script", ["--version"], { stdio: "ignore" }).status === 0;
  it.skipIf(!hasScript)("are pretty on a terminal and JSON lines otherwise", () => {
    const file = join(mkdtempSync(join(tmpdir(), "calbridge-log-")), "log.mjs");
    const logModule = new URL("../../src/log.ts", import.meta.url).href;
    writeFileSync(
      file,
      `import { createLogger } from ${JSON.stringify(logModule)};\n` +
        `createLogger().info({ event_id: "evt_tty" }, "hello operator");\n`,
    );
    const env = { ...process.env, LOG_LEVEL: "info" };
    const piped = spawnSync(process.execPath, [file], { encoding: "utf8", timeout: 10_000, env });
    expect(JSON.parse(piped.stdout.trim())).toMatchObject({ level: 30, event_id: "evt_tty", msg: "hello operator" });

    const tty = spawnSync("script", ["-qec", `${process.execPath} ${file}`, "/dev/null"], {
      encoding: "utf8",
      timeout: 10_000,
      env,
    });
    // biome-ignore lint/suspicious/noControlCharactersInRegex: removes the terminal's colour codes
    const plain = tty.stdout.replace(/\x1b\[[0-9;]*m/g, "");
    expect(plain).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(calbridge\): hello operator\r?$/m);
    expect(plain).toMatch(/^ {4}event_id: "evt_tty"\r?$/m);
    expect(plain).not.toContain('{"level"');
  });
});

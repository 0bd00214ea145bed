// Tests a listing whose nextPageToken repeats (Google answering the same token again, or a caching proxy in front of
// it). The gateway followed it for ever: the poll of that calendar never finished (later polls join it), the
// reconciliation's listing neither, and every page spent the therapist's quota. A token the listing already followed
// now ends it with a clear, transient error after the page that repeated it; the next turn reads again.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, expect, it } from "vitest";
import { OAuthCredentials } from "../../src/calendar/auth.ts";
import { CalendarError } from "../../src/calendar/errors.ts";
import { CalendarGateway } from "../../src/calendar/gateway.ts";
import { type CalendarEmulator, startCalendarEmulator } from "../../src/simulator/calendar/index.ts";

let emulator: CalendarEmulator | undefined;
let server: Server | undefined;
let gateway: CalendarGateway | undefined;
afterEach(async () => {
  gateway?.close();
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  await emulator?.close();
});

/** A Google stand-in (the emulator signs the gateway in) whose list answers name page "B" after "A", then "A" again. */
async function loopingGateway(): Promise<{ gateway: CalendarGateway; requests: () => number }> {
  let n = 0;
  server = createServer((req, res) => {
    n++;
    const asked = new URL(req.url ?? "/", "http://x").searchParams.get("pageToken");
    res.writeHead(200, { "content-type": "application/json" });
    const body = req.url?.includes("/calendarList")
      ? { kind: "calendar#calendarList", items: [{ id: `cal-${n}`, accessRole: "owner" }] }
      : { kind: "calendar#events", items: [{ id: `ev${n}`, status: "confirmed" }] };
    res.end(JSON.stringify({ ...body, nextPageToken: asked === "A" ? "B" : "A" }));
  });
  await new Promise<void>((r) => server!.listen(0, "127.0.0.1", () => r()));
  emulator = await startCalendarEmulator();
  emulator.createCalendar("anna@clinic.example", "anna@clinic.example");
  const client = emulator.registerOAuthClient();
  const auth = new OAuthCredentials({
    clientId: client.client_id,
    clientSecret: client.client_secret,
    refreshToken: emulator.issueRefreshToken("anna@clinic.example", client.client_id),
    tokenUrl: emulator.tokenUrl,
  });
  const root = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  gateway = new CalendarGateway({ therapistId: "th_anna", calendarId: "anna@clinic.example", apiRoot: root, auth });
  return { gateway, requests: () => n };
}

const expectLoopError = (err: unknown) => {
  expect(err).toBeInstanceOf(CalendarError);
  expect(err).toMatchObject({ kind: "transient", reason: "pageTokenLoop" });
  expect((err as Error).message).toMatch(/nextPageToken repeats the token of an earlier page/);
};

it("an incremental sync, a reconciliation's listing and the calendar list each end at a repeated page token", async () => {
  const { gateway: gw, requests } = await loopingGateway();
  expectLoopError(await gw.incrementalChanges(undefined).catch((e: unknown) => e));
  // Pages: first (token A), A (token B), B (token A again): three asked for, then given up.
  expect(requests()).toBe(3);

  const drain = async () => {
    for await (const _ of gw.listManaged({ timeMin: new Date(), timeMax: new Date(Date.now() + 86_400_000) })) {
      // read to the end
    }
  };
  expectLoopError(await drain().catch((e: unknown) => e));
  expect(requests()).toBe(6);
  expectLoopError(await gw.calendarList().catch((e: unknown) => e));
  expect(requests()).toBe(9);
});

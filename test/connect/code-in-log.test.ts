// README "Connecting therapists (OAuth)": "neither the link's token nor Google's code appears in the logs". Google's
// authorization code carries a "/" ("4/0A..."), so the callback's query carries it percent-encoded ("code=4%2F0A..."),
// a form the log's scrubber does not know: request lines log the path without its query.
import { request } from "undici";
import { afterEach, expect, it } from "vitest";
import { answerConsent } from "../support/consent.ts";
import { captureLog } from "../support/log-capture.ts";
import { type ConnectWorld, startConnectWorld } from "./support.ts";

let cw: ConnectWorld | undefined;
afterEach(async () => {
  await cw?.close();
  cw = undefined;
});

const hrefOf = (html: string, id: string) =>
  html.match(new RegExp(`id="${id}" href="([^"]+)"`))?.[1]?.replace(/&amp;/g, "&");

it("Google's code does not reach the log in the form the browser sent it (debug request line)", async () => {
  const log = captureLog("debug");
  cw = await startConnectWorld({ logger: log.logger });
  const link = await cw.invite();
  const landing = await request(link);
  const google = hrefOf(await landing.body.text(), "continue")!;
  const callback = await answerConsent(google);
  const res = await request(callback);
  await res.body.text();
  expect(res.statusCode).toBe(200);
  const code = new URL(callback).searchParams.get("code")!;
  const encoded = encodeURIComponent(code);
  expect(encoded).not.toBe(code); // the code has a "/"
  expect(callback).toContain(encoded); // the browser is sent to ...&code=4%2F...
  await new Promise((r) => setTimeout(r, 200));
  const text = log.raw.join("\n");
  expect(text).not.toContain(code); // the decoded form is scrubbed
  const leaked = log.raw.filter((l) => l.includes(encoded));
  expect(leaked, leaked.join("\n")).toEqual([]);
});

it("Google's code is not logged when the callback fails on the store (error-level line, production default)", async () => {
  const log = captureLog("info");
  cw = await startConnectWorld({ logger: log.logger });
  const link = await cw.invite();
  const landing = await request(link);
  const google = hrefOf(await landing.body.text(), "continue")!;
  const callback = await answerConsent(google);
  const code = new URL(callback).searchParams.get("code")!;
  // The store fails (Redis down, a disk error): the state cannot be looked up.
  await cw.app.store.close();
  const res = await request(callback);
  await res.body.text();
  expect(res.statusCode).toBe(500);
  await new Promise((r) => setTimeout(r, 200));
  const leaked = log.raw.filter((l) => l.includes(code) || l.includes(encodeURIComponent(code)));
  expect(leaked, leaked.join("\n")).toEqual([]);
});

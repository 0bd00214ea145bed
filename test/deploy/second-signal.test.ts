// A second stop signal while `calbridge run` is already stopping. The first SIGTERM or SIGINT starts the orderly stop;
// a second SIGTERM (tini under `docker run --init` / compose `init: true` forwarding each one it gets, a systemd unit
// whose ExecStop= sends one before systemd's own, an operator's second `kill`) used to meet Node's default action,
// the handler having been registered with process.once: the process was killed partway through its stop, without
// "calbridge stopped", the store not closed, exit "killed by SIGTERM" instead of 0. Now it is logged and ignored. A
// second Ctrl-C a second or more after the first ends the process at once with exit code 130 (the usual convention);
// one sooner is the same Ctrl-C delivered twice (the terminal's, and `npm start` passing its own on) and is ignored.
import { afterEach, describe, expect, it } from "vitest";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { freePort } from "../support/ports.ts";
import { type Daemon, startDaemon, writeConfig } from "./daemon-process.ts";

const DAY = 86_400_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let world: World | undefined;
let daemon: Daemon | undefined;
afterEach(async () => {
  if (daemon && daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill("SIGKILL");
  daemon = undefined;
  await world?.close();
  world = undefined;
});

/**
 * A daemon whose start-up reconciliation is writing events to a Google that answers in `latencyMs`: a stop begun now
 * waits for the writes in flight (a call that may have reached Google is finished), so it takes a while.
 */
async function busyDaemon(latencyMs: number, writingAfterMs: number): Promise<Daemon> {
  world = await startWorld({ therapists: ["th_anna", "th_ben"], google: { latencyMs } });
  const now = Date.now();
  world.booking.seed({ therapists: world.therapists, count: 6, from: now + DAY, to: now + 10 * DAY });
  const port = await freePort();
  const adminPort = await freePort();
  const file = writeConfig(world, (c) => {
    c.webhooks.listen = `127.0.0.1:${port}`;
    c.admin.listen = `127.0.0.1:${adminPort}`;
  });
  daemon = startDaemon(["run", "--config", file]);
  await daemon.waitFor("calbridge started");
  await sleep(writingAfterMs);
  return daemon;
}

async function exitOf(d: Daemon) {
  return Promise.race([d.exited, sleep(12_000).then(() => "no exit in 12 s" as const)]);
}

describe("a second stop signal during the orderly stop", () => {
  it("SIGTERM twice: the second is logged and ignored; the stop finishes, the store is closed, exit 0", async () => {
    const d = await busyDaemon(1500, 2500);
    d.child.kill("SIGTERM");
    await d.waitFor("stopping");
    await sleep(200);
    expect(d.lines().some((l) => l.msg === "calbridge stopped")).toBe(false); // still stopping
    d.child.kill("SIGTERM"); // forwarded again by an init, or a second `kill`
    expect(await exitOf(d), `${d.stdout().slice(-1500)}\n${d.stderr()}`).toEqual({ code: 0, signal: null });
    const msgs = d.lines().map((l) => l.msg);
    expect(d.lines().find((l) => l.msg === "stop already in progress")).toMatchObject({ level: 30, signal: "SIGTERM" });
    expect(msgs.indexOf("stop already in progress")).toBeLessThan(msgs.indexOf("calbridge stopped"));
    expect(msgs.at(-1)).toBe("calbridge stopped");
  }, 40_000);

  it("the same Ctrl-C delivered twice (two SIGINTs within a second) is one: the stop finishes, exit 0", async () => {
    const d = await busyDaemon(1500, 2500);
    d.child.kill("SIGINT");
    await sleep(50);
    d.child.kill("SIGINT");
    expect(await exitOf(d), `${d.stdout().slice(-1500)}\n${d.stderr()}`).toEqual({ code: 0, signal: null });
    expect(d.lines().find((l) => l.msg === "stop already in progress")).toMatchObject({ signal: "SIGINT" });
    expect(
      d
        .lines()
        .map((l) => l.msg)
        .at(-1),
    ).toBe("calbridge stopped");
  }, 40_000);

  it("a second Ctrl-C a second later ends the process at once with exit code 130, and says so", async () => {
    // Writes take 4 s: the stop begun 5 s after the start waits about 3 s for the one in flight.
    const d = await busyDaemon(4000, 5000);
    d.child.kill("SIGINT");
    await d.waitFor("stopping");
    await sleep(1200);
    expect(d.lines().some((l) => l.msg === "calbridge stopped")).toBe(false); // still stopping
    d.child.kill("SIGINT");
    expect(await exitOf(d), `${d.stdout().slice(-1500)}\n${d.stderr()}`).toEqual({ code: 130, signal: null });
    expect(d.lines().at(-1)).toMatchObject({
      level: 40,
      msg: "second Ctrl-C: exiting at once, without finishing the stop",
      exit_code: 130,
    });
  }, 40_000);

  it("`calbridge demo`: a second SIGTERM does not end it partway either", async () => {
    const d = startDaemon(["demo"]);
    daemon = d;
    const until = Date.now() + 20_000;
    while (!d.stdout().includes("bookings are created") && Date.now() < until) await sleep(50);
    d.child.kill("SIGTERM");
    await sleep(200);
    d.child.kill("SIGTERM");
    const exit = await Promise.race([d.exited, sleep(30_000).then(() => "no exit in 30 s" as const)]);
    expect(exit, `${d.stdout().slice(-1500)}\n${d.stderr()}`).toEqual({ code: 0, signal: null });
    expect(d.stderr()).toContain("calbridge demo: SIGTERM: stop already in progress");
    expect(d.stdout()).toMatch(/calendars match the bookings: \d+ confirmed bookings/);
  }, 60_000);
});

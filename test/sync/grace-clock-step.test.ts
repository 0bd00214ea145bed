// Tests a write-back's grace period when the wall clock is stepped (NTP) while it runs. The daemon's clock here is one
// whose now() jumps while its sleeps keep running on monotonic time, as setTimeout does in production. Stepped back by
// an hour, the period was timed from a start an hour in the future: the therapist's deletion was sent an hour late
// (the appointment still booked, the customer not told) while the history said it waited 60 s.
import { afterEach, expect, it } from "vitest";
import { type Clock, ManualClock } from "../../src/clock.ts";
import { cancels, daemonHarness, type Harness, mirrored, pass, quiet } from "./support.ts";

/** `mono`'s time shifted by `offset` (a stepped wall clock); sleeps run on `mono`. */
class SteppedClock implements Clock {
  offset = 0;
  readonly mono: ManualClock;
  constructor(mono: ManualClock) {
    this.mono = mono;
  }
  now(): number {
    return this.mono.now() + this.offset;
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return this.mono.sleep(ms, signal);
  }
}

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function deletedThenStepped(offset: number): Promise<{ x: Harness; mono: ManualClock }> {
  const mono = new ManualClock(Date.now());
  const stepped = new SteppedClock(mono);
  const x = await daemonHarness({ therapists: 2, clock: mono, app: { clock: stepped } });
  h = x;
  const { cal, eventId } = await mirrored(x);
  x.world.google.userDelete(cal, eventId);
  await x.app.poller.poll("th_1"); // seen: the cancellation waits its 60 s
  await quiet(x);
  await pass(x, mono, 10_000);
  stepped.offset = offset;
  return { x, mono };
}

it("stepped back by an hour during a deletion's 60 s grace period: sent within a period more, not an hour later", async () => {
  const { x, mono } = await deletedThenStepped(-3_600_000);
  await pass(x, mono, 50_000);
  expect(cancels(x)).toBe(0); // the period starts again at the step: nothing early
  await pass(x, mono, 70_000);
  expect(cancels(x)).toBe(1);
});

it("stepped forward by an hour: not sent before the period is over", async () => {
  const { x, mono } = await deletedThenStepped(3_600_000);
  await pass(x, mono, 40_000);
  expect(cancels(x)).toBe(0);
  await pass(x, mono, 30_000);
  expect(cancels(x)).toBe(1);
});

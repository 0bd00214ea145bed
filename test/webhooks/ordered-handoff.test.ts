// Unit tests of the in-order hand-off: values finished out of order reach listeners in ticket order.
import { describe, expect, it } from "vitest";
import { OrderedHandoff } from "../../src/webhooks/ordered-handoff.ts";

describe("OrderedHandoff", () => {
  it("hands values over in ticket order, skips empty tickets, and tells when earlier tickets are through", async () => {
    const handoff = new OrderedHandoff<string>();
    const seen: string[] = [];
    handoff.subscribe((v) => seen.push(v));
    const [a, b, c, d] = [handoff.ticket(), handoff.ticket(), handoff.ticket(), handoff.ticket()];
    let flushed = false;
    const flushing = handoff.flushed().then(() => {
      flushed = true;
    });
    handoff.settle(c!, "c");
    handoff.settle(b!, null);
    expect(seen).toEqual([]);
    handoff.settle(a!, "a");
    expect(seen).toEqual(["a", "c"]);
    await Promise.resolve();
    expect(flushed).toBe(false);
    handoff.settle(d!, "d");
    await flushing;
    expect(seen).toEqual(["a", "c", "d"]);
    await handoff.flushed();
  });

  it("keeps going when a listener throws", () => {
    const handoff = new OrderedHandoff<number>();
    const seen: number[] = [];
    handoff.subscribe(() => {
      throw new Error("bad listener");
    });
    handoff.subscribe((v) => seen.push(v));
    handoff.settle(handoff.ticket(), 1);
    handoff.settle(handoff.ticket(), 2);
    expect(seen).toEqual([1, 2]);
  });
});

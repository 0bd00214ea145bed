// Tests the replay of an inbox a poison event (one that crashes the process whenever it is handed over) is in. It is
// set aside after maxReplays starts; the events pending beside it, handed over in the same burst and still syncing
// when the process died, crashed nothing. They were counted at every start with it and set aside together,
// acknowledged and never processed; events an earlier start handed over without finishing now go one at a time.
import { afterEach, describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.ts";
import type { BookingWebhookEvent } from "../../src/webhooks/event.ts";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { type EventSink, InboxProcessor } from "../../src/webhooks/processor.ts";
import { collect, event, FlakyStore, openTestStore, tmpStorePath } from "./support.ts";

const stores: Store[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => {});
});

/** One "process life": a fresh inbox and processor on the file; the poison event kills it (nothing more is written). */
async function life(inner: Store, handled: string[]): Promise<void> {
  const flaky = new FlakyStore(inner);
  const inbox = new WebhookInbox({ store: flaky });
  let crash!: () => void;
  const crashed = new Promise<void>((r) => {
    crash = r;
  });
  const sink: EventSink = {
    async appointment(e: BookingWebhookEvent) {
      if (e.id === "evt_poison") {
        // The process dies here: from now on it writes nothing.
        flaky.failing = true;
        crash();
        return new Promise(() => {});
      }
      // An ordinary sync: a few Google round trips.
      await new Promise((r) => setTimeout(r, 30));
      handled.push(e.id);
    },
    async customerUpdated() {},
  };
  const processor = new InboxProcessor({
    inbox,
    sink,
    maxReplays: 3,
    retryDelayMs: () => 1_000_000,
    suspectWaitMs: 100,
  });
  await processor.start();
  await Promise.race([crashed, new Promise((r) => setTimeout(r, 300))]);
  // the dead process's leftovers stay failing; wait for the innocent one's timer to fire into the dead store
  await new Promise((r) => setTimeout(r, 60));
}

describe("poison event at replay", () => {
  it("a pending event handed over beside a poison event is not set aside with it", async () => {
    const inner = await openTestStore(tmpStorePath());
    stores.push(inner);
    const first = new WebhookInbox({ store: inner });
    // Both accepted and acknowledged; the process dies before either is processed.
    expect(await first.accept(event("evt_poison", "appointment.updated", { id: "apt_p" }) as BookingWebhookEvent)).toBe(
      "accepted",
    );
    expect(await first.accept(event("evt_ok", "appointment.cancelled", { id: "apt_ok" }) as BookingWebhookEvent)).toBe(
      "accepted",
    );
    const handled: string[] = [];
    for (let i = 0; i < 6; i++) await life(inner, handled);
    const dead = (await collect(new WebhookInbox({ store: inner }).deadLetters())).map(([k]) => k);
    expect(dead).toContain("evt_poison");
    // evt_ok never crashed anything: processed, never set aside unprocessed.
    expect(dead).not.toContain("evt_ok");
    expect(handled).toContain("evt_ok");
  }, 30_000);
});

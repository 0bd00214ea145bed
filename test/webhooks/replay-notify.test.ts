// Tests notices (another replica's accept, or the leader's sweep) that arrive while the start's replay hands the same
// events over: each event went to the sink twice, once through the notice and once through the replay, and the
// replay's count could land over a done mark already stored. A notice now waits for the replay.
import { afterEach, describe, expect, it } from "vitest";
import type { Store } from "../../src/store/store.ts";
import type { BookingWebhookEvent } from "../../src/webhooks/event.ts";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { InboxProcessor } from "../../src/webhooks/processor.ts";
import { collect, event, openTestStore, RecordingSink, tmpStorePath } from "./support.ts";

const stores: Store[] = [];
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close().catch(() => {});
});

describe("replay vs notice", () => {
  it("an event processed through a notice during the replay ends done, processed once", async () => {
    const store = await openTestStore(tmpStorePath());
    stores.push(store);
    const other = new WebhookInbox({ store });
    for (let i = 0; i < 20; i++)
      await other.accept(event(`evt_${i}`, "appointment.updated", { id: `apt_${i}` }) as BookingWebhookEvent);
    const inbox = new WebhookInbox({ store });
    const sink = new RecordingSink();
    const processor = new InboxProcessor({ inbox, sink });
    const started = processor.start();
    // notices for the same ids arrive while the replay runs
    await Promise.all([started, ...Array.from({ length: 20 }, (_, i) => processor.notify(`evt_${i}`))]);
    await new Promise((r) => setTimeout(r, 100));
    await processor.idle();
    await processor.stop();
    const left = (await collect(new WebhookInbox({ store }).pending())).map((e) => e.id);
    const counts = new Map<string, number>();
    for (const c of sink.calls) counts.set(c.eventId, (counts.get(c.eventId) ?? 0) + 1);
    const twice = [...counts].filter(([, n]) => n > 1).map(([id]) => id);
    expect({ left, twice }).toEqual({ left: [], twice: [] });
  });
});

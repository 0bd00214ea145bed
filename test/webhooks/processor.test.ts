// Tests of inbox processing: hand-over in arrival order, done marks only when the sink is done, poisonous events,
// dispatch by type, per-event child loggers, and replay after a process killed right after its 2xx answers.
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.ts";
import type { Table, TableName } from "../../src/store/store.ts";
import { WebhookInbox } from "../../src/webhooks/inbox.ts";
import { InboxProcessor } from "../../src/webhooks/processor.ts";
import { captureLog } from "../support/log-capture.ts";
import { collect, event, type Harness, openTestStore, RecordingSink, startHarness, tmpStorePath } from "./support.ts";

const harnesses: Harness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

async function harness(...args: Parameters<typeof startHarness>) {
  const h = await startHarness(...args);
  harnesses.push(h);
  return h;
}

const apt = (id: string, type: string, appointment: string) => event(id, type, { id: appointment });

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

async function until(cond: () => boolean | Promise<boolean>, what = "condition"): Promise<void> {
  // Bounded in real time (15 s), not by 2,000 polls of a millisecond: SQLite statements take far longer under load.
  const end = Date.now() + 15_000;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 1));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("inbox processor", () => {
  it("hands out-of-order deliveries to the sink in arrival order", async () => {
    const h = await harness();
    // The sender delivers the update before the creation (a retry of the creation came late).
    await h.post(event("evt_2", "appointment.updated", { id: "apt_1" }, { created_at: "2026-11-22T09:05:00Z" }));
    await h.post(event("evt_1", "appointment.created", { id: "apt_1" }, { created_at: "2026-11-22T09:00:00Z" }));
    await h.post(apt("evt_3", "appointment.cancelled", "apt_1"));
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_2", "evt_1", "evt_3"]);
  });

  it("hands every event over at once, in arrival order, and marks each done only when the sink is done with it", async () => {
    const h = await harness();
    const gate = deferred();
    h.sink.behaviour = (e) => (e.id === "a1" ? gate.promise : undefined);
    await h.post(apt("a1", "appointment.created", "apt_A"));
    await h.post(apt("a2", "appointment.updated", "apt_A"));
    await h.post(apt("b1", "appointment.created", "apt_B"));
    // Per-appointment order is the sync engine's job: the processor hands over without waiting.
    await until(() => h.sink.finished.length === 2, "a2 and b1");
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["a1", "a2", "b1"]);
    await until(async () => (await h.inbox.get("b1")) === undefined, "b1 done");
    expect(await h.inbox.get("a1")).toMatchObject({ id: "a1" });
    gate.resolve();
    await h.processor!.idle();
    expect(await h.inbox.get("a1")).toBeUndefined();
    expect(await collect(h.inbox.pending())).toEqual([]);
  });

  it("keeps arrival order under a concurrent burst", async () => {
    const h = await harness();
    const arrival: string[] = [];
    h.inbox.subscribe((e) => arrival.push(e.id));
    h.sink.behaviour = () => new Promise((r) => setTimeout(r, Math.random() * 3));
    const events = Array.from({ length: 120 }, (_, i) => apt(`evt_${i}`, "appointment.updated", `apt_${i % 6}`));
    await Promise.all(events.map((e) => h.post(e)));
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(arrival);
    expect(await collect(h.inbox.pending())).toEqual([]);
  });

  it("leaves an event the sink could not finish (it is stopping) pending, with no retry loop of its own", async () => {
    const h = await harness();
    h.sink.behaviour = () => {
      throw new Error("the sync engine stopped before this request was finished");
    };
    await h.post(apt("evt_r", "appointment.created", "apt_1"));
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_r"]);
    expect(h.clock.waiting).toBe(0);
    expect(await h.inbox.get("evt_r")).toMatchObject({ id: "evt_r" });
    expect(await collect(h.inbox.deadLetters())).toEqual([]);
    expect(await h.registry.metrics()).toContain(
      'calbridge_webhook_processing_total{type="appointment.created",result="unfinished"} 1',
    );
  });

  it("sets aside an event handed over at several starts without ever finishing (a poisonous event)", async () => {
    const path = tmpStorePath();
    const clock = new ManualClock();
    const store = await openTestStore(path);
    const inbox = new WebhookInbox({ store, clock });
    expect(await inbox.accept(apt("evt_poison", "appointment.created", "apt_1") as never)).toBe("accepted");
    expect(await inbox.accept(apt("evt_fine", "appointment.created", "apt_2") as never)).toBe("accepted");
    // Each start hands it over and dies before the sink finishes it (the process crashes on it).
    for (let start = 1; start <= 3; start++) {
      const sink = new RecordingSink();
      sink.behaviour = (e) => (e.id === "evt_poison" ? new Promise(() => {}) : undefined);
      const processor = new InboxProcessor({
        inbox: new WebhookInbox({ store, clock }),
        sink,
        clock,
        maxReplays: 2,
        suspectWaitMs: 50, // it never finishes: the replay goes on without it after this long
      });
      await processor.start();
      if (start <= 2) await until(() => sink.calls.some((c) => c.eventId === "evt_poison"), "the hand-over");
      else await until(async () => (await collect(inbox.deadLetters())).length === 1, "the set-aside");
      expect(sink.calls.some((c) => c.eventId === "evt_poison")).toBe(start <= 2);
      const stopping = processor.stop(10);
      await clock.advance(10);
      await stopping;
    }
    const dead = await collect(inbox.deadLetters());
    expect(dead.map(([k]) => k)).toEqual(["evt_poison"]);
    expect(dead[0]![1]).toMatchObject({ eventId: "evt_poison", attempts: 2 });
    // What is kept names the event; the body (customer details) is not kept.
    expect(Object.keys(dead[0]![1]).sort()).toEqual(["attempts", "deadAt", "eventId", "reason", "receivedAt", "type"]);
    expect(await inbox.get("evt_poison")).toBeUndefined();
    await store.close();
  });

  it("does not count a start the sink left unfinished because the process was stopping (no crash, no poison)", async () => {
    const clock = new ManualClock();
    const store = await openTestStore(tmpStorePath());
    const first = new WebhookInbox({ store, clock });
    expect(await first.accept(apt("evt_slow", "appointment.created", "apt_1") as never)).toBe("accepted");
    // Six deploys while the event waits (a calendar unavailable): the engine gives it up at each orderly stop.
    for (let start = 1; start <= 6; start++) {
      const inbox = new WebhookInbox({ store, clock });
      const sink = new RecordingSink();
      const gaveUp = deferred();
      sink.behaviour = () =>
        gaveUp.promise.then(() => {
          throw Object.assign(new Error("the sync engine stopped before this request was finished"), {
            name: "EngineStoppedError",
          });
        });
      const processor = new InboxProcessor({ inbox, sink, clock, maxReplays: 2 });
      await processor.start();
      await until(() => sink.calls.length === 1, `the hand-over at start ${start}`);
      const stopping = processor.stop(1000);
      gaveUp.resolve();
      await stopping;
    }
    expect(await collect(first.deadLetters())).toEqual([]);
    expect(await new WebhookInbox({ store, clock }).get("evt_slow")).toMatchObject({ id: "evt_slow", attempts: 0 });
    await store.close();
  });

  it("dispatches by type: appointments and customers to the sink, payments acknowledged, unknown warned once", async () => {
    const h = await harness();
    await h.post(apt("e1", "appointment.no_show", "apt_1"));
    await h.post(event("e2", "customer.updated", { id: "cus_1" }));
    await h.post(event("e3", "payment.refunded", { id: "pay_1" }));
    await h.post(event("e4", "gift_card.redeemed", { id: "gc_1" }));
    await h.post(event("e5", "widget.frobbed", { id: "w_1" }));
    await h.post(event("e6", "widget.frobbed", { id: "w_2" }));
    // An appointment.* type the spec does not list names an appointment to sync; without an id it is unknown.
    await h.post(event("e7", "appointment.rescheduled", { id: "apt_2" }));
    await h.post(event("e8", "appointment.reminder_sent", {}));
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => [c.method, c.eventId])).toEqual([
      ["appointment", "e1"],
      ["customerUpdated", "e2"],
      ["appointment", "e7"],
    ]);
    expect(h.log.lines.filter((l) => String(l["msg"]).includes("does not list"))).toMatchObject([
      { event_type: "appointment.rescheduled", appointment_id: "apt_2", level: 40 },
    ]);
    const warns = h.log.lines.filter((l) => String(l["msg"]).includes("unknown type"));
    expect(warns.map((w) => w["event_type"])).toEqual(["widget.frobbed", "appointment.reminder_sent"]);
    expect(warns[0]).toMatchObject({ level: 40 });
    const text = await h.registry.metrics();
    expect(text).toContain('calbridge_webhook_processing_total{type="unknown",result="unknown"} 3');
    expect(text).toContain('calbridge_webhook_processing_total{type="gift_card.redeemed",result="ignored"} 1');
    expect(await collect(h.inbox.pending())).toEqual([]);
  });

  it("gives the sink a child logger, so one grep on the event id follows it end to end", async () => {
    const h = await harness();
    await h.post(apt("evt_grep", "appointment.cancelled", "apt_7"));
    await h.processor!.idle();
    const lines = h.log.lines.filter((l) => l["event_id"] === "evt_grep").map((l) => l["msg"]);
    expect(lines).toEqual(["webhook accepted", "sink called", "webhook event processed"]);
    expect(h.log.find((l) => l["msg"] === "sink called")).toMatchObject({
      event_type: "appointment.cancelled",
      appointment_id: "apt_7",
    });
  });

  it("delivers exactly once the events of a process killed after its 2xx answers", async () => {
    const path = tmpStorePath();
    const clock = new ManualClock();
    // First life: the sink hangs on apt_1 (the process dies mid-call); apt_2's event completes.
    const first = await startHarness({ storePath: path, clock });
    first.sink.behaviour = (e) => (e.data.object["id"] === "apt_1" ? new Promise(() => {}) : undefined);
    for (const e of [apt("k1", "appointment.created", "apt_1"), apt("k2", "appointment.updated", "apt_1")]) {
      expect((await first.post(e)).status).toBe(200);
    }
    expect((await first.post(apt("k3", "appointment.created", "apt_2"))).status).toBe(200);
    await until(() => first.sink.finished.length === 1, "k3");
    await until(async () => (await first.inbox.get("k3")) === undefined, "k3 done");
    await first.close();

    // A second life with no processor at all: accepted and answered, never processed.
    const second = await startHarness({ storePath: path, clock, processor: false });
    expect((await second.post(apt("k4", "appointment.cancelled", "apt_1"))).status).toBe(200);
    expect((await second.post(apt("k3", "appointment.created", "apt_2"))).json["duplicate"]).toBe(true);
    await second.close();

    // Restart: a new store, inbox and processor on the same file.
    const store = await openTestStore(path);
    const inbox = new WebhookInbox({ store, clock });
    const sink = new RecordingSink();
    const log = captureLog();
    const processor = new InboxProcessor({ inbox, sink, logger: log.logger, clock });
    await processor.start();
    await processor.idle();
    expect(sink.calls.map((c) => c.eventId)).toEqual(["k1", "k2", "k4"]);
    expect(log.find((l) => l["msg"] === "replaying webhook events left in the inbox")).toMatchObject({ count: 3 });
    await processor.stop();
    await store.close();

    // Once more: nothing left to deliver.
    const again = await openTestStore(path);
    const sink2 = new RecordingSink();
    const p2 = new InboxProcessor({ inbox: new WebhookInbox({ store: again, clock }), sink: sink2, clock });
    await p2.start();
    await p2.idle();
    expect(sink2.calls).toEqual([]);
    await p2.stop();
    await again.close();
  });

  it("processes on notify(id) an entry another process wrote to the shared store", async () => {
    const h = await harness();
    const otherProcess = new WebhookInbox({ store: h.store, clock: h.clock });
    expect(
      await otherProcess.accept({ id: "evt_other", type: "appointment.updated", data: { object: { id: "apt_9" } } }),
    ).toBe("accepted");
    await h.processor!.notify("evt_other");
    await h.processor!.notify("evt_other");
    await h.processor!.idle();
    await h.processor!.notify("evt_other");
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_other"]);
    expect(await h.inbox.get("evt_other")).toBeUndefined();
  });

  it("processes an id delivered again once its done mark expired, though it was finished here lately", async () => {
    const h = await harness();
    await h.post(apt("evt_again", "appointment.updated", "apt_1"));
    await h.processor!.idle();
    // The duplicate window is over: the done mark is gone (keyv drops an expired row as it reads it).
    expect(await h.store.table("inbox").delete("evt_again")).toBe(true);
    expect((await h.post(apt("evt_again", "appointment.updated", "apt_1"))).json).toEqual({ received: true });
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_again", "evt_again"]);
    expect(await h.inbox.get("evt_again")).toBeUndefined();
  });

  it("does not run again an event that finished while a notice's read of it was in flight", async () => {
    const h = await harness();
    // Reads of the inbox table see the store when they are made and answer when released, as a slow read would.
    const held: (() => void)[] = [];
    const inboxTable = h.store.table<unknown>("inbox");
    const slowStore = Object.create(h.store) as typeof h.store;
    slowStore.table = <T>(name: TableName): Table<T> => {
      const table = h.store.table<T>(name);
      if (name !== "inbox") return table;
      return {
        get: (key) => {
          const read = table.get(key);
          return new Promise<T | undefined>((resolve) => held.push(() => resolve(read)));
        },
        getMany: (keys) => table.getMany(keys),
        set: (key, value, ttlMs) => table.set(key, value, ttlMs),
        delete: (key) => table.delete(key),
        setMany: (entries) => table.setMany(entries),
        deleteMany: (keys) => table.deleteMany(keys),
        addMany: (entries) => table.addMany(entries),
        replaceIf: (key, expected, value) => table.replaceIf(key, expected, value),
        entries: () => table.entries(),
      };
    };
    const reader = new WebhookInbox({ store: slowStore, clock: h.clock });
    const processor = new InboxProcessor({ inbox: reader, sink: h.sink, clock: h.clock });
    await processor.start();
    const other = new WebhookInbox({ store: h.store, clock: h.clock });
    expect(await other.accept({ id: "evt_race", type: "appointment.updated", data: { object: { id: "apt_1" } } })).toBe(
      "accepted",
    );
    // Two notices of one id, both reading before either takes it: the second read sees the entry still pending.
    const first = processor.notify("evt_race");
    const second = processor.notify("evt_race");
    await until(() => held.length === 2, "both reads");
    held[0]!();
    await first;
    await processor.idle();
    expect(await inboxTable.get("evt_race")).toMatchObject({ doneAt: expect.any(String) });
    held[1]!();
    await second;
    await processor.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_race"]);
    // Later notices read the done mark.
    const late = processor.notify("evt_race");
    await until(() => held.length === 3, "the late read");
    held[2]!();
    await late;
    await processor.idle();
    expect(h.sink.calls).toHaveLength(1);
    await processor.stop();
  });

  it("stops with a bounded wait and leaves unfinished events for the next start", async () => {
    const h = await harness();
    h.sink.behaviour = () => new Promise(() => {});
    await h.post(apt("evt_hang", "appointment.created", "apt_1"));
    await until(() => h.sink.active.get("apt_1") === 1, "the hanging call");
    const stopping = h.processor!.stop(5000);
    await until(() => h.clock.waiting === 1, "the stop timer");
    await h.clock.advance(5000);
    await stopping;
    expect(h.log.find((l) => String(l["msg"]).includes("stopped with events in flight"))).toMatchObject({
      in_flight: 1,
    });
    expect(await h.inbox.get("evt_hang")).toMatchObject({ id: "evt_hang" });
  });

  it("retries a replay the store cannot read instead of failing the start, then processes what it holds", async () => {
    const h = await harness({ processor: false });
    expect(await h.inbox.accept(apt("evt_left", "appointment.updated", "apt_1") as never)).toBe("accepted");
    h.flaky.failing = true; // the store blips as the processor starts (a Redis failover, say)
    const processor = new InboxProcessor({ inbox: h.inbox, sink: h.sink, logger: h.log.logger, clock: h.clock });
    let settled: "resolved" | "rejected" | undefined;
    const started = processor.start().then(
      () => (settled = "resolved"),
      () => (settled = "rejected"),
    );
    await until(() => h.log.lines.some((l) => String(l["msg"]).includes("could not be read; trying again")), "log");
    expect(settled).toBeUndefined();
    h.flaky.failing = false;
    await h.clock.advance(5_000);
    await started;
    expect(settled).toBe("resolved");
    await processor.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_left"]);
    await processor.stop();
  });

  it("retries a done mark the store refused until it is stored, without processing the event again", async () => {
    const path = tmpStorePath();
    const h = await harness({ storePath: path, processorOptions: { retryDelayMs: () => 1000 } });
    const gate = deferred();
    h.sink.behaviour = () => gate.promise;
    expect((await h.post(apt("evt_a", "appointment.updated", "apt_1"))).status).toBe(200);
    expect((await h.post(apt("evt_b", "appointment.updated", "apt_2"))).status).toBe(200);
    await until(() => h.sink.active.get("apt_1") === 1, "the first sink call");
    h.flaky.failing = true; // the disk goes away while the sink works
    gate.resolve();
    await until(() => h.clock.waiting === 2, "both marks waiting to be retried");
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_a", "evt_b"]);
    expect(
      h.log.lines
        .filter(
          (l) =>
            l["msg"] === "webhook event processed but not marked done: the store failed; retrying until it is stored",
        )
        .map((l) => l["event_id"]),
    ).toEqual(["evt_a", "evt_b"]);
    // Several failed tries later, a hint (another replica's notice, the sweep) does not take the events again.
    await h.clock.advance(1000);
    await until(() => h.clock.waiting === 2, "the second tries");
    await h.processor!.notify("evt_a");
    await h.processor!.notify("evt_b");
    h.flaky.failing = false; // the disk is back: the next try stores both marks, with no restart
    await h.clock.advance(1000);
    await h.processor!.idle();
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_a", "evt_b"]);
    expect(await collect(new WebhookInbox({ store: h.store }).pending())).toEqual([]);
    expect(h.log.lines.filter((l) => l["msg"] === "done mark stored once the store answered again")).toHaveLength(2);
    expect((await h.post(apt("evt_a", "appointment.updated", "apt_1"))).json["duplicate"]).toBe(true);
    expect(await h.registry.metrics()).toContain(
      'calbridge_webhook_processing_total{type="appointment.updated",result="ok"} 2',
    );
  });

  it("keeps an event pending when its done mark is still not stored at stop, so the next start replays it", async () => {
    const path = tmpStorePath();
    const h = await harness({ storePath: path, processorOptions: { retryDelayMs: () => 1000 } });
    const gate = deferred();
    h.sink.behaviour = () => gate.promise;
    expect((await h.post(apt("evt_a", "appointment.updated", "apt_1"))).status).toBe(200);
    await until(() => h.sink.active.get("apt_1") === 1, "the sink call");
    h.flaky.failing = true;
    gate.resolve();
    await until(() => h.clock.waiting === 1, "the mark waiting to be retried");
    expect(h.sink.calls.map((c) => c.eventId)).toEqual(["evt_a"]);
    await h.processor!.stop(0);
    h.flaky.failing = false;
    expect(h.log.find((l) => String(l["msg"]).startsWith("processor stopped before the done mark"))).toMatchObject({
      event_id: "evt_a",
    });
    const again = new WebhookInbox({ store: h.store });
    expect((await collect(again.pending())).map((e) => e.id)).toEqual(["evt_a"]);
  });

  it("stores the done marks of finished events before a stop resolves, even when it gives up on others", async () => {
    const path = tmpStorePath();
    const h = await harness({ storePath: path });
    h.sink.behaviour = (e) => (e.id === "evt_stuck" ? new Promise(() => {}) : undefined);
    expect((await h.post(apt("evt_stuck", "appointment.updated", "apt_1"))).status).toBe(200);
    expect((await h.post(apt("evt_done", "appointment.updated", "apt_2"))).status).toBe(200);
    await until(() => h.sink.calls.length === 2, "both hand-overs");
    // evt_done's mark is requested (it lingers to share a batch); the stop gives up on evt_stuck at once.
    await new Promise((r) => setImmediate(r));
    await h.processor!.stop(0);
    const again = new WebhookInbox({ store: h.store });
    expect((await collect(again.pending())).map((e) => e.id)).toEqual(["evt_stuck"]);
  });

  it("a done event survives a restart as a done mark: not replayed, and its redelivery is a duplicate", async () => {
    const path = tmpStorePath();
    const store = await openTestStore(path);
    const inbox = new WebhookInbox({ store });
    const event = { id: "evt_done", type: "appointment.created", data: { object: { id: "apt_1" } } };
    expect(await inbox.accept(event)).toBe("accepted");
    expect(await inbox.accept({ id: "evt_open", type: "appointment.updated", data: { object: { id: "apt_2" } } })).toBe(
      "accepted",
    );
    await inbox.markDone("evt_done");
    await store.close();

    const reopened = await openTestStore(path);
    try {
      const again = new WebhookInbox({ store: reopened });
      expect((await collect(again.pending())).map((e) => e.id)).toEqual(["evt_open"]);
      expect(await again.get("evt_done")).toBeUndefined();
      expect(await again.accept(event)).toBe("duplicate");
      expect(await again.accept({ ...event, id: "evt_new" })).toBe("accepted");
      expect(again.pendingCount).toBe(2);
    } finally {
      await reopened.close();
    }
  });

  it("remembers processed ids for 7 days by default, and refuses less than 72 hours", async () => {
    const store = await openTestStore(":memory:");
    const table = store.table("inbox");
    const ttls: (number | undefined)[] = [];
    const original = table.set.bind(table);
    table.set = (key, value, ttl) => {
      ttls.push(ttl);
      return original(key, value, ttl);
    };
    const inbox = new WebhookInbox({ store });
    await inbox.accept({ id: "evt_ttl", type: "payment.completed", data: { object: {} } });
    await inbox.markDone("evt_ttl");
    expect(ttls).toEqual([7 * 24 * 3_600_000]);
    expect(() => new WebhookInbox({ store, seenTtlMs: 24 * 3_600_000 })).toThrow(/at least 72 hours/);
    await store.close();
  });
});

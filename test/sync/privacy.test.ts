// The store keeps no patient details: demo-like traffic through the real daemon (bookings with notes and phones,
// moves, cancellations, notes and customer changes, a therapist's moves and deletions, reconciliations, enrichments),
// then every byte of the SQLite files is searched for every customer name, e-mail, phone and note the simulator
// produced, customer details in the event descriptions included.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { type App, createApp } from "../../src/daemon/app.ts";
import { silentLogger } from "../../src/log.ts";
import { startWorld, WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";

let world: World | undefined;
let app: App | undefined;
afterEach(async () => {
  await app?.stop(2000).catch(() => {});
  await world?.close();
  app = undefined;
  world = undefined;
});

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const THERAPISTS = ["th_anna", "th_ben", "th_chen"];

async function settle(w: World, a: App): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await w.booking.webhooksIdle();
    for (const t of THERAPISTS) await a.poller.poll(t);
    await a.processor.idle();
    await a.engine.drained();
  }
}

/** Every place in the store's files where one of `needles` occurs (UTF-8 and Latin-1 readings of the bytes). */
function foundIn(dir: string, needles: string[]): string[] {
  const files = readdirSync(dir).filter((f) => f.startsWith("calbridge.sqlite"));
  expect(files).toContain("calbridge.sqlite");
  const found: string[] = [];
  for (const f of files) {
    const bytes = readFileSync(join(dir, f));
    const texts = [bytes.toString("utf8"), bytes.toString("latin1")];
    for (const n of needles) if (texts.some((t) => t.includes(n))) found.push(`${f}: ${n}`);
  }
  return found;
}

describe("patient details at rest", () => {
  it("a grep of the SQLite files after demo traffic finds no customer name, e-mail, phone or note", async () => {
    world = await startWorld({
      therapists: THERAPISTS,
      configure: (c) => {
        // Everything a clinic may show: the customer's contact in the descriptions too.
        c.event = { include_customer_contact: true, description: "Booking {id}\n{notes}\n{addons}" };
        c.sync = {
          ...c.sync,
          cancelled_events: "keep",
          writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 },
        };
      },
    });
    const sim = world.booking;
    const now = Date.now();
    sim.seed({ therapists: THERAPISTS, count: 30, from: now - 2 * DAY, to: now + 14 * DAY });
    app = await createApp(world.config, { logger: silentLogger, listen: "127.0.0.1:0" });
    await app.start();
    sim.addWebhookEndpoint({
      url: `${app.http!.url}${world.config.webhooks.path}`,
      secret: WORLD_WEBHOOK_SECRET,
      events: ["*"],
    });
    const notes: string[] = [];
    const booked: string[] = [];
    for (let i = 0; i < 12; i++) {
      const note = `Befund ${i}: Bandscheibenvorfall L${i}, Überweisung Dr. Zweistein`;
      notes.push(note);
      const start = Math.floor((now + (1 + (i % 9)) * DAY) / DAY) * DAY + (8 + (i % 8)) * HOUR;
      const a = sim.create(
        {
          therapist_id: THERAPISTS[i % 3]!,
          start_time: new Date(start).toISOString(),
          notes: note,
          addons: ["addon_hot_stones"],
          customer: {
            name: `Patientin Nummer${i} Österreicher`,
            email: `patientin${i}@mail.example`,
            phone: `+43 660 77${i}4${i}21`,
          },
        },
        { force: true },
      );
      booked.push(String(a.id));
    }
    await settle(world, app);
    // The booking side changes.
    sim.move(booked[0]!, now + 10 * DAY + 9 * HOUR, { force: true });
    sim.cancel(booked[1]!, "Patientin verhindert");
    for (const [i, id] of [booked[2]!, booked[3]!].entries()) {
      const note = `Neuer Befund ${i}: Tinnitus beidseits`;
      notes.push(note);
      sim.setNotes(id, note);
    }
    sim.complete(booked[4]!);
    const customer = sim.get(booked[5]!)!.customer as { id: string };
    sim.updateCustomer(customer.id, {
      name: "Patientin Umbenannt Huber",
      email: "umbenannt@mail.example",
      phone: "+43 660 9988776",
    });
    await settle(world, app);
    // The therapists change events: a move (rescheduled), a deletion (cancelled).
    const cal = (id: string) => world!.calendarOf(String(sim.get(id)!.therapist_id));
    const moved = world.google.event(cal(booked[6]!), eventIdFor(booked[6]!))!;
    const shift = (t: unknown) => ({
      dateTime: new Date(Date.parse(String((t as { dateTime: string }).dateTime)) + 2 * HOUR).toISOString(),
    });
    world.google.userEdit(cal(booked[6]!), String(moved.id), { start: shift(moved.start), end: shift(moved.end) });
    world.google.userDelete(cal(booked[7]!), eventIdFor(booked[7]!));
    await settle(world, app);
    await app.reconcile();
    await settle(world, app);
    // The events do show the customers' details (so they went through the daemon) ...
    const shown = world.google.event(cal(booked[8]!), eventIdFor(booked[8]!));
    expect(String(shown?.description)).toContain("Überweisung Dr. Zweistein");
    expect(String(shown?.description)).toContain("patientin8@mail.example");
    expect(String(shown?.summary)).toContain("Patientin Nummer8 Österreicher");
    await app.stop(5000);
    app = undefined;

    // ... and the store keeps none of them.
    const needles = new Set<string>(notes);
    for (const c of sim.customers()) {
      needles.add(c.name);
      needles.add(c.email);
      if (c.phone) needles.add(c.phone);
    }
    for (const a of sim.all()) if (a.notes) needles.add(String(a.notes));
    expect(needles.size).toBeGreaterThan(40);
    expect(foundIn(world.dir, [...needles])).toEqual([]);
  }, 90_000);
});

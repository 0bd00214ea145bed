// /status shows each therapist's last sync error to whoever may read the admin page. The booking service's error
// `message` is free "human-readable text" that may name the customer; /status says the API's code and HTTP status,
// as the notifications do, and leaves the text to the log.
import { expect, it } from "vitest";
import { eventIdFor } from "../../src/calendar/ids.ts";
import { daemonHarness, mirrored, pollAll, quiet } from "../sync/support.ts";

it("a booking API error echoing a customer's e-mail reaches /status as its code and status only", async () => {
  const x = await daemonHarness({
    therapists: 2,
    engine: { baseMs: 20, maxDelayMs: 50, maxAttempts: 3 },
    configure: (c) => {
      c.sync = { ...c.sync, writeback: { cancel_grace_seconds: 0, reschedule_grace_seconds: 0 } };
    },
  });
  try {
    const { id, cal } = await mirrored(x);
    // Not retried by the client (a 4xx): the sync fails at once, as often as the engine tries it.
    x.world.booking.faults.refuseNext(50, "account_suspended", {
      status: 403,
      match: { method: "POST", path: /\/cancel$/ },
      message: "upstream timeout while cancelling for customer jane.doe@example.com (Jane Doe)",
    });
    x.world.google.userDelete(cal, eventIdFor(id));
    for (let i = 0; i < 60 && !(await x.app.status()).therapists[0]!.lastError; i++) {
      await pollAll(x);
      await new Promise((r) => setTimeout(r, 250));
    }
    await quiet(x);
    const s = await x.app.status();
    expect(s.therapists[0]!.lastError?.message).toBe("the booking API answered account_suspended (HTTP 403)");
    expect(JSON.stringify(s)).not.toMatch(/jane\.doe|Jane Doe/);
  } finally {
    await x.close();
  }
}, 60_000);

// CallOptions.beforeSend: a write-back's check that the therapist's calendar change still stands, run right before each
// send of the write. It runs before the rate gate (holding no permit) and again after a wait there; a write it stops is
// not sent and takes nothing from the client's per-minute window.
import { afterEach, describe, expect, it } from "vitest";
import { drive, type Pair, startPair, T0 } from "./support.ts";

let pair: Pair | undefined;
afterEach(async () => {
  await pair?.close();
  pair = undefined;
});

const at = (h: number) => new Date(T0 + h * 3_600_000).toISOString();
const posts = (p: Pair) => p.sim.requests.filter((r) => r.method === "POST").length;

describe("the booking client's check right before a write is sent", () => {
  it("without a wait at the gate it looks once, then sends", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"] } });
    const a = pair.sim.create({ therapist_id: "th_anna", start_time: at(50) });
    let looks = 0;
    const res = await pair.client.cancelAppointment(String(a.id), {}, { beforeSend: async () => void looks++ });
    expect(res.status).toBe("cancelled");
    expect(looks).toBe(1);
    expect(posts(pair)).toBe(1);
  });

  it("a change taken back before the gate: nothing sent, no permit taken", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"] }, client: { requestsPerMinute: 10 } });
    const a = pair.sim.create({ therapist_id: "th_anna", start_time: at(50) });
    const before = pair.client.gate.snapshot().sentInWindow;
    await expect(
      pair.client.cancelAppointment(String(a.id), {}, { beforeSend: () => Promise.reject(new Error("taken back")) }),
    ).rejects.toThrow("taken back");
    expect(posts(pair)).toBe(0);
    expect(pair.client.gate.snapshot().sentInWindow).toBe(before);
    expect(pair.sim.get(String(a.id))?.status).toBe("confirmed");
  });

  it("looked at again after the wait for the window: taken back meanwhile, nothing sent, and the window does not count it", async () => {
    pair = await startPair({ sim: { therapists: ["th_anna"] }, client: { requestsPerMinute: 1 } });
    const p = pair;
    const a = p.sim.create({ therapist_id: "th_anna", start_time: at(50) });
    await p.client.getAppointment(String(a.id)); // the window's one request
    let looks = 0;
    const cancel = p.client.cancelAppointment(
      String(a.id),
      {},
      {
        beforeSend: async () => {
          // Still deleted when first looked at; taken back while the write waited for the next window.
          if (++looks > 1) throw new Error("taken back");
        },
      },
    );
    await expect(drive(p.clock, cancel)).rejects.toThrow("taken back");
    expect(looks).toBe(2); // the second look comes only after a wait at the gate
    expect(posts(p)).toBe(0);
    expect(p.sim.get(String(a.id))?.status).toBe("confirmed");
    // The write that was stopped takes no place in the window: the next request goes out without a wait.
    expect(p.client.gate.snapshot().sentInWindow).toBe(0);
  });
});

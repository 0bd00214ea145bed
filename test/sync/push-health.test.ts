// What PushHealth says of a calendar's channel for /status and calbridge_push_channels: its state at a moment (an
// expired channel is none, a suspect one is told apart), and the last failed renewal until one opens a channel.
import { Registry } from "prom-client";
import { expect, it } from "vitest";
import { registerPushMetrics } from "../../src/daemon/push-status.ts";
import { PushHealth } from "../../src/sync/push-health.ts";

it("a channel's state: unconfirmed, confirmed, suspect, none once expired or closed", () => {
  const h = new PushHealth();
  expect(h.state("th_1", 0)).toBe("none");
  h.opened("th_1", { channelId: "c1", expiration: 1000 });
  expect(h.state("th_1", 0)).toBe("unconfirmed");
  h.confirmed("th_1", "c1");
  expect(h.state("th_1", 0)).toBe("confirmed");
  h.suspect("th_1", "change not announced");
  expect(h.state("th_1", 0)).toBe("suspect");
  expect(h.state("th_1", 1000)).toBe("none");
  h.closed("th_1");
  expect(h.state("th_1", 0)).toBe("none");
});

it("a failed renewal is kept until a renewal opens a channel, and each is counted", async () => {
  const h = new PushHealth();
  const registry = new Registry();
  let leader = true;
  registerPushMetrics({
    registry,
    health: h,
    enabled: () => true,
    isLeader: () => leader,
    therapists: () => ["th_1", "th_2"],
    now: () => 0,
  });
  h.opened("th_1", { channelId: "c1", expiration: 1000, confirmed: true });
  h.renewal("th_2", { result: "failed", at: 5, message: "Google answered backendError (HTTP 500)" });
  h.renewal("th_2", {
    result: "refused_address",
    at: 7,
    message: "Google answered push.webhookUrlNotHttps (HTTP 400)",
  });
  expect(h.lastRenewalFailure("th_2")).toEqual({
    at: 7,
    result: "refused_address",
    message: "Google answered push.webhookUrlNotHttps (HTTP 400)",
  });
  const values = async (name: string) =>
    Object.fromEntries(
      (await registry.getSingleMetric(name)!.get()).values.map((v) => [Object.values(v.labels)[0], v.value]),
    );
  expect(await values("calbridge_push_renewals_total")).toEqual({ opened: 0, refused_address: 1, failed: 1 });
  expect(await values("calbridge_push_channels")).toEqual({ confirmed: 1, unconfirmed: 0, suspect: 0, none: 1 });
  // A standby opens no channels: 0 in every state, not "none" for every calendar.
  leader = false;
  expect(await values("calbridge_push_channels")).toEqual({ confirmed: 0, unconfirmed: 0, suspect: 0, none: 0 });

  h.opened("th_2", { channelId: "c2", expiration: 1000 });
  h.renewal("th_2", { result: "opened" });
  expect(h.lastRenewalFailure("th_2")).toBeUndefined();
  expect(await values("calbridge_push_renewals_total")).toEqual({ opened: 1, refused_address: 1, failed: 1 });
});

// Delivers a webhook event to a running daemon's booking route, signed with the simulated world's secret as the
// booking service signs it.
import type { App } from "../../src/daemon/app.ts";
import { WORLD_WEBHOOK_SECRET } from "../../src/simulator/world.ts";
import { sign } from "../../src/webhooks/signature.ts";

/** POSTs `event` to the app's webhook route; answers the status and the parsed JSON body. */
export async function deliver(app: App, event: Record<string, unknown>): Promise<{ status: number; body: unknown }> {
  const body = JSON.stringify(event);
  const res = await fetch(`${app.http!.url}${app.config.webhooks.path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-service-signature": sign(body, WORLD_WEBHOOK_SECRET, Math.floor(Date.now() / 1000)),
    },
    body,
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, body: await res.json() };
}

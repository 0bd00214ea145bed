import { describe, expect, it } from "vitest";
import { SecretRegistry } from "../src/log.ts";
import { captureLog } from "./support/log-capture.ts";

describe("logger", () => {
  it("scrubs registered secret values wherever they appear in a line", () => {
    const registry = new SecretRegistry();
    registry.add("sk_live_supersecret");
    const log = captureLog("info", registry);
    log.logger.info({ url: "https://x/?key=sk_live_supersecret" }, "calling with sk_live_supersecret");
    log.logger.error(new Error("bad key sk_live_supersecret"), "boom");
    expect(log.raw.join("\n")).not.toContain("sk_live_supersecret");
    expect(log.raw[0]).toContain("[REDACTED]");
  });

  it("redacts known secret fields by path", () => {
    const log = captureLog("info", new SecretRegistry());
    log.logger.info({ booking: { api_key: "abcdefgh" }, authorization: "Bearer x" }, "config");
    expect(log.raw[0]).not.toContain("abcdefgh");
    expect(log.raw[0]).not.toContain("Bearer x");
  });
});

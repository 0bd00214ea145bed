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

  it("scrubs a secret holding another one whole, and a secret's JSON-escaped form", () => {
    const registry = new SecretRegistry();
    registry.add("abc123");
    registry.add("abc123-and-more");
    registry.add('pa"ss\\word');
    expect(registry.scrub("x abc123-and-more y abc123 z")).toBe("x [REDACTED] y [REDACTED] z");
    expect(registry.scrub(JSON.stringify({ msg: 'said pa"ss\\word' }))).toBe('{"msg":"said [REDACTED]"}');
  });

  it("keeps only the newest short-lived secrets", () => {
    const registry = new SecretRegistry();
    for (let i = 0; i < 300; i++) registry.addEphemeral(`ya29.token-${i}-abcdef`);
    expect(registry.size).toBe(256);
    expect(registry.scrub("ya29.token-299-abcdef")).toBe("[REDACTED]");
    expect(registry.scrub("ya29.token-0-abcdef")).toBe("ya29.token-0-abcdef");
  });

  it("redacts known secret fields by path", () => {
    const log = captureLog("info", new SecretRegistry());
    log.logger.info({ booking: { api_key: "abcdefgh" }, authorization: "Bearer x" }, "config");
    expect(log.raw[0]).not.toContain("abcdefgh");
    expect(log.raw[0]).not.toContain("Bearer x");
  });
});

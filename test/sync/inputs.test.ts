// Tests the digests links keep of the values an event shows: stable across versions, keyed by appointment and input.
import { describe, expect, it } from "vitest";
import { inputDigest } from "../../src/sync/inputs.ts";

describe("inputDigest", () => {
  it("is the digest earlier versions stored (a different one would rewrite every event once)", () => {
    // Value of the first implementation (createHash per digest).
    expect(inputDigest("apt_1", "customer_name", "Max Müller")).toBe("4N3VlgtruGf1woTv");
  });

  it("differs per appointment, input and value", () => {
    const digests = new Set([
      inputDigest("apt_1", "customer_name", "Max"),
      inputDigest("apt_2", "customer_name", "Max"),
      inputDigest("apt_1", "service_name", "Max"),
      inputDigest("apt_1", "customer_name", "Max "),
    ]);
    expect(digests.size).toBe(4);
  });
});

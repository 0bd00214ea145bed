// The one helper that hides credentials in a store URL before it is printed (doctor, authorize, connection errors).
import { describe, expect, it } from "vitest";
import { redactStoreUrl } from "../../src/store/store.ts";

describe("redactStoreUrl", () => {
  it.each([
    ["redis://calbridge:hunter2secret@127.0.0.1:6379", "redis://***@127.0.0.1:6379"],
    ["redis://:hunter2secret@redis:6379/0", "redis://***@redis:6379/0"],
    ["rediss://default:hunter2secret@cache.example:6380", "rediss://***@cache.example:6380"],
    // Characters a password may hold unencoded: no part of it is shown.
    ["redis://user:hun@ter2secret@redis:6379", "redis://***@redis:6379"],
    ["redis://user:hun/ter2secret@redis:6379", "redis://***@redis:6379"],
    ["redis://user:hun?ter2secret@redis:6379", "redis://***@redis:6379"],
    ["redis://user:hun#ter2secret@redis:6379", "redis://***@redis:6379"],
    ["redis://redis:6379?password=hunter2secret&db=1", "redis://redis:6379?password=***&db=1"],
    ["redis://redis:6379", "redis://redis:6379"],
    ["sqlite://./data/calbridge.sqlite", "sqlite://./data/calbridge.sqlite"],
    ["sqlite:///srv/a@b/calbridge.sqlite", "sqlite:///srv/a@b/calbridge.sqlite"],
  ])("%s", (url, shown) => {
    expect(redactStoreUrl(url)).toBe(shown);
    expect(redactStoreUrl(url)).not.toContain("ter2secret");
  });
});

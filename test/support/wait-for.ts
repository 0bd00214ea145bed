// Test support: polls a condition until it holds, failing with what was awaited. (Eighteen test files still carry a
// copy of their own of this; new ones take it from here.)
export async function waitFor(
  what: string,
  predicate: () => boolean | Promise<boolean>,
  timeoutMs = 15_000,
  everyMs = 25,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

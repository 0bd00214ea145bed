// Temporary folders of the suite (worlds' stores and key files, fuzzed configs): removed once their test passed, kept
// after a failure for a look (diagnostics.txt is written there).
import { rmSync } from "node:fs";
import { onTestFinished } from "vitest";

/** Call inside a test. */
export function removeWhenPassed(dir: string): void {
  onTestFinished((ctx) => {
    if (ctx.task.result?.state !== "fail") rmSync(dir, { recursive: true, force: true });
  });
}

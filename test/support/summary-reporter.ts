// Prints the closing line CI reads, `N passed, N failed`, and appends the counts to $CALBRIDGE_TEST_SUMMARY if set
// (so .ci/run can add up the unit and chaos suites into one last line).
import { appendFileSync } from "node:fs";
import type { Reporter, TestModule } from "vitest/node";

export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, errors: ReadonlyArray<unknown>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const mod of testModules) {
      for (const test of mod.children.allTests()) {
        const state = test.result().state;
        if (state === "passed") passed++;
        else if (state === "failed") failed++;
        else skipped++;
      }
      // A file that failed to load has no tests but is a failure all the same.
      if (mod.state() === "failed" && [...mod.children.allTests()].length === 0) failed++;
    }
    failed += errors.length;
    const line = `${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`;
    process.stdout.write(`\n${line}\n`);
    const file = process.env.CALBRIDGE_TEST_SUMMARY;
    if (file) appendFileSync(file, `${passed} ${failed} ${skipped}\n`);
  }
}

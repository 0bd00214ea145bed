import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/chaos/**", "node_modules/**"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    // vitest's default on a 2-core machine is one worker (cores - 1), which ran the files one after another (12.5
    // minutes); most of them wait on sockets, child processes and timers, not the CPU, so two share the machine.
    maxWorkers: 2,
    reporters: ["default", "./test/support/summary-reporter.ts"],
  },
});

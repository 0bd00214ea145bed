import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/chaos/**", "node_modules/**"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    // vitest's default on a 2-core machine is one worker (cores - 1), which ran the files one after another (12.5
    // minutes); most of them wait on sockets, child processes and timers, not the CPU, so three share the machine:
    // on the 2-core CI machine the whole run took 541 s with two workers and 428 s with three (1,419 tests, the same
    // passing), the files' own time growing only 14% (835 s to 955 s summed) from sharing the cores.
    maxWorkers: 3,
    reporters: ["default", "./test/support/summary-reporter.ts"],
  },
});

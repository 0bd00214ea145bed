import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/chaos/**/*.test.ts"],
    testTimeout: 180_000,
    hookTimeout: 60_000,
    pool: "forks",
    fileParallelism: false,
    reporters: ["default", "./test/support/summary-reporter.ts"],
  },
});

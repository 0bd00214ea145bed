// Test support, preloaded with `node --import`: the command line's modules load SLOW_LOAD_MS (default 1500) slower,
// as on a busy machine (where loading them took 2.5 s). Loading the store's module (the commands import it, the entry
// cli.ts does not) writes "slow-load: store.ts" to stderr, then blocks that long: a test sends its signal then.
import { writeSync } from "node:fs";
import { registerHooks } from "node:module";

const ms = Number(process.env.SLOW_LOAD_MS ?? 1500);
registerHooks({
  load(url, context, nextLoad) {
    if (url.endsWith("/src/store/store.ts")) {
      writeSync(2, "slow-load: store.ts\n");
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
    }
    return nextLoad(url, context);
  },
});

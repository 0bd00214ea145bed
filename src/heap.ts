// Owns how the process's JavaScript heap grows, set before anything else loads (the CLI imports this first).
// V8 grows the old generation after each full collection by a factor it derives from how fast collection is (up to
// 4x); a daemon that reads thousands of appointments at once then keeps a heap several times larger than what it holds
// alive. --heap-growing-percent=15 grows it by 15% instead: the cold 10,000-appointment reconciliation peaks at
// 146-147 MB of RSS instead of 153 (30%: 149-153) with its CPU unchanged within the noise (22 s), `npm run bench`;
// the long-running daemon collects a little more often and stays smaller.
// The flag is not allowed in NODE_OPTIONS, hence here; a value given to node on its command line wins.
import { setFlagsFromString } from "node:v8";

export const HEAP_GROWING_PERCENT = 15;

if (!process.execArgv.some((arg) => arg.startsWith("--heap-growing-percent"))) {
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
}

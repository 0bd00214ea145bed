// The reliability suite (`npm run test:chaos`): crashes, injected faults and bad input against the daemon, and, last,
// one check that no secret reached any log line written along the way. One file, so that the tests run in this order
// and share the collected logs. CHAOS_SEED=<n> repeats a run's random choices (the seed is printed first).
import { apiGarbageTests } from "./api-garbage.ts";
import { configFuzzTests } from "./config-fuzz.ts";
import { crashTests } from "./crash.ts";
import { faultTests } from "./faults.ts";
import { raceTests } from "./races.ts";
import { suiteSeed } from "./random.ts";
import { secretTests } from "./secrets.ts";
import { therapistTests } from "./therapists.ts";
import { webhookFuzzTests } from "./webhook-fuzz.ts";

const seed = suiteSeed();
console.log(`[chaos] seed ${seed} (CHAOS_SEED=${seed} repeats this run)`);

crashTests(seed);
faultTests(seed);
raceTests(seed);
therapistTests(seed);
webhookFuzzTests(seed);
configFuzzTests(seed);
apiGarbageTests(seed);
secretTests();

// Owns the `scale` section of `npm run bench`: runs the three benchmarks of what clinics feel on Google's quotas
// (idle cost per therapist, a new clinic's onboarding at 150 ms a Google answer, a daemon idle with 1,000 therapists)
// and shapes their figures as the `scale` key of the JSON output names them.
import { benchIdle } from "./scale-idle.ts";
import { benchOnboarding } from "./scale-onboarding.ts";
import { benchThousand } from "./scale-thousand.ts";

export interface ScaleFigures {
  idle_google_requests_per_therapist_day: {
    push: number;
    poll_only: number;
    /** Real ms from Google's notification to the booking service showing a therapist's move. */
    change_via_push_ms: number;
    /** Simulated minutes until the safety poll found a move whose notification was lost. */
    unannounced_change_after_min: number;
    therapists: number;
    days: number;
  };
  cold_onboarding: Record<string, number | string>;
  idle_1000_therapists: Record<string, number | string>;
}

/** Sizes: the by default; `quick` shrinks them (not the reference figures). */
export async function benchScale(opts: { quick?: boolean } = {}): Promise<ScaleFigures> {
  const idle = await benchIdle(opts.quick ? { days: 1 } : {});
  const onboarding = await benchOnboarding(opts.quick ? { appointments: 1_000, therapists: 10 } : {});
  const thousand = await benchThousand(opts.quick ? { therapists: 200, measureMs: 10_000 } : { measureMs: 30_000 });
  return {
    idle_google_requests_per_therapist_day: {
      push: idle.push.perTherapistDay,
      poll_only: idle.poll_only.perTherapistDay,
      change_via_push_ms: idle.push.changeViaPushMs ?? Number.NaN,
      unannounced_change_after_min: idle.push.unannouncedChangeAfterMin ?? Number.NaN,
      therapists: idle.therapists,
      days: idle.days,
    },
    cold_onboarding: onboarding,
    idle_1000_therapists: thousand,
  };
}

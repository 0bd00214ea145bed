// Seeded randomness for the chaos suite: the same seed gives the same faults, kill moments and fuzz inputs, and the
// seed is printed by the caller so a failing run can be repeated.

export interface Random {
  readonly seed: number;
  next(): number;
  int(n: number): number;
  pick<T>(xs: readonly T[]): T;
  chance(p: number): boolean;
  text(maxLength: number, alphabet?: string): string;
  bytes(n: number): Buffer;
}

const PRINTABLE = " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";

/** mulberry32 */
export function random(seed: number): Random {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return {
    seed,
    next,
    int,
    pick: (xs) => xs[int(xs.length)]!,
    chance: (p) => next() < p,
    text: (max, alphabet = PRINTABLE) =>
      Array.from({ length: int(max + 1) }, () => alphabet[int(alphabet.length)]).join(""),
    bytes: (n) => Buffer.from(Array.from({ length: n }, () => int(256))),
  };
}

/** The suite's seed: CHAOS_SEED when set (to replay a run), else a new one. */
export function suiteSeed(): number {
  const fromEnv = Number(process.env.CHAOS_SEED);
  return Number.isInteger(fromEnv) && fromEnv > 0 ? fromEnv : 1 + Math.floor(Math.random() * 2 ** 31);
}

// Owns the simulator's deterministic randomness (a seeded PRNG), the stable hash used for list order, and sample names.

/** mulberry32: small, fast, good enough for simulated data; same seed, same sequence. */
export class Rng {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0 || 0x9e3779b9;
  }

  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError("pick from an empty list");
    return items[Math.floor(this.next() * items.length)]!;
  }

  /** Lowercase base-36 characters. */
  token(length: number): string {
    let s = "";
    while (s.length < length) s += Math.floor(this.next() * 36).toString(36);
    return s;
  }
}

/** FNV-1a, 32 bit: a stable order that has nothing to do with time. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export const FIRST_NAMES = [
  "Mia",
  "Noah",
  "Emma",
  "Liam",
  "Hannah",
  "Elias",
  "Lena",
  "Felix",
  "Sofia",
  "Jonas",
  "Clara",
  "Paul",
  "Marie",
  "Leon",
  "Ida",
  "Ben",
  "Lea",
  "Finn",
  "Anna",
  "Theo",
] as const;

export const LAST_NAMES = [
  "Müller",
  "Schmidt",
  "Schneider",
  "Fischer",
  "Weber",
  "Meyer",
  "Wagner",
  "Becker",
  "Hoffmann",
  "Koch",
  "Richter",
  "Klein",
  "Wolf",
  "Neumann",
  "Schwarz",
  "Braun",
  "Zimmermann",
  "Krüger",
  "Hartmann",
  "Lange",
] as const;

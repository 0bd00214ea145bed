// Owns a bounded memory of ids seen lately: at least the last `size` ids added, at most twice that. Two generations
// of Sets, the older dropped whole when the newer fills: evicting one id at a time from the front of a Set
// (`delete(values().next().value)`) looked O(1) but is not in V8, whose ordered hash table leaves deleted slots in
// place until it rehashes, so each `values().next()` walked over all of them (a fifth of the webhook processor's CPU).
export class RecentIds {
  readonly #size: number;
  #newer = new Set<string>();
  #older = new Set<string>();

  constructor(size: number) {
    if (!(Number.isInteger(size) && size > 0)) throw new RangeError(`size must be a positive integer, got ${size}`);
    this.#size = size;
  }

  has(id: string): boolean {
    return this.#newer.has(id) || this.#older.has(id);
  }

  add(id: string): void {
    this.#newer.add(id);
    if (this.#newer.size >= this.#size) {
      this.#older = this.#newer;
      this.#newer = new Set();
    }
  }
}

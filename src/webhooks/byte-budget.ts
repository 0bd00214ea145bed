// Owns the memory budget of request bodies in flight: one count of bytes held across every request being read, so
// hundreds of concurrent uploads cannot together exhaust the process, whatever each one's own limit.

export class ByteBudget {
  readonly limit: number;
  #used = 0;

  constructor(limit: number) {
    if (!Number.isInteger(limit) || limit <= 0) throw new Error(`ByteBudget: limit ${limit} is not a positive integer`);
    this.limit = limit;
  }

  /** Bytes currently reserved. */
  get used(): number {
    return this.#used;
  }

  /** Reserves `bytes` and answers true, or answers false (reserving nothing) when they do not fit. */
  tryReserve(bytes: number): boolean {
    if (this.#used + bytes > this.limit) return false;
    this.#used += bytes;
    return true;
  }

  release(bytes: number): void {
    this.#used = Math.max(0, this.#used - bytes);
  }
}

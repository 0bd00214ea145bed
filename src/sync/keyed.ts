// Owns per-key serialisation: work for one appointment never runs twice at once, and runs in arrival order.

export class KeyedSerial {
  readonly #tails = new Map<string, Promise<unknown>>();

  /** Runs `fn` after every earlier task of the same key has settled. */
  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    const tail = next.catch(() => {});
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return next;
  }

  get active(): number {
    return this.#tails.size;
  }
}

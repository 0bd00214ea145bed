// Owns one priority lane of the work queue: ready keys kept per group (a therapist) and taken round-robin over the
// groups, so one therapist's thousands of keys (a backfill) do not hold up another's few, and a group at its cap of
// runs is passed over until one of its runs finishes.

export class FairLane {
  /** Keys per group, oldest first; positions may be stale (the queue skips keys no longer ready in this lane). */
  readonly #keys = new Map<string, string[]>();
  /** Groups in turn order; the next turn goes to `#order[#turn]`. */
  #order: string[] = [];
  #turn = 0;

  push(group: string, key: string): void {
    let keys = this.#keys.get(group);
    if (!keys) {
      keys = [];
      this.#keys.set(group, keys);
      this.#order.push(group);
    }
    keys.push(key);
  }

  get empty(): boolean {
    return this.#order.length === 0;
  }

  /**
   * The next key, taking groups in turn: skips groups `full` says may not start another run, and keys `ready` rejects
   * (stale positions, dropped for good). A group's turn passes once it gave a key.
   */
  take(full: (group: string) => boolean, ready: (key: string) => boolean): string | undefined {
    for (let tried = 0; tried < this.#order.length; ) {
      if (this.#turn >= this.#order.length) this.#turn = 0;
      const group = this.#order[this.#turn]!;
      const keys = this.#keys.get(group)!;
      if (!full(group)) {
        while (keys.length > 0) {
          const key = keys.shift()!;
          if (ready(key)) {
            if (keys.length === 0) this.#drop(group);
            else this.#turn++;
            return key;
          }
        }
      }
      if (keys.length === 0) {
        this.#drop(group); // the turn index now points at the next group already
        continue;
      }
      this.#turn++;
      tried++;
    }
    return undefined;
  }

  clear(): void {
    this.#keys.clear();
    this.#order = [];
    this.#turn = 0;
  }

  #drop(group: string): void {
    this.#keys.delete(group);
    const i = this.#order.indexOf(group);
    this.#order.splice(i, 1);
    if (i < this.#turn) this.#turn--;
  }
}

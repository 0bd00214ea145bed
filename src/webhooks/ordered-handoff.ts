// Owns in-order hand-off: work numbered when it starts (a ticket) is passed to listeners in ticket order, even when
// it finishes out of order (two inbox writes racing), so consumers see deliveries in order of arrival.

export class OrderedHandoff<T> {
  readonly #listeners = new Set<(value: T) => void>();
  /** Finished tickets waiting for an earlier one; null: finished with nothing to hand over. */
  readonly #settled = new Map<number, T | null>();
  #waiters: { ticket: number; resolve: () => void }[] = [];
  #nextTicket = 0;
  #nextOut = 0;

  /** Takes the next ticket; every ticket must be settled exactly once. */
  ticket(): number {
    return this.#nextTicket++;
  }

  subscribe(listener: (value: T) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  settle(ticket: number, value: T | null): void {
    if (ticket === this.#nextOut) {
      // The usual case, work finishing in the order it started: handed over without waiting in the map.
      this.#nextOut++;
      this.#handOver(value);
    } else this.#settled.set(ticket, value);
    while (this.#settled.size > 0 && this.#settled.has(this.#nextOut)) {
      const next = this.#settled.get(this.#nextOut);
      this.#settled.delete(this.#nextOut);
      this.#nextOut++;
      this.#handOver(next);
    }
    if (this.#waiters.length === 0) return;
    const due = this.#waiters.filter((w) => w.ticket <= this.#nextOut);
    this.#waiters = this.#waiters.filter((w) => w.ticket > this.#nextOut);
    for (const waiter of due) waiter.resolve();
  }

  #handOver(value: T | null | undefined): void {
    if (value === null || value === undefined) return;
    for (const listener of this.#listeners) {
      try {
        listener(value);
      } catch {
        // A listener's failure must not fail the work that produced the value.
      }
    }
  }

  /** Resolves once every ticket taken before this call has been settled and handed over. */
  flushed(): Promise<void> {
    const ticket = this.#nextTicket;
    if (this.#nextOut >= ticket) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ ticket, resolve }));
  }
}

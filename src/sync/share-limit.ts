// Owns the limits of calbridge's guards: how many of a count "this share" allows, as a whole number, for the
// mass-deletion guard (sync.max_delete_ratio) and the write-back guard (sync.writeback_guard.max_ratio). More than it
// is held.

/**
 * The most of `count` that is not more than `ratio` of it, and at least `floor`. Math.floor(ratio × count) fell one
 * short wherever the product is whole but its binary floating point is not (0.7 × 90 is 62.99999999999999, 0.58 × 50
 * is 28.999999999999996): 63 of 90 events, exactly 70%, was held. n / count is compared with the ratio instead, both
 * the nearest doubles to the decimals they stand for, so a share the configuration spells out exactly is met exactly.
 */
export function shareLimit(ratio: number, count: number, floor: number): number {
  if (!(count > 0) || !(ratio > 0)) return floor;
  let n = Math.floor(ratio * count);
  while ((n + 1) / count <= ratio) n++;
  while (n > 0 && n / count > ratio) n--;
  return Math.max(floor, n);
}

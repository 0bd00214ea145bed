// Owns how many calendars are read in full at once at a start (each calendar's first poll, the first
// reconciliation's full listings).

/**
 * Calendars read in full at once at a start (first polls, the first reconciliation's listings). Google's default
 * project quota (10,000 requests a minute, ~170 a second) is kept busy by ~17 requests in flight at a 100 ms round
 * trip; more at once only wait in the quota gate, each holding its request and answer in memory. With 1,000
 * calendars read all at once (2,000 reads), the daemon's heap peaked at ~115 MB and the pages of that peak stayed
 * resident: ~240 MB of RSS when idle, for ~45 MB of live heap; 16 at once: a ~75 MB peak and ~195 MB of RSS.
 */
export const CALENDAR_READS_AT_ONCE = 16;

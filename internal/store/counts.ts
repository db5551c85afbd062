// Counts in SQL that stay safe integers: whatever an agent reports, a count reads back within 2^53-1.

/** The largest count stored or shown: Number.MAX_SAFE_INTEGER, as SQL. */
const MAX_COUNT = '9007199254740991';

/** `expression` (a count) as a safe integer, also when the database holds a value out of that range. */
export function safeCount(expression: string): string {
  return `max(0, min(${expression}, ${MAX_COUNT}))`;
}

/** A sum of counts that cannot overflow: total() is a float, cut to a safe integer. */
export function safeSum(column: string): string {
  return `CAST(min(total(${column}), ${MAX_COUNT}) AS INTEGER)`;
}

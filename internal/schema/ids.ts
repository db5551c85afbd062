// Ids: whole numbers from 1 that JavaScript holds exactly. Written once here, for every place that reads one: a path,
// a query, a body, a cursor, a token, a kernel table's name, a file's name.

/** An id's digits, for a pattern that holds one among other text: at most 16, no leading zero. */
export const ID_DIGITS = '[1-9][0-9]{0,15}';

/** Text that is an id and nothing else (still to be checked to be a safe integer: see `idOf`). */
const ID_TEXT = new RegExp(`^${ID_DIGITS}$`);

/** An id's range, for an integer schema or query parameter. */
export const ID_RANGE = { min: 1, max: Number.MAX_SAFE_INTEGER } as const;

/** The id `text` spells, or null when it spells none. */
export function idOf(text: string): number | null {
  if (!ID_TEXT.test(text)) return null;
  const id = Number(text);
  return Number.isSafeInteger(id) ? id : null;
}

// Recognising SQLite constraint failures, so the store can turn them into API errors.

export function isUniqueViolation(error: unknown): boolean {
  return error instanceof Error && /UNIQUE constraint failed/.test(error.message);
}

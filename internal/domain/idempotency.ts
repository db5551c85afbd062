// An Idempotency-Key's record, as the store keeps it and the API replays it.

/** The status of a key whose request committed its change and whose answer is not (yet) kept. */
export const ANSWER_PENDING = 0;

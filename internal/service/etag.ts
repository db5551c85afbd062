// ETags from row versions, and If-Match checks that stop lost updates between two admins: the service's, which
// compares versions; the API writes the tag in its answers.

import { DomainError } from '../errors/errors.ts';

export function etagOf(version: number): string {
  return `"${version}"`;
}

/**
 * Passes when there is no If-Match, when it is `*`, or when one of its tags names
 * `version`. Throws `precondition_failed` (carrying the current ETag) otherwise.
 * The comparison is strong (RFC 9110, 13.1.1): a weak tag (`W/"3"`) never matches.
 */
export function checkIfMatch(ifMatch: string | undefined, version: number): void {
  checkIfMatchTag(ifMatch, etagOf(version));
}

/** As `checkIfMatch`, for a resource whose ETag is not a row version. */
export function checkIfMatchTag(ifMatch: string | undefined, current: string): void {
  if (ifMatch === undefined) return;
  const tags = ifMatch.split(',').map((tag) => tag.trim());
  if (tags.includes('*') || tags.includes(current)) return;
  throw new DomainError('precondition_failed', `the resource has changed; its current ETag is ${current}`, {
    etag: current,
  });
}

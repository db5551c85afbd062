// How a rule's new clients are spread over its targets, as arithmetic both paths share: the relay's picker
// (relay/targets.ts) chooses by it per connection, the kernel's maps (kernel/ruleset.ts) are filled by it, so a rule
// spreads alike on either path.

/** A target that may take new clients: its place among the rule's targets, and its weight (1 without weights). */
export interface Candidate {
  index: number;
  weight: number;
}

/**
 * FNV-1a over a string, then MurmurHash3's finaliser: FNV alone leaves keys that differ in their last character (a
 * candidate's index) a multiple of its prime apart, which would let one candidate win nearly every key.
 */
function hash32(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  return hash >>> 0;
}

/**
 * Which of `candidates` (target indexes, each with its weight) owns `key` by weighted rendezvous hashing: each
 * candidate scores the key, the highest wins. Taking a candidate out moves only the keys it owned, spread over the
 * others by weight; every other key keeps its owner. Null when there is no candidate.
 */
export function rendezvousOwner(key: string, candidates: readonly Candidate[]): number | null {
  let best: number | null = null;
  let bestScore = -Infinity;
  for (const { index, weight } of candidates) {
    const unit = (hash32(`${key}|${index}`) + 0.5) / 2 ** 32;
    const score = weight / -Math.log(unit);
    if (score > bestScore) {
      bestScore = score;
      best = index;
    }
  }
  return best;
}

/** How many buckets the kernel hashes client addresses into for source_hash (see bucketOwners). */
export const SOURCE_BUCKETS = 256;

/**
 * The target each source_hash bucket sends its clients to, over the targets up: the kernel's map, bucket by bucket.
 * Kept by the candidates it was worked out for: every table write needs it for every source_hash rule, and rules
 * share few sets of candidates (indexes and weights, not addresses).
 */
export function bucketOwners(candidates: readonly Candidate[]): readonly number[] {
  const key = candidates.map(({ index, weight }) => `${index}:${weight}`).join(',');
  let owners = ownersBySet.get(key);
  if (!owners) {
    owners = Array.from({ length: SOURCE_BUCKETS }, (_, bucket) => rendezvousOwner(`bucket${bucket}`, candidates)!);
    if (ownersBySet.size >= OWNER_SETS_KEPT) ownersBySet.clear();
    ownersBySet.set(key, owners);
  }
  return owners;
}

const OWNER_SETS_KEPT = 1024;
const ownersBySet = new Map<string, readonly number[]>();

export function totalWeight(up: readonly { weight: number }[]): number {
  return up.reduce((sum, { weight }) => sum + weight, 0);
}

/**
 * The target whose share of the weighted cycle holds slot `n` (taken modulo the cycle): with weights 3 and 1, slots
 * 0-2 are the first's and 3 the second's. The kernel's numgen map is these spans.
 */
export function slotOwner(up: readonly Candidate[], n: number): number {
  let slot = n % totalWeight(up);
  for (const { index, weight } of up) {
    if (slot < weight) return index;
    slot -= weight;
  }
  return up[up.length - 1]!.index;
}

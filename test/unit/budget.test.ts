import assert from 'node:assert/strict';
import { test } from 'node:test';
import { rateLimitHeaders, WriteBudget } from '../../internal/auth/budget.ts';

function budgetAt(start = 1_000_000) {
  let now = start;
  return { budget: new WriteBudget(() => now), advance: (ms: number) => (now += ms) };
}

test('a user spends their writes of the minute, then is refused until the window starts over', () => {
  const { budget, advance } = budgetAt();
  const spent = [1, 2, 3].map(() => budget.spend(7, 3).allowed);
  assert.deepEqual(spent, [true, true, true]);
  const refused = budget.spend(7, 3);
  assert.deepEqual([refused.allowed, refused.remaining, refused.resetSeconds], [false, 0, 60]);
  advance(59_000);
  assert.equal(budget.spend(7, 3).allowed, false);
  advance(1000);
  assert.deepEqual([budget.spend(7, 3).allowed, budget.peek(7, 3).remaining], [true, 2]);
});

test("peeking spends nothing, and each user's budget is their own", () => {
  const { budget } = budgetAt();
  for (let i = 0; i < 5; i++) budget.peek(1, 2);
  assert.equal(budget.spend(1, 2).remaining, 1);
  assert.equal(budget.spend(2, 2).remaining, 1);
});

test('a limit of 0 is no limit, and sends no pacing headers', () => {
  const { budget } = budgetAt();
  for (let i = 0; i < 1000; i++) assert.ok(budget.spend(1, 0).allowed);
  assert.deepEqual(rateLimitHeaders(budget.peek(1, 0)), {});
});

test('the pacing headers say the policy and what is left of the window', () => {
  const { budget, advance } = budgetAt();
  budget.spend(1, 10);
  advance(15_000);
  assert.deepEqual(rateLimitHeaders(budget.peek(1, 10)), {
    'RateLimit-Policy': '"writes";q=10;w=60',
    RateLimit: '"writes";r=9;t=45',
  });
});

test('sweeping forgets the windows that ended, and no other', () => {
  const { budget, advance } = budgetAt();
  budget.spend(1, 5);
  advance(30_000);
  budget.spend(2, 5);
  advance(30_000);
  budget.sweep();
  assert.equal(budget.peek(1, 5).remaining, 5, "user 1's window ended");
  assert.equal(budget.peek(2, 5).remaining, 4, "user 2's goes on");
});

// allow_hours on a zone's wall clock (domain/hours.ts): weekdays, windows past midnight, the end of the day, and
// daylight saving's two days a year, in zones that have it; and the gate that refuses clients outside.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allowedAt, type AllowHours } from '../../internal/domain/hours.ts';
import { controlDefaults as NO_CONTROLS } from '../../internal/domain/rules.ts';
import { Gate } from '../../internal/relay/gate.ts';

const at = (iso: string) => Date.parse(iso);
const cases: [string, AllowHours, string, boolean][] = [];
const office: AllowHours = {
  zone: 'Europe/Berlin',
  windows: [{ days: ['mon', 'tue', 'wed', 'thu', 'fri'], from: '08:00', to: '18:00' }],
};
cases.push(
  ['Berlin office hours, winter: Monday 08:30 CET', office, '2026-01-05T07:30:00Z', true],
  ['Berlin office hours, winter: Monday 07:59 CET', office, '2026-01-05T06:59:00Z', false],
  ['Berlin office hours, summer: Monday 08:30 CEST', office, '2026-07-06T06:30:00Z', true],
  ['Berlin office hours, summer: Monday 18:30 CEST (16:30 UTC)', office, '2026-07-06T16:30:00Z', false],
  ['Berlin office hours: Saturday noon', office, '2026-07-04T10:00:00Z', false],
);
const night: AllowHours = { zone: 'UTC', windows: [{ days: ['fri'], from: '22:00', to: '06:00' }] };
cases.push(
  ['past midnight: Friday 23:00', night, '2026-12-04T23:00:00Z', true],
  ['past midnight: Saturday 05:59', night, '2026-12-05T05:59:00Z', true],
  ['past midnight: Saturday 06:00', night, '2026-12-05T06:00:00Z', false],
  ['past midnight: Friday 05:00 (Thursday has no window)', night, '2026-12-04T05:00:00Z', false],
  ['past midnight: Thursday 23:00', night, '2026-12-03T23:00:00Z', false],
);
const evening: AllowHours = { zone: 'UTC', windows: [{ days: ['sun'], from: '20:00', to: '24:00' }] };
cases.push(
  ["24:00 is the day's end: Sunday 23:59", evening, '2026-12-06T23:59:00Z', true],
  ["24:00 is the day's end: Monday 00:00", evening, '2026-12-07T00:00:00Z', false],
);
const skipped: AllowHours = { zone: 'America/New_York', windows: [{ days: ['sun'], from: '02:00', to: '03:00' }] };
const repeated: AllowHours = { zone: 'America/New_York', windows: [{ days: ['sun'], from: '01:00', to: '02:00' }] };
cases.push(
  ['spring forward, New York: 01:59 EST is before the hour skipped', skipped, '2026-03-08T06:59:00Z', false],
  ['spring forward, New York: 03:00 EDT comes right after: the hour skipped', skipped, '2026-03-08T07:00:00Z', false],
  ['fall back, New York: 01:30 EDT, the first time', repeated, '2026-11-01T05:30:00Z', true],
  ['fall back, New York: 01:30 EST, the second time', repeated, '2026-11-01T06:30:00Z', true],
  ['fall back, New York: 02:00 EST', repeated, '2026-11-01T07:00:00Z', false],
);

for (const [what, hours, when, allowed] of cases)
  test(`allow_hours: ${what}`, () => assert.equal(allowedAt(hours, at(when)), allowed));

test("a rule's gate refuses clients outside its hours and counts them; in them, it takes them", () => {
  const now = new Date();
  const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
  const today = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'][now.getUTCDay()] as 'mon';
  const open: AllowHours = { zone: 'UTC', windows: [{ days: [today], from: '00:00', to: '24:00' }] };
  // A window of one minute two hours from now (which may fall tomorrow: then it starts on no day of today's).
  const later = hhmm(now.getTime() + 2 * 3_600_000);
  const closed: AllowHours = {
    zone: 'UTC',
    windows: [{ days: [today], from: later, to: hhmm(now.getTime() + 7_260_000) }],
  };
  const gate = new Gate({ ...NO_CONTROLS, quota: null, allow_hours: open });
  assert.equal(gate.admit('192.0.2.1'), true);
  gate.update({ ...NO_CONTROLS, quota: null, allow_hours: closed });
  assert.deepEqual([gate.admit('192.0.2.2'), gate.admit('192.0.2.3')], [false, false]);
  assert.equal(gate.drainRefused(), 2);
});

// The console's one line for a rule's allow_hours (web/src/hours.ts): read and written back alike, and text it
// cannot read refused with what is wrong, before anything is sent.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hoursText, parseHours } from '../../web/src/hours.ts';

test("the console reads a rule's allow_hours from one line and writes it back the same", () => {
  const hours = parseHours('Europe/Berlin: mon-fri 08:00-18:00; sat,sun 10:00-14:00; fri-mon 22:00-06:00');
  assert.deepEqual(hours, {
    zone: 'Europe/Berlin',
    windows: [
      { days: ['mon', 'tue', 'wed', 'thu', 'fri'], from: '08:00', to: '18:00' },
      { days: ['sat', 'sun'], from: '10:00', to: '14:00' },
      { days: ['mon', 'fri', 'sat', 'sun'], from: '22:00', to: '06:00' },
    ],
  });
  assert.deepEqual(parseHours(hoursText(hours)), hours);
  assert.equal(parseHours('  '), null);
  assert.equal(hoursText(null), '');
  for (const [text, why] of [
    ['mon-fri 08:00-18:00', /start with the time zone/],
    ['UTC: someday 08:00-18:00', /"someday" is no day/],
    ['UTC: mon 8-18', /is not "DAYS HH:MM-HH:MM"/],
  ] as const)
    assert.throws(() => parseHours(text), why, text);
});

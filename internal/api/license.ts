// The license, read only: what it allows and whether it is in force.

import { nullableTimestamp, record } from './common.ts';
import { type Ctx, ok, operation, operations } from './route.ts';

const licenseSchema = record('License', {
  status: {
    type: 'string',
    enum: ['none', 'valid', 'expired', 'invalid'],
    description: 'none: no license file, the free edition.',
  },
  valid: { type: 'boolean' },
  problem: { type: ['string', 'null'], description: 'Why the license is not in force.' },
  edition: { type: 'string' },
  licensee: { type: ['string', 'null'] },
  license_id: { type: ['string', 'null'] },
  limits: {
    type: 'object',
    required: ['max_nodes'],
    properties: { max_nodes: { type: ['integer', 'null'], description: 'null: no limit.' } },
    additionalProperties: false,
  },
  issued_at: nullableTimestamp,
  expires_at: nullableTimestamp,
});

export const licenseOperations = operations({
  getLicense: operation({
    summary: 'Show the license and the limits in force',
    description:
      'Without a valid license (none, expired or tampered) the master runs as the free edition and says why here.',
    responses: { 200: { description: 'The license', schema: licenseSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      return ok(ctx.app.licenseView());
    },
  }),
});

// A rollout's states, and each of its nodes'.

export const rolloutStates = ['running', 'paused', 'halted', 'aborted', 'done'] as const;
export type RolloutState = (typeof rolloutStates)[number];
export const rolloutNodeStates = ['waiting', 'upgrading', 'passed', 'failed'] as const;
export type RolloutNodeState = (typeof rolloutNodeStates)[number];

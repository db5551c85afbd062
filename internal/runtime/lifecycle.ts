// Where the master is in its life, shared by the parts that serve: what they may take on.

export interface Lifecycle {
  /** Until the store is open, the first admin exists and every handler is wired: requests get 503 `starting`. */
  starting: boolean;
  /** Once the master is shutting down: new work gets 503, work in progress finishes. */
  draining: boolean;
}

// Structured logging: one JSON object per line on a stream (stdout under systemd).

export type Fields = Record<string, unknown>;

export interface Logger {
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
}

export function createLogger(write: (line: string) => void, now: () => number = Date.now): Logger {
  const emit =
    (level: string) =>
    (msg: string, fields: Fields = {}) => {
      write(`${JSON.stringify({ time: new Date(now()).toISOString(), level, msg, ...fields })}\n`);
    };
  return { info: emit('info'), warn: emit('warn'), error: emit('error') };
}

export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

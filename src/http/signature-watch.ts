import type { Clock } from '../clock';
import { initialAlarmState, recordSignatureOutcome } from '../domain/signature-alarm';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';

/** Watches the run of signature rejections; see domain/signature-alarm for when it speaks up. */
export interface SignatureWatch {
  rejected(): void;
  accepted(): void;
}

/**
 * Keeps the run of consecutive rejected signatures in the gauge
 * `consig_webhook_consecutive_invalid_signatures`, and logs an error when the run reaches the point
 * where the service deactivates the callback (interface §6.1, item 4), naming the likely cause.
 */
export function watchSignatures(deps: {
  metrics: Metrics;
  logger: Logger;
  clock: Clock;
  /** SIGNATURE_HEADER, named in the error as a likely cause. */
  signatureHeader: string;
}): SignatureWatch {
  let state = initialAlarmState;
  return {
    rejected() {
      const step = recordSignatureOutcome(state, true, deps.clock.now().getTime());
      state = step.state;
      deps.metrics.signatureAlarm.set(state.consecutive);
      if (!step.alarm) return;
      deps.logger.error(
        {
          consecutive: state.consecutive,
          since: new Date(state.firstAt ?? 0).toISOString(),
          header: deps.signatureHeader,
        },
        `${state.consecutive} consecutive webhook deliveries rejected for invalid signature: the service deactivates the callback after 3 consecutive failed deliveries (interface §6.1). Check that WEBHOOK_SECRETS holds the secret registered with the service and SIGNATURE_HEADER its header name, then re-register or re-activate the callback.`,
      );
    },
    accepted() {
      if (state.consecutive === 0) return;
      state = initialAlarmState;
      deps.metrics.signatureAlarm.set(0);
    },
  };
}

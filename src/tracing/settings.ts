import type { Traces } from '../domain/tracing';

/** What tracing is started with (config.ts's `tracing`, plus what the composition root knows). */
export interface TracingSettings {
  /** OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL. @default 'http/protobuf' */
  readonly protocol: 'http/protobuf' | 'http/json';
  /** OTEL_SERVICE_NAME. @default 'consig-receiver' */
  readonly serviceName: string;
  /** The package's version (resource attribute service.version). */
  readonly serviceVersion: string;
  /** Cluster mode: REPLICA_ID (service.instance.id); null on SQLite alone. */
  readonly replicaId: string | null;
}

/** What the SDK tells the receiver: its rate-limited warnings and the spans it dropped. */
export interface TracingHooks {
  warn(fields: Record<string, unknown>, message: string): void;
  dropped(reason: 'queue_full' | 'export_failed', spans: number): void;
  /** Monotonic milliseconds (the warnings' interval). */
  monotonic(): number;
}

/** Tracing, started: the seams' {@link Traces}, and the flush at shutdown. */
export interface TracingHandle {
  readonly traces: Traces;
  /** Sends what is queued and stops the exporter, waiting at most 2 s (sdk.ts, SHUTDOWN_FLUSH_MS). */
  shutdown(): Promise<void>;
}

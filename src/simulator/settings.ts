import type { Logger } from '../logger';
import {
  type ChaosOptions,
  type RegistryOptions,
  type ResolvedChaos,
  type ResolvedRegistry,
  resolveChaos,
  resolveRegistry,
} from './options';

/** Registry settings as shown and changed at run time: `outcome` is a function, set at start only. */
export type RegistrySettings = Omit<ResolvedRegistry, 'outcome'>;

/** The settings the control API changes while the simulator runs (`/_sim/chaos`, `/_sim/registry`). */
export class Settings {
  constructor(
    private chaosNow: ResolvedChaos,
    private registryNow: ResolvedRegistry,
    private readonly logger: Logger,
  ) {}

  get chaos(): ResolvedChaos {
    return this.chaosNow;
  }

  get registry(): ResolvedRegistry {
    return this.registryNow;
  }

  registryShown(): RegistrySettings {
    const { outcome: _outcome, ...shown } = this.registryNow;
    return shown;
  }

  /** Merges `input` over the current chaos; a TypeError names an invalid value and changes nothing. */
  setChaos(input: ChaosOptions): ResolvedChaos {
    this.chaosNow = resolveChaos(input, this.chaosNow);
    this.logger.info({ chaos: this.chaosNow }, 'chaos settings changed');
    return this.chaosNow;
  }

  /** Like setChaos, for averbações created from now on; an `outcome` given here is ignored. */
  setRegistry(input: RegistryOptions): RegistrySettings {
    const { outcome: _ignored, ...rest } = input;
    this.registryNow = resolveRegistry(rest, this.registryNow);
    this.logger.info({ registry: this.registryShown() }, 'registry settings changed');
    return this.registryShown();
  }
}

// The component's entry point: the world's `log` import and its two exports.
import log from 'log';
import { exportPolicy } from '../sdk/index.js';
import * as binpack from './binpack.js';

export const { describe, allocate } = exportPolicy(binpack, log);

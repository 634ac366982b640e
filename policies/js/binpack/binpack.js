// binpack: fills the fullest node that still fits, so pods land on as few
// nodes as possible and whole nodes stay free for large jobs. Within a node, a
// multi-GPU exclusive request takes the smallest NVLink group that holds it; a
// shared request takes the GPUs with the least free memory that fits. A pod
// that fits nowhere now evicts the fewest pods of lower priority that make
// room. A DRA pod (ResourceClaims) takes its claims' candidates on the fullest
// node that holds them (it does not preempt). It reads no node label: exactly
// what the Rust binpack decides.
//
// Parameters (config.json, all optional): { "nvlink": "prefer", "preemption": true }
// `nvlink`: "prefer" (the default), "require" (only GPUs that are all NVLink
// peers of one another; else the pod waits) or "ignore"; the older
// "preferNvlink": true | false reads as "prefer" | "ignore". `preemption`:
// false leaves a pod that fits nowhere waiting.
import { Fit, info, placeEach } from '../sdk/index.js';

export function describe() {
  return info('binpack', '0.3.0', 'Fill the fullest node that fits first; fewest nodes touched', []);
}

export function allocate(snapshot) {
  return placeEach(snapshot, Fit.Tightest);
}

// binpack: fills the fullest node that still fits, so pods land on as few
// nodes as possible and whole nodes stay free for large jobs. Within a node, a
// multi-GPU exclusive request takes the smallest NVLink group that holds it; a
// shared request takes the GPUs with the least free memory that fits. It reads
// no node label, places GPUResource requests only (DRA pods get no decision,
// so they wait) and never preempts.
//
// Parameters (config.json, all optional): { "preferNvlink": true, "preemption": true }
// (`preemption` is accepted, as the Rust binpack reads it, but changes nothing yet).
import { Fit, info, placeEach } from '../sdk/index.js';

export function describe() {
  return info('binpack', '0.3.0', 'Fill the fullest node that fits first; fewest nodes touched', []);
}

export function allocate(snapshot) {
  return placeEach(snapshot, Fit.Tightest);
}

// binpack: fills the fullest node that still fits, so pods land on as few
// nodes as possible and whole nodes stay free for large jobs. Within a node, a
// multi-GPU exclusive request takes the smallest NVLink group that holds it; a
// shared request takes the GPUs with the least free memory that fits.
//
// Parameters (config.json, all optional): { "preferNvlink": true }
import { Fit, info, placeEach } from '../sdk/index.js';

export function describe() {
  return info('binpack', '0.2.0', 'Fill the fullest node that fits first; fewest nodes touched');
}

export function allocate(snapshot) {
  return placeEach(snapshot, Fit.Tightest);
}

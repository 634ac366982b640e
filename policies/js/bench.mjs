// Times `placeEach` natively (Node) on `large(nodes, pods)`, the Rust
// benchmark round built with the SDK's testing builders: nodes of 8 GPUs.
//
//   node bench.mjs [nodes=1000] [pods=1000] [runs=7]
//
// Prints, per NVLink mode, the first (cold) run and the median of the runs.
// Inside the component the same code runs interpreted by SpiderMonkey, far
// slower (README.md, "The engine and its limits").
import { Fit, placeEach } from './sdk/index.js';
import { large } from './sdk/testing.js';

const [nodes = 1000, pods = 1000, runs = 7] = process.argv.slice(2).map(Number);
const snap = large(nodes, pods);
for (const config of ['', '{"nvlink": "require"}']) {
  snap.config = config;
  const times = [];
  let decisions;
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    decisions = placeEach(snap, Fit.Tightest);
    times.push(performance.now() - start);
  }
  const first = times[0];
  times.sort((a, b) => a - b);
  const tags = {};
  for (const d of decisions) tags[d.tag] = (tags[d.tag] ?? 0) + 1;
  console.log(
    `placeEach, ${nodes} nodes x 8 GPUs, ${pods} pods, config ${JSON.stringify(config)}: first run ${first.toFixed(0)} ms, median of ${runs} ${times[runs >> 1].toFixed(0)} ms (${JSON.stringify(tags)})`,
  );
}

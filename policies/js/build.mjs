// Generates the contract's TypeScript declarations from wit/policy.wit into
// types/, and (unless --types-only) builds binpack into a component.
//
//   node build.mjs [--types-only] [--out FILE]
//
// Run through build.sh, which installs the pinned toolchain (package-lock.json)
// into a cache outside the clone and reuses a component built from the same
// sources. The component imports nothing but the contract's `log`: every
// optional engine feature (stdio, random, clocks, http, fetch-event) is off.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const wit = resolve(here, '../../wit');
const args = process.argv.slice(2);
const typesOnly = args.includes('--types-only');
const outIndex = args.indexOf('--out');
const out = outIndex >= 0 ? resolve(args[outIndex + 1]) : resolve(here, 'binpack_js.wasm');

// Types: jco's type generator, given the WIT source (its CLI cannot read
// paths under this Node version).
const bindgen = await import('@bytecodealliance/jco-transpile/component');
await bindgen.$init;
const files = bindgen.generateTypes('policy', {
  wit: { tag: 'source', val: readFileSync(join(wit, 'policy.wit'), 'utf8') },
  world: 'policy',
  guest: true,
  tlaCompat: false,
  features: { tag: 'list', val: [] },
});
for (const [name, bytes] of files) {
  const path = join(here, 'types', name);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, bytes);
}
if (typesOnly) process.exit(0);

const { componentize } = await import('@bytecodealliance/componentize-js');
const started = Date.now();
const { component, imports } = await componentize({
  sourcePath: join(here, 'binpack/component.js'),
  witPath: wit,
  worldName: 'policy',
  disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
});
const unexpected = imports.filter(([name]) => name !== 'log');
if (unexpected.length > 0) {
  console.error(`the component imports ${JSON.stringify(unexpected)}; only \`log\` is expected`);
  process.exit(1);
}
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, component);
console.error(`built ${out} (${component.length} bytes) in ${((Date.now() - started) / 1000).toFixed(1)} s`);

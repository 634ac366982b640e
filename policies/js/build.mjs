// Generates the contract's TypeScript declarations from wit/policy.wit into
// types/, and (unless --types-only) builds binpack into a component; or
// builds a policy of its own.
//
//   node build.mjs [--types-only] [--out FILE]
//   node build.mjs --policy DIR --stage ROOT --out FILE
//
// Run through build.sh, which installs the pinned toolchain (package-lock.json)
// into a cache outside the clone and reuses a component built from the same
// sources. The component imports nothing but the contract's `log`: every
// optional engine feature (stdio, random, clocks, http, fetch-event) is off.
//
// --policy: DIR/policy.js exports `describe()` and `allocate(snapshot)` and
// imports the SDK by its absolute path (…/policies/js/sdk/index.js), so the
// same modules run under Node. componentize-js reads modules from one
// directory tree, mapped to `/` inside the engine, and its engine does not
// resolve absolute specifiers there; build.sh has copied the SDK and the
// policy's modules to their absolute paths under ROOT, and the absolute
// specifiers in those copies are rewritten here as relative ones, so every
// import resolves to the module it names natively. The component's entry
// module (ROOT/component.js, the world's `log` and the two exports) is
// written here too.
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const wit = resolve(here, '../../wit');
const args = process.argv.slice(2);
const typesOnly = args.includes('--types-only');
const option = (name) => {
  const at = args.indexOf(name);
  return at >= 0 ? resolve(args[at + 1]) : undefined;
};
const out = option('--out') ?? resolve(here, 'binpack_js.wasm');
const policyDir = option('--policy');

function fail(message) {
  console.error(message);
  process.exit(1);
}

// Builds the module at `sourcePath` (with what it imports) into a component at `out`.
async function build(sourcePath) {
  const { componentize } = await import('@bytecodealliance/componentize-js');
  const started = Date.now();
  const { component, imports } = await componentize({
    sourcePath,
    witPath: wit,
    worldName: 'policy',
    disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
  });
  const unexpected = imports.filter(([name]) => name !== 'log');
  if (unexpected.length > 0) fail(`the component imports ${JSON.stringify(unexpected)}; only \`log\` is expected`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, component);
  console.error(`built ${out} (${component.length} bytes) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

// Rewrites, in every module under `stage`, each import of an absolute path
// as the relative specifier of the same path's copy under `stage`.
async function relativeImports(stage) {
  const { init, parse } = await import('es-module-lexer');
  await init;
  const modules = readdirSync(stage, { recursive: true }).filter((f) => /\.[cm]?js$/.test(f));
  for (const file of modules) {
    const path = join(stage, file);
    const source = readFileSync(path, 'utf8');
    const [imports] = parse(source, path);
    let rewritten = '';
    let at = 0;
    for (const { n: name, s: start, e: end, d: dynamic } of imports) {
      // Static imports and re-exports (d === -1) of a path: `s`…`e` is the specifier.
      if (dynamic !== -1 || name === undefined || !name.startsWith('/')) continue;
      let specifier = relative(dirname(path), join(stage, name));
      if (!specifier.startsWith('.')) specifier = `./${specifier}`;
      rewritten += source.slice(at, start) + specifier;
      at = end;
    }
    if (at > 0) writeFileSync(path, rewritten + source.slice(at));
  }
}

if (policyDir !== undefined) {
  const stage = option('--stage');
  if (stage === undefined) fail('build.mjs --policy DIR needs --stage ROOT (run it through build.sh --policy DIR)');
  const policyPath = join(policyDir, 'policy.js');
  if (!existsSync(policyPath)) {
    fail(
      `${policyPath}: no such file; a policy directory holds policy.js, the module that exports describe() and allocate(snapshot) (\`wasmgpu policy new NAME --lang js\` writes one)`,
    );
  }
  // Loaded natively first: a syntax error or a missing export is reported
  // here, in Node's words, rather than from inside the engine.
  let policy;
  try {
    policy = await import(pathToFileURL(policyPath).href);
  } catch (e) {
    fail(`${policyPath} does not load under Node: ${e && e.stack ? e.stack : e}`);
  }
  for (const name of ['describe', 'allocate']) {
    if (typeof policy[name] !== 'function') {
      fail(`${policyPath} exports no function \`${name}\`: a policy module exports describe() and allocate(snapshot)`);
    }
  }
  await relativeImports(stage);
  const entry = join(stage, 'component.js');
  const fromEntry = (path) => JSON.stringify(`./${relative(stage, join(stage, path))}`);
  writeFileSync(
    entry,
    [
      "// The component's entry point (written by build.mjs): the world's `log` import and the policy's exports.",
      "import log from 'log';",
      `import { exportPolicy } from ${fromEntry(join(here, 'sdk/index.js'))};`,
      `import * as policy from ${fromEntry(policyPath)};`,
      '',
      'export const { describe, allocate } = exportPolicy(policy, log);',
      '',
    ].join('\n'),
  );
  // componentize-js maps the working directory to `/` when the entry is below it.
  process.chdir(stage);
  await build(entry);
  process.exit(0);
}

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

await build(join(here, 'binpack/component.js'));

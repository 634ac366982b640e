// The starter `wasmgpu policy new NAME --lang js` writes (the templates in
// host/src/cli/policy_new/js): rendered into a temporary directory as the
// Rust side renders them, its tests pass against this SDK, and its README
// starts with the commands to run there.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = dirname(dirname(fileURLToPath(import.meta.url)));
const templates = join(here, '../../host/src/cli/policy_new/js');
const noTemplates = existsSync(templates) ? false : `no ${templates} (not a wasmgpu checkout)`;

// The placeholders filled in as the Rust side fills them.
function render(text, name = 'zone-first') {
  const ident = name.replaceAll('-', '_');
  const type = name
    .split('-')
    .map((part) => part.charAt(0).toUpperCase() + part.slice(1))
    .join('');
  return text
    .replaceAll('{{name}}', name)
    .replaceAll('{{Type}}', type)
    .replaceAll('{{ident}}', ident)
    .replaceAll('{{sdk}}', here)
    .replaceAll('{{wasm}}', `${ident}.wasm`);
}

// FILES: `TEMPLATE -> PATH-IN-STARTER`, one a line.
function listed() {
  return readFileSync(join(templates, 'FILES'), 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => line.split('->').map((part) => part.trim()));
}

test('FILES lists every template, and they use only the known placeholders', { skip: noTemplates }, () => {
  const files = listed();
  assert.deepEqual(
    files.map(([t]) => t).sort(),
    readdirSync(templates).filter((f) => f.endsWith('.tmpl')).sort(),
  );
  const known = new Set(['{{name}}', '{{Type}}', '{{ident}}', '{{sdk}}', '{{wasm}}']);
  for (const [template] of files) {
    const unknown = (readFileSync(join(templates, template), 'utf8').match(/\{\{\w+\}\}/g) ?? []).filter((p) => !known.has(p));
    assert.deepEqual(unknown, [], template);
  }
});

test('the README starts with the commands to run', { skip: noTemplates }, () => {
  const readme = render(readFileSync(join(templates, 'README.md.tmpl'), 'utf8'));
  const block = /```sh\n([\s\S]*?)```/.exec(readme)[1];
  const commands = block
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => line.split('#')[0].trim().split(/\s+/));
  assert.deepEqual(
    commands.slice(0, 4).map((c) => c.slice(0, 3)),
    [
      [`${here}/build.sh`, '--test-policy', '.'],
      [`${here}/build.sh`, '--policy', '.'],
      ['wasmgpu', 'policy', 'check'],
      ['wasmgpu', 'policy', 'run'],
    ],
  );
  assert.deepEqual(commands[1].slice(3), ['--out', 'zone_first.wasm']);
  assert.ok(commands.some((c) => c.slice(0, 3).join(' ') === 'wasmgpu policy publish'), 'no publish command');
});

test('its tests pass against this SDK, writing nothing', { skip: noTemplates }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'wasmgpu-starter-js-'));
  try {
    for (const [template, path] of listed()) writeFileSync(join(dir, path), render(readFileSync(join(templates, template), 'utf8')));
    // Without NODE_TEST_CONTEXT, which would make the inner `node --test`
    // report to this runner instead of printing its summary.
    const env = { ...process.env };
    delete env.NODE_TEST_CONTEXT;
    const done = spawnSync(join(here, 'build.sh'), ['--test-policy', dir], { encoding: 'utf8', env });
    assert.equal(done.status, 0, done.stdout + done.stderr);
    assert.match(done.stdout, /^# tests 6$/m);
    assert.match(done.stdout, /^# fail 0$/m);
    assert.deepEqual(readdirSync(dir).sort(), listed().map(([, path]) => path).sort());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// Part of the SDK: policy parameters. The config.json shipped with a policy
// arrives verbatim in `snapshot.config`; `parseConfig` reads it against the
// fields a policy declares, and `parsePlacementParams` reads the parameters
// `placeEach` understands exactly as the Rust SDK's `PlacementParams` does.

/** The error `fail` and `parseConfig` throw. */
export class PolicyError extends Error {
  constructor(message) {
    super(message);
    this.name = 'PolicyError';
  }
}

const PREFIX = 'invalid policy config.json: ';

const TYPES = ['boolean', 'number', 'integer', 'string', 'array', 'object'];
const SPEC_KEYS = ['default', 'type', 'min', 'max', 'values', 'nullable', 'description'];

// Rust's `char::is_whitespace` (Unicode White_Space), which `str::trim` uses:
// JavaScript's `trim` differs on U+0085 (not blank there) and U+FEFF (blank).
const BLANK = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;

/** Whether a config string is empty or all blanks (Rust's `trim().is_empty()`). */
export function blankConfig(config) {
  return BLANK.test(config);
}

/**
 * Parses the snapshot's config string against `fields`, a map from field
 * name to either a default value (its type is the default's: a boolean, a
 * number, a string, an array, an object) or a spec object:
 *
 *   { default, type, min, max, values, nullable, description }
 *
 * `type` is `'boolean'`, `'number'` (any JSON number, so `0` where a float is
 * expected is fine), `'integer'`, `'string'`, `'array'` or `'object'`; without
 * it, it is taken from `values` or `default`. `min` / `max` bound a number
 * (inclusive); `values` lists the only values allowed; `nullable` accepts
 * `null` (the field then reads `null`). A field without a default reads
 * `undefined` when absent.
 *
 * Empty (or all-blank) config gives the defaults. Otherwise it must be a JSON
 * object whose keys are field names, each once. Errors are `PolicyError`s
 * whose message starts `invalid policy config.json:` and names the field and
 * the fix (`fail` it, or put it in a `wait` reason).
 *
 *   parseConfig(snapshot.config, {
 *     preferNvlink: true,                                   // a default
 *     floorMib: { type: 'integer', default: 0, min: 0 },    // a spec
 *     mode: { values: ['pack', 'spread'], default: 'pack' },
 *   })
 */
export function parseConfig(config, fields, options = {}) {
  const specs = new Map();
  for (const [name, entry] of Object.entries(fields)) specs.set(name, fieldSpec(name, entry));
  const out = {};
  for (const [name, spec] of specs) out[name] = spec.default;
  if (blankConfig(config)) return out;
  let parsed;
  try {
    parsed = JSON.parse(config);
  } catch (e) {
    throw new PolicyError(`${PREFIX}${e.message}: write valid JSON, such as ${example(specs)}`);
  }
  const names = [...specs.keys()];
  if (Array.isArray(parsed) && options.positional) {
    // As serde reads a Rust struct: the fields in their declared order.
    if (parsed.length > names.length) {
      throw new PolicyError(
        `${PREFIX}a list gives the fields in order (${names.map(quote).join(', ')}), and this one has ${parsed.length} entries: give an object, such as ${example(specs)}`,
      );
    }
    parsed.forEach((value, k) => {
      out[names[k]] = checked(specs.get(names[k]), value);
    });
    return out;
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new PolicyError(
      `${PREFIX}expected a JSON object, got ${JSON.stringify(parsed)}: give one, such as ${example(specs)}`,
    );
  }
  const seen = new Set();
  for (const key of topLevelKeys(config)) {
    const spec = specs.get(key);
    if (spec === undefined) {
      const expected = names.length === 0 ? 'none (this policy takes no parameters)' : `one of ${names.map(quote).join(', ')}`;
      throw new PolicyError(`${PREFIX}unknown field ${quote(key)}, expected ${expected}: remove it or correct its name`);
    }
    if (seen.has(key)) {
      throw new PolicyError(`${PREFIX}duplicate field ${quote(key)}: give each field once`);
    }
    seen.add(key);
    out[key] = checked(spec, parsed[key]);
  }
  return out;
}

function quote(name) {
  return `\`${name}\``;
}

/** An example config of the fields' defaults, for error messages. */
function example(specs) {
  const shown = {};
  for (const [name, spec] of specs) if (spec.default !== undefined) shown[name] = spec.default;
  return JSON.stringify(shown);
}

function isSpec(entry) {
  if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) return false;
  const keys = Object.keys(entry);
  return keys.length > 0 && keys.every((k) => SPEC_KEYS.includes(k));
}

function typeOf(value) {
  if (Array.isArray(value)) return 'array';
  if (value === null) return undefined;
  const t = typeof value;
  return t === 'boolean' || t === 'number' || t === 'string' || t === 'object' ? t : undefined;
}

function fieldSpec(name, entry) {
  const spec = isSpec(entry) ? { ...entry } : { default: entry };
  if (spec.type === undefined) {
    spec.type = spec.values !== undefined && spec.values.length > 0 ? typeOf(spec.values[0]) : typeOf(spec.default);
  }
  if (!TYPES.includes(spec.type)) {
    throw new TypeError(
      `parseConfig: field \`${name}\` needs a type (one of ${TYPES.join(', ')}) or a default to take it from`,
    );
  }
  spec.name = name;
  return spec;
}

const ARTICLE = { boolean: 'a boolean', number: 'a number', integer: 'an integer', string: 'a string', array: 'an array', object: 'an object' };
const FIX = {
  boolean: 'give true or false',
  number: 'give a JSON number, such as 0 or 0.5',
  integer: 'give a whole number, such as 0',
  string: 'give a JSON string in double quotes',
  array: 'give a JSON list, such as []',
  object: 'give a JSON object, such as {}',
};

/** `value` as field `spec` reads it, or a PolicyError naming the field and the fix. */
function checked(spec, value) {
  const field = quote(spec.name);
  const got = JSON.stringify(value);
  if (value === null) {
    if (spec.nullable) return null;
    throw new PolicyError(`${PREFIX}${field} must be ${ARTICLE[spec.type]}, got null: ${FIX[spec.type]}, or leave the field out`);
  }
  const ok =
    spec.type === 'integer'
      ? typeof value === 'number' && Number.isInteger(value)
      : spec.type === 'array'
        ? Array.isArray(value)
        : spec.type === 'object'
          ? typeof value === 'object' && !Array.isArray(value)
          : typeof value === spec.type;
  if (!ok) throw new PolicyError(`${PREFIX}${field} must be ${ARTICLE[spec.type]}, got ${got}: ${FIX[spec.type]}`);
  if (typeof value === 'number' && !Number.isFinite(value)) {
    throw new PolicyError(`${PREFIX}${field} is out of range (${got}): give a smaller number`);
  }
  if (spec.values !== undefined && !spec.values.includes(value)) {
    const allowed = spec.values.map((v) => JSON.stringify(v)).join(', ');
    throw new PolicyError(`${PREFIX}${field} must be one of ${allowed}, got ${got}: give one of those`);
  }
  if (spec.min !== undefined && value < spec.min) {
    throw new PolicyError(`${PREFIX}${field} is ${got}, below its minimum ${spec.min}: give ${spec.min} or more`);
  }
  if (spec.max !== undefined && value > spec.max) {
    throw new PolicyError(`${PREFIX}${field} is ${got}, above its maximum ${spec.max}: give ${spec.max} or less`);
  }
  return value;
}

/**
 * The keys of the top-level object of `text` (valid JSON), in document order,
 * repeats included (JSON.parse keeps only the last of a repeated key).
 */
function topLevelKeys(text) {
  const keys = [];
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      if (depth === 1) {
        let k = j + 1;
        while (text[k] === ' ' || text[k] === '\t' || text[k] === '\n' || text[k] === '\r') k++;
        if (text[k] === ':') keys.push(JSON.parse(text.slice(i, j + 1)));
      }
      i = j;
    } else if (c === '{' || c === '[') {
      depth++;
    } else if (c === '}' || c === ']') {
      depth--;
    }
  }
  return keys;
}

/** NVLink modes: how a multi-GPU exclusive request uses the links between GPUs (see `Nvlink` in index.js). */
const NVLINK_MODES = ['prefer', 'require', 'ignore'];

/**
 * The fields `placeEach` reads from config.json (all optional), as the Rust
 * SDK's `PlacementParams`: `nvlink` (`"prefer"`, `"require"` or `"ignore"`;
 * when given it wins over `preferNvlink`), `preferNvlink` (the older form:
 * `true` is `"prefer"`, `false` `"ignore"`) and `preemption` (a pod that fits
 * nowhere now may evict lower-priority pods).
 */
export const PLACEMENT_FIELDS = Object.freeze({
  preferNvlink: Object.freeze({ type: 'boolean', default: true }),
  nvlink: Object.freeze({ type: 'string', values: NVLINK_MODES, nullable: true }),
  preemption: Object.freeze({ type: 'boolean', default: true }),
});

/** Parameters understood by `placeEach`, read from config.json (`parsePlacementParams`). */
export class PlacementParams {
  constructor({ preferNvlink = true, nvlink = undefined, preemption = true } = {}) {
    /** Keep multi-GPU exclusive requests on NVLink-joined GPUs when possible (the older form of `nvlink`). */
    this.preferNvlink = preferNvlink;
    /** How multi-GPU exclusive requests use NVLink; `undefined` (or `null`) when not given. */
    this.nvlink = nvlink ?? undefined;
    /** Preempt lower-priority pods for a pod that fits nowhere now. */
    this.preemption = preemption;
  }

  /** The NVLink mode these parameters ask for: `nvlink` when given, else from `preferNvlink`. */
  nvlinkMode() {
    return this.nvlink ?? (this.preferNvlink ? 'prefer' : 'ignore');
  }
}

/**
 * Reads `config` (the snapshot's config.json) as `placeEach` does, accepting
 * exactly what the Rust SDK's `PlacementParams` accepts: an object of the
 * keys in `PLACEMENT_FIELDS` (unknown and repeated keys refused), `null` for
 * `nvlink` meaning not given, an NVLink mode also spelled `{"require":
 * null}`, and, as serde reads a struct, a list of the values in field order
 * (`[true, "require"]`).
 */
export function parsePlacementParams(config) {
  let text = config;
  if (!blankConfig(config)) {
    // serde also reads a unit variant written as a one-key object, {"require": null}.
    let parsed;
    try {
      parsed = JSON.parse(config);
    } catch {
      parsed = undefined;
    }
    const unit = (mode) => {
      if (mode === null || typeof mode !== 'object' || Array.isArray(mode)) return undefined;
      const keys = Object.keys(mode);
      return keys.length === 1 && mode[keys[0]] === null && NVLINK_MODES.includes(keys[0]) ? keys[0] : undefined;
    };
    if (Array.isArray(parsed) && unit(parsed[1]) !== undefined) {
      parsed[1] = unit(parsed[1]);
      text = JSON.stringify(parsed);
    } else if (parsed !== null && typeof parsed === 'object' && unit(parsed.nvlink) !== undefined) {
      parsed.nvlink = unit(parsed.nvlink);
      // Repeated keys stay in the text, to be refused.
      if (topLevelKeys(config).length === Object.keys(parsed).length) text = JSON.stringify(parsed);
    }
  }
  return new PlacementParams(parseConfig(text, PLACEMENT_FIELDS, { positional: true }));
}

// Validates an object against a CRD's openAPIV3Schema as the API server
// does with strict field validation: the structural-schema keywords that
// CRDs use (type, properties, additionalProperties, items, required, enum,
// anyOf, pattern, minimum, maximum, minLength, maxLength, int32/int64
// formats, x-kubernetes-int-or-string), and no field a schema with
// properties does not name.

'use strict';

const INT_RANGE = {
  int32: [-(2 ** 31), 2 ** 31 - 1],
  int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
};

function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

// Appends to `errors` every way `v` breaks schema `s`; `at` is v's path.
function check(s, v, at, errors) {
  if (s['x-kubernetes-int-or-string']) {
    if (!['integer', 'string'].includes(typeOf(v))) errors.push(`${at}: want an integer or a string`);
    return;
  }
  if (s.anyOf) {
    const ok = s.anyOf.some((alt) => {
      const e = [];
      check(alt, v, at, e);
      return e.length === 0;
    });
    if (!ok) errors.push(`${at}: matches none of anyOf`);
  }
  const t = typeOf(v);
  if (s.type) {
    const fits = s.type === t || (s.type === 'number' && t === 'integer');
    if (!fits) {
      errors.push(`${at}: want ${s.type}, have ${t}`);
      return;
    }
  }
  if (s.enum && !s.enum.includes(v)) errors.push(`${at}: ${JSON.stringify(v)} is not one of ${s.enum.join(', ')}`);
  if (t === 'string') {
    if (s.pattern && !new RegExp(s.pattern, 'u').test(v)) errors.push(`${at}: does not match ${s.pattern}`);
    if (s.minLength !== undefined && v.length < s.minLength) errors.push(`${at}: shorter than ${s.minLength}`);
    if (s.maxLength !== undefined && v.length > s.maxLength) errors.push(`${at}: longer than ${s.maxLength}`);
  }
  if (t === 'integer' || t === 'number') {
    const range = INT_RANGE[s.format];
    if (range && (v < range[0] || v > range[1])) errors.push(`${at}: out of ${s.format}`);
    if (s.minimum !== undefined && v < s.minimum) errors.push(`${at}: below ${s.minimum}`);
    if (s.maximum !== undefined && v > s.maximum) errors.push(`${at}: above ${s.maximum}`);
  }
  if (t === 'array' && s.items) v.forEach((x, i) => check(s.items, x, `${at}[${i}]`, errors));
  if (t === 'object') {
    for (const r of s.required || []) {
      if (!(r in v)) errors.push(`${at}: missing ${r}`);
    }
    for (const [k, x] of Object.entries(v)) {
      const field = `${at}.${k}`;
      if (s.properties && k in s.properties) {
        check(s.properties[k], x, field, errors);
      } else if (typeof s.additionalProperties === 'object') {
        check(s.additionalProperties, x, field, errors);
      } else if (s.properties && !s['x-kubernetes-preserve-unknown-fields']) {
        errors.push(`${field}: unknown field`);
      }
    }
  }
}

// The errors of `object` against version `apiVersion` of `crd`; throws when
// the CRD has no such version.
function validateCustomResource(crd, object) {
  const version = crd.spec.versions.find((v) => `${crd.spec.group}/${v.name}` === object.apiVersion);
  if (!version) throw new Error(`${crd.metadata.name} has no version ${object.apiVersion}`);
  const errors = [];
  check(version.schema.openAPIV3Schema, object, '', errors);
  return errors;
}

module.exports = { validateCustomResource };

#!/usr/bin/env node
// Renders a Helm chart without Helm: the subset of Go templates and Helm
// functions that deploy/helm/tessera uses, for machines with no helm binary
// (Debian 12 ships none). Output: the rendered manifests as one YAML stream.
//
//   node deploy/helm/render.js CHART_DIR [-f VALUES.yaml]... [--set-file KEY=PATH]...
//
// Templates: text with actions {{ PIPELINE }}, trim markers {{- and -}},
// comments {{/* */}}, if / else if / else / end, with, range (over a list or
// a map, optionally binding $k, $v :=), define and include. Pipelines: an
// operand or a function with arguments, chained with |; operands are .Field
// chains, $ and $var chains, "strings", numbers, true, false and
// ( pipelines ). Functions: see FUNCS. A missing value renders as nothing.

'use strict';

const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');

class TemplateError extends Error {}

// ---- Lexing: text and actions -------------------------------------------

// Splits a template into text and action pieces, applying trim markers.
function splitActions(src, name) {
  const pieces = [];
  let i = 0;
  while (i < src.length) {
    const open = src.indexOf('{{', i);
    if (open < 0) {
      pieces.push({ text: src.slice(i) });
      break;
    }
    let text = src.slice(i, open);
    let start = open + 2;
    if (src.startsWith('- ', start) || src.startsWith('-\n', start)) {
      text = text.replace(/\s+$/, '');
      start += 1;
    }
    const close = src.indexOf('}}', start);
    if (close < 0) throw new TemplateError(`${name}: unclosed action`);
    let end = close;
    let trimAfter = false;
    if (src[close - 1] === '-' && /\s/.test(src[close - 2])) {
      end = close - 1;
      trimAfter = true;
    }
    pieces.push({ text });
    pieces.push({ action: src.slice(start, end).trim() });
    i = close + 2;
    if (trimAfter) {
      while (i < src.length && /\s/.test(src[i])) i++;
    }
  }
  return pieces.filter((p) => p.text === undefined || p.text !== '');
}

// Tokens of one action.
function lex(action, name) {
  const tokens = [];
  let i = 0;
  while (i < action.length) {
    const c = action[i];
    if (/\s/.test(c)) {
      i++;
    } else if (c === '"') {
      let j = i + 1;
      let s = '';
      while (j < action.length && action[j] !== '"') {
        if (action[j] === '\\') {
          const e = action[++j];
          s += { n: '\n', t: '\t', '"': '"', '\\': '\\' }[e] ?? e;
        } else {
          s += action[j];
        }
        j++;
      }
      if (j >= action.length) throw new TemplateError(`${name}: unterminated string`);
      tokens.push({ kind: 'value', value: s });
      i = j + 1;
    } else if (c === '`') {
      const j = action.indexOf('`', i + 1);
      if (j < 0) throw new TemplateError(`${name}: unterminated raw string`);
      tokens.push({ kind: 'value', value: action.slice(i + 1, j) });
      i = j + 1;
    } else if (c === '|' || c === '(' || c === ')' || c === ',') {
      tokens.push({ kind: c });
      i++;
    } else if (action.startsWith(':=', i)) {
      tokens.push({ kind: ':=' });
      i += 2;
    } else {
      const m = /^[^\s|(),"`]+/.exec(action.slice(i));
      const word = m[0].startsWith(':=') ? ':=' : m[0].split(':=')[0];
      i += word.length;
      if (/^-?[0-9][0-9.]*$/.test(word)) {
        tokens.push({ kind: 'value', value: Number(word) });
      } else if (word === 'true' || word === 'false') {
        tokens.push({ kind: 'value', value: word === 'true' });
      } else if (word === 'nil') {
        tokens.push({ kind: 'value', value: null });
      } else if (word[0] === '.' || word[0] === '$') {
        tokens.push({ kind: 'ref', value: word });
      } else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(word)) {
        tokens.push({ kind: 'ident', value: word });
      } else {
        throw new TemplateError(`${name}: unexpected "${word}"`);
      }
    }
  }
  return tokens;
}

// ---- Parsing: pipelines and the control tree -----------------------------

// pipeline := command ('|' command)*; command := operand+ ; operands are
// values, refs, identifiers (functions) and parenthesized pipelines.
function parsePipeline(tokens, pos, name) {
  const commands = [];
  let args = [];
  while (pos < tokens.length && tokens[pos].kind !== ')') {
    const t = tokens[pos];
    if (t.kind === '|') {
      if (args.length === 0) throw new TemplateError(`${name}: empty command`);
      commands.push(args);
      args = [];
      pos++;
    } else if (t.kind === '(') {
      const [inner, next] = parsePipeline(tokens, pos + 1, name);
      if (tokens[next]?.kind !== ')') throw new TemplateError(`${name}: missing )`);
      args.push({ kind: 'pipe', value: inner });
      pos = next + 1;
    } else if (t.kind === 'value' || t.kind === 'ref' || t.kind === 'ident') {
      args.push(t);
      pos++;
    } else {
      throw new TemplateError(`${name}: unexpected ${t.kind}`);
    }
  }
  if (args.length === 0) throw new TemplateError(`${name}: empty pipeline`);
  commands.push(args);
  return [commands, pos];
}

function parseFullPipeline(tokens, name) {
  const [pipe, pos] = parsePipeline(tokens, 0, name);
  if (pos !== tokens.length) throw new TemplateError(`${name}: unexpected )`);
  return pipe;
}

// Builds the tree of one template; `defines` collects {{ define }} bodies.
function parseTemplate(src, name, defines) {
  const pieces = splitActions(src, name);
  let pos = 0;

  // Parses nodes until one of `stops` (a keyword action) and returns
  // [nodes, the stopping action's words].
  function parseList(stops) {
    const nodes = [];
    while (pos < pieces.length) {
      const p = pieces[pos++];
      if (p.text !== undefined) {
        nodes.push({ type: 'text', text: p.text });
        continue;
      }
      if (p.action.startsWith('/*')) {
        if (!p.action.endsWith('*/')) throw new TemplateError(`${name}: bad comment`);
        continue;
      }
      const tokens = lex(p.action, name);
      const head = tokens[0]?.kind === 'ident' ? tokens[0].value : null;
      if (head === 'end' || head === 'else') {
        if (!stops) throw new TemplateError(`${name}: unexpected ${head}`);
        return [nodes, tokens];
      }
      if (head === 'if' || head === 'with') {
        nodes.push(parseBranches(head, tokens.slice(1)));
      } else if (head === 'range') {
        nodes.push(parseRange(tokens.slice(1)));
      } else if (head === 'define') {
        if (tokens.length !== 2 || tokens[1].kind !== 'value') {
          throw new TemplateError(`${name}: define wants a name`);
        }
        const [body, stop] = parseList(true);
        if (!stop || stop[0].value !== 'end') throw new TemplateError(`${name}: define without end`);
        defines[tokens[1].value] = body;
      } else {
        nodes.push({ type: 'action', pipe: parseFullPipeline(tokens, name) });
      }
    }
    if (stops) throw new TemplateError(`${name}: missing end`);
    return [nodes, null];
  }

  function parseBranches(kind, condTokens) {
    const branches = [];
    let cond = parseFullPipeline(condTokens, name);
    for (;;) {
      const [body, stop] = parseList(true);
      branches.push({ cond, body });
      if (stop[0].value === 'end') return { type: kind, branches, otherwise: [] };
      if (stop.length > 1 && stop[1].kind === 'ident' && stop[1].value === kind) {
        cond = parseFullPipeline(stop.slice(2), name);  // else if / else with
        continue;
      }
      if (stop.length > 1) throw new TemplateError(`${name}: bad else`);
      const [otherwise, last] = parseList(true);
      if (last[0].value !== 'end') throw new TemplateError(`${name}: else after else`);
      return { type: kind, branches, otherwise };
    }
  }

  function parseRange(tokens) {
    let vars = [];
    const assign = tokens.findIndex((t) => t.kind === ':=');
    if (assign >= 0) {
      vars = tokens.slice(0, assign).filter((t) => t.kind !== ',').map((t) => t.value);
      if (vars.length < 1 || vars.length > 2 || vars.some((v) => !/^\$\w+$/.test(v))) {
        throw new TemplateError(`${name}: bad range variables`);
      }
      tokens = tokens.slice(assign + 1);
    }
    const pipe = parseFullPipeline(tokens, name);
    const [body, stop] = parseList(true);
    let otherwise = [];
    if (stop[0].value === 'else') {
      let last;
      [otherwise, last] = parseList(true);
      if (last[0].value !== 'end') throw new TemplateError(`${name}: else after else`);
    }
    return { type: 'range', vars, pipe, body, otherwise };
  }

  return parseList(false)[0];
}

// ---- Evaluation -----------------------------------------------------------

function truthy(v) {
  if (v === null || v === undefined || v === false || v === 0 || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === 'object') return Object.keys(v).length > 0;
  return true;
}

// Go's fmt %v of a value as text/template prints it.
function show(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object') return toYaml(v);
  return String(v);
}

// sigs.k8s.io/yaml output: keys sorted, no trailing newline.
function toYaml(v) {
  if (v === null || v === undefined) return 'null';
  return yaml.dump(v, { sortKeys: true, lineWidth: -1, noRefs: true }).replace(/\n$/, '');
}

function indent(n, s) {
  const pad = ' '.repeat(n);
  return String(s).split('\n').map((l) => pad + l).join('\n');
}

function num(v, fn) {
  if (typeof v !== 'number') throw new TemplateError(`${fn}: want numbers, got ${JSON.stringify(v)}`);
  return v;
}

// Helm (sprig) functions; the piped value comes as the last argument.
const FUNCS = {
  quote: (...xs) => xs.map((x) => JSON.stringify(show(x))).join(' '),
  toYaml: (v) => toYaml(v),
  indent: (n, s) => indent(n, s),
  nindent: (n, s) => '\n' + indent(n, s),
  default: (d, v) => (truthy(v) ? v : d),
  required: (msg, v) => {
    if (v === null || v === undefined || v === '') throw new TemplateError(msg);
    return v;
  },
  b64enc: (s) => Buffer.from(show(s), 'utf8').toString('base64'),
  printf: (fmt, ...args) => {
    let k = 0;
    return fmt.replace(/%[sdv%]/g, (m) => (m === '%%' ? '%' : show(args[k++])));
  },
  eq: (a, ...bs) => bs.some((b) => a === b),
  ne: (a, b) => a !== b,
  gt: (a, b) => num(a, 'gt') > num(b, 'gt'),
  ge: (a, b) => num(a, 'ge') >= num(b, 'ge'),
  lt: (a, b) => num(a, 'lt') < num(b, 'lt'),
  not: (v) => !truthy(v),
  and: (...xs) => xs.find((x) => !truthy(x)) ?? xs[xs.length - 1],
  or: (...xs) => xs.find((x) => truthy(x)) ?? xs[xs.length - 1],
  add: (...xs) => xs.reduce((s, x) => s + num(x, 'add'), 0),
  mul: (...xs) => xs.reduce((s, x) => s * num(x, 'mul'), 1),
};

function lookup(base, fields, ref) {
  let v = base;
  for (const f of fields) {
    if (v === null || v === undefined) return undefined;
    if (typeof v !== 'object') throw new TemplateError(`${ref}: ${f} of a non-map`);
    v = v[f];
  }
  return v;
}

class Renderer {
  constructor(defines) {
    this.defines = defines;
  }

  ref(word, scope) {
    if (word === '.') return scope.dot;
    if (word[0] === '.') return lookup(scope.dot, word.slice(1).split('.'), word);
    const [variable, ...fields] = word.split('.');
    const base = variable === '$' ? scope.root : scope.vars[variable];
    if (variable !== '$' && !(variable in scope.vars)) {
      throw new TemplateError(`undefined variable ${variable}`);
    }
    return lookup(base, fields, word);
  }

  operand(t, scope) {
    if (t.kind === 'value') return t.value;
    if (t.kind === 'ref') return this.ref(t.value, scope);
    if (t.kind === 'pipe') return this.pipe(t.value, scope);
    return this.call(t.value, [], scope);
  }

  call(fn, args, scope) {
    if (fn === 'include') {
      const [name, dot] = args;
      const body = this.defines[name];
      if (!body) throw new TemplateError(`include: no template "${name}"`);
      return this.nodes(body, { dot, root: scope.root, vars: {} });
    }
    const f = FUNCS[fn];
    if (!f) throw new TemplateError(`unknown function ${fn}`);
    return f(...args);
  }

  pipe(commands, scope) {
    let piped;
    commands.forEach((args, i) => {
      const [head, ...rest] = args;
      const extra = i > 0 ? [piped] : [];
      if (head.kind === 'ident') {
        piped = this.call(head.value, [...rest.map((a) => this.operand(a, scope)), ...extra], scope);
      } else {
        if (rest.length > 0 || extra.length > 0) {
          throw new TemplateError(`${head.value ?? 'value'} is not a function`);
        }
        piped = this.operand(head, scope);
      }
    });
    return piped;
  }

  nodes(list, scope) {
    let out = '';
    for (const n of list) out += this.node(n, scope);
    return out;
  }

  node(n, scope) {
    switch (n.type) {
      case 'text':
        return n.text;
      case 'action':
        return show(this.pipe(n.pipe, scope));
      case 'if':
      case 'with':
        for (const b of n.branches) {
          const v = this.pipe(b.cond, scope);
          if (truthy(v)) {
            return this.nodes(b.body, n.type === 'with' ? { ...scope, dot: v } : scope);
          }
        }
        return this.nodes(n.otherwise, scope);
      case 'range': {
        const v = this.pipe(n.pipe, scope);
        if (!truthy(v)) return this.nodes(n.otherwise, scope);
        const entries = Array.isArray(v)
          ? v.map((x, i) => [i, x])
          : Object.keys(v).sort().map((k) => [k, v[k]]);
        let out = '';
        for (const [k, x] of entries) {
          const vars = { ...scope.vars };
          if (n.vars.length === 1) vars[n.vars[0]] = x;
          if (n.vars.length === 2) Object.assign(vars, { [n.vars[0]]: k, [n.vars[1]]: x });
          out += this.nodes(n.body, { dot: x, root: scope.root, vars });
        }
        return out;
      }
      default:
        throw new TemplateError(`unknown node ${n.type}`);
    }
  }
}

// Values merged as Helm does: maps key by key, anything else replaced.
function mergeValues(base, over) {
  if (over === null || typeof over !== 'object' || Array.isArray(over) ||
      base === null || typeof base !== 'object' || Array.isArray(base)) {
    return over;
  }
  const out = { ...base };
  for (const k of Object.keys(over)) out[k] = mergeValues(base[k], over[k]);
  return out;
}

// Sets a dotted key (a.b.c) in `values` to `value`.
function setPath(values, key, value) {
  const fields = key.split('.');
  let v = values;
  for (const f of fields.slice(0, -1)) {
    if (v[f] === null || typeof v[f] !== 'object') v[f] = {};
    v = v[f];
  }
  v[fields[fields.length - 1]] = value;
}

// Renders `chartDir` with `values` (merged over its values.yaml). Returns
// the manifests, one YAML document per non-empty template, in file order.
function renderChart(chartDir, values = {}, release = { Name: 'tessera', Namespace: 'default' }) {
  const chart = yaml.load(fs.readFileSync(path.join(chartDir, 'Chart.yaml'), 'utf8'));
  const defaults = yaml.load(fs.readFileSync(path.join(chartDir, 'values.yaml'), 'utf8')) || {};
  const root = {
    Values: mergeValues(defaults, values),
    Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
    Release: release,
  };
  const dir = path.join(chartDir, 'templates');
  const files = fs.readdirSync(dir).filter((f) => /\.(yaml|tpl)$/.test(f)).sort();
  const defines = {};
  const trees = files.map((f) => [f, parseTemplate(fs.readFileSync(path.join(dir, f), 'utf8'), f, defines)]);
  const renderer = new Renderer(defines);
  const docs = [];
  for (const [f, tree] of trees) {
    if (f.startsWith('_')) continue;
    let text;
    try {
      text = renderer.nodes(tree, { dot: root, root, vars: {} });
    } catch (e) {
      if (e instanceof TemplateError) e.message = `${f}: ${e.message}`;
      throw e;
    }
    if (text.trim() !== '') docs.push(`# Source: ${chart.name}/templates/${f}\n${text.replace(/^\n+/, '')}`);
  }
  return docs.map((d) => `---\n${d.replace(/\s*$/, '\n')}`).join('');
}

function renderTemplate(src, root) {
  const defines = {};
  const tree = parseTemplate(src, 'template', defines);
  return new Renderer(defines).nodes(tree, { dot: root, root, vars: {} });
}

function main(argv) {
  let chartDir = null;
  let values = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-f' || a === '--values') {
      values = mergeValues(values, yaml.load(fs.readFileSync(argv[++i], 'utf8')) || {});
    } else if (a === '--set-file') {
      const [key, file] = argv[++i].split('=');
      setPath(values, key, fs.readFileSync(file, 'utf8'));
    } else if (chartDir === null) {
      chartDir = a;
    } else {
      throw new Error(`unexpected argument ${a}`);
    }
  }
  if (chartDir === null) throw new Error('usage: render.js CHART_DIR [-f VALUES]... [--set-file KEY=PATH]...');
  process.stdout.write(renderChart(chartDir, values));
}

module.exports = { renderChart, renderTemplate, mergeValues, TemplateError };

if (require.main === module) {
  try {
    main(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`render.js: ${e.message}\n`);
    process.exit(1);
  }
}

// deploy/helm/render.js against what Go templates and Helm produce for the
// same templates (the outputs below are Helm 3's).

'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { renderTemplate, mergeValues } = require('../../deploy/helm/render');

const root = {
  Values: {
    name: 'tessera',
    count: 2,
    zero: 0,
    on: true,
    off: false,
    empty: '',
    list: ['a', 'b'],
    map: { b: 2, a: 'x y' },
    nested: { deep: { value: 'v' } },
  },
  Release: { Name: 'rel' },
};

function render(src) {
  return renderTemplate(src, root);
}

test('text, fields and trim markers', () => {
  assert.strictEqual(render('a: {{ .Values.name }}\n'), 'a: tessera\n');
  assert.strictEqual(render('a: {{ .Values.nested.deep.value }}'), 'a: v');
  assert.strictEqual(render('x\n  {{- .Values.name }}\n'), 'xtessera\n');
  assert.strictEqual(render('{{ .Values.name -}}\n\n  y'), 'tesseray');
  assert.strictEqual(render('a{{/* a comment */}}b'), 'ab');
  assert.strictEqual(render('[{{ .Values.missing }}]'), '[]');
  assert.strictEqual(render('{{ $.Release.Name }}'), 'rel');
});

test('literals and functions', () => {
  assert.strictEqual(render('{{ .Values.count | quote }}'), '"2"');
  assert.strictEqual(render('{{ quote "say \\"hi\\"" }}'), '"say \\"hi\\""');
  assert.strictEqual(render('{{ .Values.empty | default "d" }}'), 'd');
  assert.strictEqual(render('{{ .Values.zero | default 5 }}'), '5');
  assert.strictEqual(render('{{ add 1 .Values.count 3 }}'), '6');
  assert.strictEqual(render('{{ mul 2 .Values.count }}'), '4');
  assert.strictEqual(render('{{ printf "%s:%d" .Values.name .Values.count }}'), 'tessera:2');
  assert.strictEqual(render('{{ "ab" | b64enc }}'), 'YWI=');
  assert.strictEqual(render('{{ (add 1 1) | quote }}'), '"2"');
  assert.strictEqual(render('{{ `raw "text"` }}'), 'raw "text"');
  assert.throws(() => render('{{ required "name it" .Values.empty }}'), /name it/);
  assert.throws(() => render('{{ nosuch 1 }}'), /unknown function nosuch/);
});

test('toYaml, indent and nindent', () => {
  assert.strictEqual(render('{{ toYaml .Values.map }}'), "a: x y\nb: 2");
  assert.strictEqual(render('m:{{ toYaml .Values.map | nindent 2 }}'), 'm:\n  a: x y\n  b: 2');
  assert.strictEqual(render('{{ toYaml .Values.list | indent 2 }}'), '  - a\n  - b');
});

test('if, else if, else and comparisons', () => {
  const t = '{{ if gt .Values.count 5 }}big{{ else if eq .Values.count 2 }}two{{ else }}other{{ end }}';
  assert.strictEqual(render(t), 'two');
  assert.strictEqual(render('{{ if .Values.off }}y{{ else }}n{{ end }}'), 'n');
  assert.strictEqual(render('{{ if .Values.list }}y{{ end }}'), 'y');
  assert.strictEqual(render('{{ if not .Values.zero }}y{{ end }}'), 'y');
  assert.strictEqual(render('{{ if and .Values.on .Values.off }}y{{ else }}n{{ end }}'), 'n');
  assert.strictEqual(render('{{ if or .Values.off .Values.on }}y{{ end }}'), 'y');
  assert.throws(() => render('{{ if .Values.on }}y'), /missing end/);
  assert.throws(() => render('{{ end }}'), /unexpected end/);
});

test('with and range', () => {
  assert.strictEqual(render('{{ with .Values.nested.deep }}{{ .value }}{{ end }}'), 'v');
  assert.strictEqual(render('{{ with .Values.empty }}y{{ else }}n{{ end }}'), 'n');
  assert.strictEqual(render('{{ range .Values.list }}[{{ . }}]{{ end }}'), '[a][b]');
  // Maps range in key order.
  assert.strictEqual(render('{{ range $k, $v := .Values.map }}{{ $k }}={{ $v }};{{ end }}'), 'a=x y;b=2;');
  assert.strictEqual(render('{{ range $i, $v := .Values.list }}{{ $i }}{{ $v }}{{ end }}'), '0a1b');
  assert.strictEqual(render('{{ range .Values.empty }}y{{ else }}none{{ end }}'), 'none');
  assert.throws(() => render('{{ $nope }}'), /undefined variable/);
});

test('define and include', () => {
  const t = '{{- define "x.label" -}}\nname: {{ .Values.name }}\n{{- end }}\nl:\n  {{- include "x.label" . | nindent 2 }}\n';
  assert.strictEqual(render(t), '\nl:\n  name: tessera\n');
  assert.throws(() => render('{{ include "none" . }}'), /no template "none"/);
});

test('values merge as Helm merges them', () => {
  assert.deepStrictEqual(
    mergeValues({ a: { b: 1, c: 2 }, l: [1, 2], s: 'x' }, { a: { c: 3 }, l: [3], s: null }),
    { a: { b: 1, c: 3 }, l: [3], s: null });
});

// Checks the rendered deployment manifests (tests/deploy/render_all.sh):
// every object validates against its Kubernetes API schema (the
// kubernetes-models validators: types, required fields, enums, though not
// unknown fields; the LeaderWorkerSet strictly against the CRD kept in
// deploy/k8s/schemas), each workload has the probes, drain timing, security
// context and wiring the deployment relies on, the Helm chart renders the
// same objects as the overlays, every ConfigMap key is a tesserad flag, and
// tesserad starts with the ConfigMaps' values.
//
// Environment: RENDERED (render_all.sh's output folder), TESSERAD_HELP (a
// file with `tesserad --help`), TESSERAD (the daemon), LWS_CRD (the CRD
// file).

'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const yaml = require('js-yaml');
const { validateCustomResource } = require('./crd_schema');

const rendered = process.env.RENDERED;
const overlays = ['cpu', 'gpu', 'multinode'];

// The objects of one rendering. Secret data is read as the API server reads
// it: base64 with line breaks ignored (kustomize breaks long values).
function load(name) {
  const objects = yaml.loadAll(fs.readFileSync(path.join(rendered, `${name}.yaml`), 'utf8'))
    .filter((o) => o !== null);
  for (const o of objects) {
    if (o.kind !== 'Secret') continue;
    for (const k of Object.keys(o.data || {})) o.data[k] = o.data[k].replace(/[\r\n]/g, '');
  }
  return objects;
}

function byKind(objects, kind) {
  return objects.filter((o) => o.kind === kind);
}

function one(objects, kind) {
  const found = byKind(objects, kind);
  assert.strictEqual(found.length, 1, `want one ${kind}, have ${found.length}`);
  return found[0];
}

// ---- Schema validation --------------------------------------------------

const lwsCrd = JSON.parse(fs.readFileSync(process.env.LWS_CRD, 'utf8'));

// Throws naming the object and what is wrong with it.
function validate(o) {
  const name = `${o.kind}/${o.metadata?.name}`;
  if (o.kind === lwsCrd.spec.names.kind) {
    const errors = validateCustomResource(lwsCrd, o);
    if (errors.length > 0) throw new Error(`${name}: ${errors.join('; ')}`);
    return;
  }
  const [group, version] = o.apiVersion.includes('/') ? o.apiVersion.split('/') : ['', o.apiVersion];
  const module = group === 'monitoring.coreos.com'
    ? `@kubernetes-models/prometheus-operator/${group}/${version}/${o.kind}`
    : `kubernetes-models/${group ? `${group}/` : ''}${version}/${o.kind}`;
  const Model = require(module)[o.kind];
  try {
    new Model(o).validate();
  } catch (e) {
    throw new Error(`${name}: ${e.message}`);
  }
}

test('the validators reject what the API server rejects', () => {
  const [deployment] = byKind(load('cpu'), 'Deployment');
  const badPort = structuredClone(deployment);
  badPort.spec.template.spec.containers[0].ports[0].containerPort = 'grpc';
  assert.throws(() => validate(badPort), /containerPort/);

  const lwsObject = one(load('multinode'), 'LeaderWorkerSet');
  const badPolicy = structuredClone(lwsObject);
  badPolicy.spec.leaderWorkerTemplate.restartPolicy = 'Always';
  assert.throws(() => validate(badPolicy), /restartPolicy/);
  const typo = structuredClone(lwsObject);
  typo.spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].readinesProbe = {};
  assert.throws(() => validate(typo), /readinesProbe/);
});

for (const name of [...overlays, 'helm-cpu', 'helm-gpu', 'helm-multinode', 'helm-tls']) {
  test(`${name}: every object validates against its API schema`, () => {
    for (const o of load(name)) validate(o);
  });
}

// ---- What each deployment relies on --------------------------------------

// "30s", "2m", "1h30m" in seconds (the durations tesserad's flags take).
function seconds(duration) {
  const units = { h: 3600, m: 60, s: 1 };
  const parts = [...duration.matchAll(/([0-9.]+)(h|m|s)/g)];
  assert.ok(parts.length > 0 && parts.map((p) => p[0]).join('') === duration, `duration ${duration}`);
  return parts.reduce((s, [, n, u]) => s + Number(n) * units[u], 0);
}

function port(hostPort) {
  return Number(hostPort.slice(hostPort.lastIndexOf(':') + 1));
}

function podTemplate(objects) {
  const [deployment] = byKind(objects, 'Deployment');
  if (deployment) return deployment.spec.template;
  return one(objects, 'LeaderWorkerSet').spec.leaderWorkerTemplate.workerTemplate;
}

function selects(selector, labels) {
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

function checkWorkload(objects, { tls }) {
  const config = one(objects, 'ConfigMap');
  const secret = one(objects, 'Secret');
  const template = podTemplate(objects);
  const pod = template.spec;
  assert.strictEqual(pod.containers.length, 1);
  const c = pod.containers[0];
  const flags = config.data;

  // The flags reach the container, and their files lie in the Secret.
  assert.deepStrictEqual(c.envFrom, [{ configMapRef: { name: config.metadata.name } }]);
  const auth = pod.volumes.find((v) => v.secret?.secretName === secret.metadata.name);
  assert.ok(auth, 'the Secret is a volume');
  const mount = c.volumeMounts.find((m) => m.name === auth.name);
  assert.ok(mount.readOnly);
  for (const flag of ['TESSERA_TOKEN_FILE', 'TESSERA_TLS_CERT', 'TESSERA_TLS_KEY']) {
    if (!(flag in flags)) continue;
    assert.strictEqual(path.dirname(flags[flag]), mount.mountPath, flag);
    assert.ok(path.basename(flags[flag]) in secret.data, `${flag}: ${flags[flag]} is in the Secret`);
  }
  assert.ok('TESSERA_TOKEN_FILE' in flags, 'calls need the token');
  assert.strictEqual('TESSERA_TLS_CERT' in flags, tls);

  // Ports: the flags, the container and the Service agree.
  const ports = Object.fromEntries(c.ports.map((p) => [p.name, p.containerPort]));
  assert.strictEqual(ports.grpc, port(flags.TESSERA_LISTEN));
  assert.strictEqual(ports.metrics, port(flags.TESSERA_METRICS_LISTEN));
  const service = one(objects, 'Service');
  assert.ok(selects(service.spec.selector, template.metadata.labels));
  assert.deepStrictEqual(service.spec.ports.map((p) => p.targetPort).sort(), ['grpc', 'metrics']);

  // Probes on grpc.health.v1: natively in plaintext, through the CLI with TLS.
  for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
    if (tls) {
      assert.deepStrictEqual(c[probe].exec.command.slice(-1), ['ping'], probe);
      assert.strictEqual(c[probe].grpc, undefined);
    } else {
      assert.deepStrictEqual(c[probe].grpc, { port: ports.grpc }, probe);
    }
  }
  assert.ok(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold >= 900,
            'weight loads get at least 15 minutes');

  // A drain is never cut short: the grace period covers preStop and drain.
  const preStop = c.lifecycle.preStop.sleep.seconds;
  assert.ok(pod.terminationGracePeriodSeconds > preStop + seconds(flags.TESSERA_DRAIN_TIMEOUT),
            `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds}`);

  // Least privilege.
  assert.strictEqual(pod.securityContext.runAsNonRoot, true);
  assert.ok(pod.securityContext.runAsUser > 0);
  assert.deepStrictEqual(c.securityContext, {
    allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true,
    runAsNonRoot: true,
    capabilities: { drop: ['ALL'] },
  });

  // Writable places on a read-only root: the cache, /dev/shm in memory, /tmp.
  const volume = (mountPath) => {
    const m = c.volumeMounts.find((v) => v.mountPath === mountPath);
    assert.ok(m, `${mountPath} is mounted`);
    return pod.volumes.find((v) => v.name === m.name);
  };
  assert.strictEqual(volume('/dev/shm').emptyDir.medium, 'Memory');
  assert.ok(volume('/dev/shm').emptyDir.sizeLimit);
  assert.ok(volume(flags.TESSERA_CACHE_DIR).emptyDir);
  assert.ok(volume('/tmp').emptyDir);

  for (const kind of ['requests', 'limits']) {
    assert.ok(c.resources[kind].cpu && c.resources[kind].memory, `resources.${kind}`);
  }

  // Metrics: scrape annotations and a ServiceMonitor on the Service's port.
  const a = template.metadata.annotations;
  assert.strictEqual(a['prometheus.io/scrape'], 'true');
  assert.strictEqual(Number(a['prometheus.io/port']), ports.metrics);
  const monitor = one(objects, 'ServiceMonitor');
  assert.ok(selects(monitor.spec.selector.matchLabels, service.metadata.labels));
  assert.deepStrictEqual(monitor.spec.endpoints.map((e) => e.port), ['metrics']);

  const pdb = one(objects, 'PodDisruptionBudget');
  assert.ok(selects(pdb.spec.selector.matchLabels, template.metadata.labels));
  return { pod, container: c, flags };
}

function checkGpu({ pod, container, flags }) {
  assert.ok(container.resources.limits['nvidia.com/gpu'] >= 1);
  assert.strictEqual(pod.nodeSelector['nvidia.com/gpu.present'], 'true');
  assert.ok(pod.tolerations.some((t) => t.key === 'nvidia.com/gpu' && t.effect === 'NoSchedule'));
  assert.match(flags.TESSERA_DEVICES, /cuda/);
  assert.match(container.image, /:gpu$/);
}

test('cpu: a Deployment serving the CPU', () => {
  const objects = load('cpu');
  const { pod, flags } = checkWorkload(objects, { tls: false });
  assert.strictEqual(byKind(objects, 'Deployment').length, 1);
  assert.strictEqual(flags.TESSERA_DEVICES, 'cpu');
  assert.strictEqual(pod.nodeSelector, undefined);
});

test('gpu: GPU limits, node selector and toleration', () => {
  const objects = load('gpu');
  assert.strictEqual(byKind(objects, 'Deployment').length, 1);
  checkGpu(checkWorkload(objects, { tls: false }));
});

test('multinode: a LeaderWorkerSet of gpu pods restarted as a group', () => {
  const objects = load('multinode');
  assert.strictEqual(byKind(objects, 'Deployment').length, 0);
  checkGpu(checkWorkload(objects, { tls: false }));
  const set = one(objects, 'LeaderWorkerSet');
  assert.ok(set.spec.leaderWorkerTemplate.size >= 2);
  assert.strictEqual(set.spec.leaderWorkerTemplate.restartPolicy, 'RecreateGroupOnPodRestart');
  // The rank comes from LWS's own environment, which nothing overrides.
  const env = set.spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].env || [];
  assert.ok(!env.some((e) => e.name.startsWith('LWS_')));
  // The pods and flags are the gpu overlay's (kept in step by hand).
  const gpu = load('gpu');
  assert.deepStrictEqual(canonical(set.spec.leaderWorkerTemplate.workerTemplate),
                         canonical(one(gpu, 'Deployment').spec.template));
  assert.deepStrictEqual(one(objects, 'ConfigMap'), one(gpu, 'ConfigMap'));
});

test('helm with tls.enabled: TLS flags, probes through the CLI', () => {
  checkWorkload(load('helm-tls'), { tls: true });
});

// ---- The Helm chart against the overlays -----------------------------------

// An object as the API server compares it: lists of named items (volumes,
// containers, ports, ...) are maps keyed by name, so their order is not
// part of the object (a strategic merge patch may reorder them).
function canonical(v) {
  if (Array.isArray(v)) {
    const items = v.map(canonical);
    if (items.length > 0 && items.every((x) => typeof x?.name === 'string')) {
      items.sort((a, b) => a.name.localeCompare(b.name));
    }
    return items;
  }
  if (v === null || typeof v !== 'object') return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, canonical(x)]));
}

function keyed(objects) {
  return Object.fromEntries(objects.map((o) => [`${o.kind}/${o.metadata.name}`, canonical(o)]));
}

for (const overlay of overlays) {
  test(`helm ${overlay} values render the ${overlay} overlay's objects`, () => {
    const chart = keyed(load(`helm-${overlay}`));
    const kustomize = keyed(load(overlay));
    assert.deepStrictEqual(Object.keys(chart).sort(), Object.keys(kustomize).sort());
    for (const key of Object.keys(kustomize)) {
      assert.deepStrictEqual(chart[key], kustomize[key], key);
    }
  });
}

// ---- ConfigMap keys against tesserad --help --------------------------------

test('every ConfigMap key is a flag tesserad accepts', () => {
  const help = fs.readFileSync(process.env.TESSERAD_HELP, 'utf8');
  const accepted = new Set([...help.matchAll(/^\s+--([a-z_]+)/gm)].map((m) => `TESSERA_${m[1].toUpperCase()}`));
  assert.ok(accepted.has('TESSERA_DEVICES'), 'the help lists flags');
  for (const name of [...overlays, 'helm-tls']) {
    for (const key of Object.keys(one(load(name), 'ConfigMap').data)) {
      assert.ok(accepted.has(key), `${name}: ${key} is no flag of tesserad --help`);
    }
  }
});

// tesserad started with a ConfigMap's variables as its environment; the
// addresses, files and devices the pod provides are replaced by local ones.
// Resolves to the exit status after SIGTERM once it listens.
function runWithConfig(data) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tesserad-'));
  fs.writeFileSync(path.join(dir, 'token'), 'test-token\n');
  const env = {
    ...data,
    TESSERA_LISTEN: '127.0.0.1:0',
    TESSERA_METRICS_LISTEN: '127.0.0.1:0',
    TESSERA_PORT_FILE: path.join(dir, 'port'),
    TESSERA_TOKEN_FILE: path.join(dir, 'token'),
    TESSERA_CACHE_DIR: dir,
    TESSERA_DEVICES: 'cpu',  // no GPU here: the other values are the point
  };
  const daemon = spawn(process.env.TESSERAD, [], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  daemon.stderr.on('data', (d) => { log += d; });
  return new Promise((resolve, reject) => {
    const poll = setInterval(() => {
      if (fs.existsSync(env.TESSERA_PORT_FILE)) {
        clearInterval(poll);
        daemon.kill('SIGTERM');
      }
    }, 50);
    daemon.on('exit', (code) => {
      clearInterval(poll);
      fs.rmSync(dir, { recursive: true, force: true });
      if (code === 0) resolve(log);
      else reject(new Error(`tesserad exited ${code}: ${log}`));
    });
  });
}

for (const name of [...overlays, 'helm-tls']) {
  test(`${name}: tesserad starts with the ConfigMap's values`, async () => {
    const { data } = one(load(name), 'ConfigMap');
    // The TLS files of the rendering are stand-ins, not PEM.
    const usable = Object.fromEntries(Object.entries(data).filter(([k]) => !k.startsWith('TESSERA_TLS_')));
    const log = await runWithConfig(usable);
    assert.match(log, /draining/);
  });
}

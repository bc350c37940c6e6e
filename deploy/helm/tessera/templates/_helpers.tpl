{{/* Labels of every object, and the selector of the pods. */}}
{{- define "tessera.labels" -}}
app.kubernetes.io/name: tessera
{{- end }}

{{/* The pod template of the Deployment and of the LeaderWorkerSet. */}}
{{- define "tessera.podTemplate" -}}
metadata:
  labels:
    {{- include "tessera.labels" . | nindent 4 }}
  annotations:
    prometheus.io/scrape: "true"
    prometheus.io/port: "9090"
    prometheus.io/path: /metrics
spec:
  terminationGracePeriodSeconds: {{ add .Values.preStopSeconds .Values.drainTimeoutSeconds 25 }}
  enableServiceLinks: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    fsGroup: 10001
    seccompProfile:
      type: RuntimeDefault
  {{- if gt .Values.gpu.count 0 }}
  nodeSelector:
    {{- toYaml .Values.gpu.nodeSelector | nindent 4 }}
  tolerations:
    {{- toYaml .Values.gpu.tolerations | nindent 4 }}
  {{- end }}
  containers:
  - name: tesserad
    image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    envFrom:
    - configMapRef:
        name: tessera-config
    ports:
    - name: grpc
      containerPort: 50051
    - name: metrics
      containerPort: 9090
    startupProbe:
      {{- include "tessera.probeAction" . | nindent 6 }}
      periodSeconds: {{ .Values.startupProbe.periodSeconds }}
      failureThreshold: {{ .Values.startupProbe.failureThreshold }}
    readinessProbe:
      {{- include "tessera.probeAction" . | nindent 6 }}
      periodSeconds: 5
      failureThreshold: 2
    livenessProbe:
      {{- include "tessera.probeAction" . | nindent 6 }}
      periodSeconds: 10
      timeoutSeconds: 5
      failureThreshold: 6
    lifecycle:
      preStop:
        sleep:
          seconds: {{ .Values.preStopSeconds }}
    resources:
      requests:
        {{- toYaml .Values.resources.requests | nindent 8 }}
      limits:
        {{- toYaml .Values.resources.limits | nindent 8 }}
        {{- if gt .Values.gpu.count 0 }}
        nvidia.com/gpu: {{ .Values.gpu.count }}
        {{- end }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      runAsNonRoot: true
      capabilities:
        drop:
        - ALL
    volumeMounts:
    - name: auth
      mountPath: /etc/tessera/secret
      readOnly: true
    - name: cache
      mountPath: /var/cache/tessera
    - name: dshm
      mountPath: /dev/shm
    - name: tmp
      mountPath: /tmp
  volumes:
  - name: auth
    secret:
      secretName: tessera-auth
      defaultMode: 288  # 0440: the fsGroup reads it
  - name: cache
    emptyDir:
      sizeLimit: {{ .Values.cache.size }}
  - name: dshm
    emptyDir:
      medium: Memory
      sizeLimit: {{ .Values.shmSize }}
  - name: tmp
    emptyDir:
      sizeLimit: 1Gi
{{- end }}

{{/* How the probes reach grpc.health.v1: natively in plaintext; with TLS,
     which kubelet's gRPC probe does not speak, through `tessera ping`. */}}
{{- define "tessera.probeAction" -}}
{{- if .Values.tls.enabled -}}
exec:
  command:
  - /usr/bin/tessera
  - --tls_ca=/etc/tessera/secret/tls.crt
  - {{ printf "--tls_server_name=%s" .Values.tls.serverName }}
  - ping
{{- else -}}
grpc:
  port: 50051
{{- end }}
{{- end }}

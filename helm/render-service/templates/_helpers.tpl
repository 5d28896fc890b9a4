{{/*
Theory of operation
-------------------
Every pod that runs render-service (the render Deployment, the gateway Deployment and the
sidecar workload) is built from ONE container helper, "render-service.container", so they all get:
  * envFrom the one ConfigMap (model, template and parser flags as RENDER_SERVICE_* variables),
  * the one stream-state Secret mounted as a file, named by RENDER_SERVICE_STREAM_STATE_SECRET_FILE,
  * the same volumes (model, chat template, /tmp) and probes on /health.
Pods carry checksums of the rendered ConfigMap and Secret, so a change rolls every replica.
A stream started on one replica can then continue on any other: same tokenizer, template,
parsers and MAC key.
*/}}

{{- define "render-service.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "render-service.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "render-service.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component: (dict "root" $ "component" "render") */}}
{{- define "render-service.selectorLabels" -}}
app.kubernetes.io/name: {{ include "render-service.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "render-service.labels" -}}
helm.sh/chart: {{ include "render-service.chart" .root }}
{{ include "render-service.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: render-service
{{- end }}

{{- define "render-service.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "render-service.configMapName" -}}
{{- printf "%s-config" (include "render-service.fullname" .) }}
{{- end }}

{{- define "render-service.gatewayConfigMapName" -}}
{{- printf "%s-gateway" (include "render-service.fullname" .) }}
{{- end }}

{{- define "render-service.streamStateSecretName" -}}
{{- .Values.streamState.existingSecret | default (printf "%s-stream-state" (include "render-service.fullname" .)) }}
{{- end }}

{{- define "render-service.streamStateSecretKey" -}}
{{- if .Values.streamState.existingSecret }}{{ .Values.streamState.existingSecretKey }}{{ else }}stream-state-secret{{ end }}
{{- end }}

{{/*
The stream-state key, base64-encoded, when the chart owns the Secret. In order of preference:
  1. streamState.secret (an explicit value: deterministic, for GitOps and `helm template`);
  2. the value of the Secret already in the cluster (`lookup`), so `helm upgrade` keeps the key
     and in-flight streams stay valid;
  3. a new random key (first install, or any render without cluster access: `helm template`,
     `--dry-run`, Argo CD; those would rotate the key on every sync: use 1 or existingSecret).
The result is memoised in .Values so that every template of one render (the Secret and the
checksum annotations) sees the same random value.
*/}}
{{- define "render-service.streamStateSecretB64" -}}
{{- if not (hasKey .Values.streamState "_resolvedB64") }}
{{- $b64 := "" }}
{{- if .Values.streamState.secret }}
{{- if lt (len .Values.streamState.secret) 16 }}
{{- fail "streamState.secret must be at least 16 characters (render-service refuses shorter keys)" }}
{{- end }}
{{- $b64 = .Values.streamState.secret | b64enc }}
{{- else }}
{{- $live := lookup "v1" "Secret" .Release.Namespace (include "render-service.streamStateSecretName" .) }}
{{- if and $live (hasKey $live "data") (hasKey (get $live "data") "stream-state-secret") }}
{{- $b64 = index $live.data "stream-state-secret" }}
{{- else }}
{{- $b64 = randAlphaNum 64 | b64enc }}
{{- end }}
{{- end }}
{{- $_ := set .Values.streamState "_resolvedB64" $b64 }}
{{- end }}
{{- index .Values.streamState "_resolvedB64" }}
{{- end }}

{{/* Where every render-service container finds the shared files. */}}
{{- define "render-service.streamStateDir" -}}/etc/render-service/stream-state{{- end }}
{{- define "render-service.chatTemplateDir" -}}/etc/render-service/chat-template{{- end }}

{{/* Pod annotations that roll every replica when the shared config or key changes. */}}
{{- define "render-service.checksumAnnotations" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/stream-state: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- if and (not .Values.streamState.secret) .Values.streamState.existingSecret }}
render-service/stream-state-secret: {{ printf "%s/%s" .Values.streamState.existingSecret .Values.streamState.existingSecretKey | quote }}
{{- end }}
{{- end }}

{{/* Prometheus scrape annotations: (dict "root" $ "port" 8000) */}}
{{- define "render-service.scrapeAnnotations" -}}
{{- if .root.Values.metrics.scrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{/* One probe on /health: (dict "probe" $settings "host" $host "port" $port).
A container bound to loopback (a sidecar) cannot be probed by the kubelet over the pod IP, so
it gets the same stdlib one-liner the image's HEALTHCHECK uses. */}}
{{- define "render-service.probe" -}}
{{- /* (dict "probe" $settings "host" $host "port" $port "portName" $name) */ -}}
{{- if has .host (list "127.0.0.1" "localhost" "::1") }}
exec:
  command:
    - python
    - -c
    - {{ printf "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%v/health', timeout=%v)" (int .port) (int .probe.timeoutSeconds) | quote }}
{{- else }}
httpGet:
  path: /health
  port: {{ .portName | default "http" }}
{{- end }}
{{- toYaml .probe | nindent 0 }}
{{- end }}

{{/*
The render-service container, shared by every workload:
(dict "root" $ "name" "render" "args" (list "serve") "host" "0.0.0.0" "port" 8000 "portName" "http"
      "workers" 1 "rendererNumWorkers" 1 "resources" (dict) "extraEnv" (list)
      "extraVolumeMounts" (list))
*/}}
{{- define "render-service.container" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
- name: {{ .name }}
  image: {{ include "render-service.image" $root | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
  ports:
    - name: {{ .portName | default "http" }}
      containerPort: {{ .port }}
      protocol: TCP
  envFrom:
    - configMapRef:
        name: {{ include "render-service.configMapName" $root }}
  env:
    - name: RENDER_SERVICE_HOST
      value: {{ .host | quote }}
    - name: RENDER_SERVICE_PORT
      value: {{ .port | quote }}
    - name: RENDER_SERVICE_WORKERS
      value: {{ .workers | quote }}
    - name: RENDER_SERVICE_RENDERER_NUM_WORKERS
      value: {{ .rendererNumWorkers | quote }}
    - name: RENDER_SERVICE_STREAM_STATE_SECRET_FILE
      value: {{ printf "%s/%s" (include "render-service.streamStateDir" $root) (include "render-service.streamStateSecretKey" $root) }}
    {{- if $v.chatTemplateContent }}
    - name: RENDER_SERVICE_CHAT_TEMPLATE
      value: {{ printf "%s/chat_template.jinja" (include "render-service.chatTemplateDir" $root) }}
    {{- end }}
    {{- with $v.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with .extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  volumeMounts:
    - name: stream-state
      mountPath: {{ include "render-service.streamStateDir" $root }}
      readOnly: true
    - name: tmp
      mountPath: /tmp
    {{- if $v.chatTemplateContent }}
    - name: chat-template
      mountPath: {{ include "render-service.chatTemplateDir" $root }}
      readOnly: true
    {{- end }}
    {{- if $v.modelVolume }}
    - name: model
      mountPath: {{ $v.modelMountPath }}
      readOnly: true
    {{- end }}
    {{- with .extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  startupProbe:
    {{- include "render-service.probe" (dict "probe" $v.probes.startup "host" .host "port" .port "portName" .portName) | trim | nindent 4 }}
  readinessProbe:
    {{- include "render-service.probe" (dict "probe" $v.probes.readiness "host" .host "port" .port "portName" .portName) | trim | nindent 4 }}
  livenessProbe:
    {{- include "render-service.probe" (dict "probe" $v.probes.liveness "host" .host "port" .port "portName" .portName) | trim | nindent 4 }}
  {{- with .resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The volumes behind "render-service.container" (same names in every pod). */}}
{{- define "render-service.volumes" -}}
- name: stream-state
  secret:
    secretName: {{ include "render-service.streamStateSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ include "render-service.streamStateSecretKey" . }}
        path: {{ include "render-service.streamStateSecretKey" . }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if .Values.chatTemplateContent }}
- name: chat-template
  configMap:
    name: {{ include "render-service.configMapName" . }}
    items:
      - key: chat_template.jinja
        path: chat_template.jinja
{{- end }}
{{- with .Values.modelVolume }}
- name: model
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pod-level settings shared by every workload. */}}
{{- define "render-service.podSpecCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
automountServiceAccountToken: {{ .Values.automountServiceAccountToken }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

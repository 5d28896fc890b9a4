{{/*
Theory of operation
-------------------
Every pod that runs render-service (the render Deployment, the gateway Deployment and the
sidecar workload) is built from ONE container helper, "render-service.container", so they all get:
  * envFrom the one ConfigMap (model, template and parser flags as RENDER_SERVICE_* variables),
  * the one stream-state Secret mounted as a file, named by RENDER_SERVICE_STREAM_STATE_SECRET_FILE,
  * the same volumes (model, chat template, /tmp) and probes on /health.
  * the optional API key as RENDER_SERVICE_API_KEY from ONE Secret (secretKeyRef), never the ConfigMap.
Pods carry checksums of the rendered ConfigMap and Secrets, so a change rolls every replica.
A stream started on one replica can then continue on any other: same tokenizer, template,
parsers and MAC key. To keep it that way, no per-workload setting (env, *.extraEnv,
gateway.extraArgs) may name a variable the shared ConfigMap or Secrets provide: see
"render-service.sharedEnv" and "render-service.checkEnv"; such values fail the render.
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

{{/* The API key Secret (name, key), and whether there is one. */}}
{{- define "render-service.apiKeyEnabled" -}}
{{- if and .Values.apiKey.existingSecret .Values.apiKey.value }}
{{- fail "set apiKey.existingSecret (a Secret you manage) or apiKey.value, not both" }}
{{- end }}
{{- if or .Values.apiKey.existingSecret .Values.apiKey.value }}true{{ end }}
{{- end }}

{{- define "render-service.apiKeySecretName" -}}
{{- .Values.apiKey.existingSecret | default (printf "%s-api-key" (include "render-service.fullname" .)) }}
{{- end }}

{{- define "render-service.apiKeySecretKey" -}}
{{- if .Values.apiKey.existingSecret }}{{ .Values.apiKey.existingSecretKey }}{{ else }}api-key{{ end }}
{{- end }}

{{/* RENDER_SERVICE_<FLAG> of a camelCase config key: reasoningParser -> RENDER_SERVICE_REASONING_PARSER. */}}
{{- define "render-service.flagEnv" -}}
{{- printf "RENDER_SERVICE_%s" (. | snakecase | upper) }}
{{- end }}

{{/*
The config keys of every model, template, parser and image flag of the CLI (those of
values.yaml `config`). Listed here as well because Helm deletes a key a user sets to null
("keep the default"), and its variable must stay reserved then too. tests/deploy/test_helm.py
checks this list against the CLI's flags.
*/}}
{{- define "render-service.modelFlags" -}}
model servedModelName tokenizer revision tokenizerMode trustRemoteCode maxModelLen maxLogprobs generationConfig
chatTemplate chatTemplateContentFormat trustRequestChatTemplate trustRequestMmKwargs
defaultChatTemplateKwargs reasoningParser toolCallParser toolStrictLevel enableAutoToolChoice
excludeToolsWhenToolChoiceNone reasoningEffortMap allowedLocalMediaPath allowedMediaDomains
mmHasherAlgorithm mmProcessorCacheGb interleaveMmStrings dtype limitMmPerPrompt
anthropicDisabledThinkingEffort enablePromptEmbeds
{{- end }}

{{/*
Variables every replica must share, as JSON {name: where it comes from}: each config key
(set or not: an unset one means the same CLI default everywhere) and each config.extra key
(the ConfigMap), the image's MODEL alias, and what the Secrets provide. A per-workload value
for any of them would give replicas different models, templates, parsers or keys, and a
stream could no longer move between them.
*/}}
{{- define "render-service.sharedEnv" -}}
{{- $shared := dict }}
{{- $keys := concat (include "render-service.modelFlags" . | trim | replace "\n" " " | splitList " ") (keys (omit .Values.config "extra")) }}
{{- range $key := $keys }}
{{- $_ := set $shared (include "render-service.flagEnv" $key) (printf "config.%s (the shared ConfigMap)" $key) }}
{{- end }}
{{- range $key, $_ := .Values.config.extra | default dict }}
{{- $_ := set $shared (include "render-service.flagEnv" $key) (printf "config.extra.%s (the shared ConfigMap)" $key) }}
{{- end }}
{{- $_ := set $shared "MODEL" "config.model (the shared ConfigMap; MODEL is the image's alias of RENDER_SERVICE_MODEL)" }}
{{- $_ := set $shared "RENDER_SERVICE_CHAT_TEMPLATE" "config.chatTemplate or chatTemplateContent (the shared ConfigMap)" }}
{{- $_ := set $shared "RENDER_SERVICE_API_KEY" "apiKey.existingSecret or apiKey.value (the shared API-key Secret)" }}
{{- $_ := set $shared "RENDER_SERVICE_STREAM_STATE_SECRET" "streamState (the shared stream-state Secret)" }}
{{- $_ := set $shared "RENDER_SERVICE_STREAM_STATE_SECRET_FILE" "streamState (the shared stream-state Secret)" }}
{{- toJson $shared }}
{{- end }}

{{/* Fails the render when a per-workload env list names a shared variable:
(dict "root" $ "path" "render.extraEnv" "env" $list) */}}
{{- define "render-service.checkEnv" -}}
{{- $shared := include "render-service.sharedEnv" .root | fromJson }}
{{- $path := .path }}
{{- range .env | default list }}
{{- $name := .name | default "" | toString }}
{{- if hasKey $shared $name }}
{{- fail (printf "%s: %s comes from %s, which every replica shares; set it there, not per workload (a different value in one workload splits the replicas: streams could not move between them)" $path $name (get $shared $name)) }}
{{- end }}
{{- end }}
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
{{- if .Values.apiKey.existingSecret }}
render-service/api-key-secret: {{ printf "%s/%s" .Values.apiKey.existingSecret .Values.apiKey.existingSecretKey | quote }}
{{- else if .Values.apiKey.value }}
checksum/api-key: {{ include (print .Template.BasePath "/api-key-secret.yaml") . | sha256sum }}
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

{{/* One probe, on /health unless "path" is given: (dict "probe" $settings "host" $host "port" $port).
A container bound to loopback (a sidecar) cannot be probed by the kubelet over the pod IP, so
it gets the same stdlib one-liner the image's HEALTHCHECK uses. */}}
{{- define "render-service.probe" -}}
{{- /* (dict "probe" $settings "host" $host "port" $port "portName" $name "path" $path) */ -}}
{{- $path := .path | default "/health" }}
{{- if has .host (list "127.0.0.1" "localhost" "::1") }}
exec:
  command:
    - python
    - -c
    - {{ printf "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%v%s', timeout=%v)" (int .port) $path (int .probe.timeoutSeconds) | quote }}
{{- else }}
httpGet:
  path: {{ $path }}
  port: {{ .portName | default "http" }}
{{- end }}
{{- toYaml .probe | nindent 0 }}
{{- end }}

{{/*
The render-service container, shared by every workload:
(dict "root" $ "name" "render" "args" (list "serve") "host" "0.0.0.0" "port" 8000 "portName" "http"
      "workers" 1 "rendererNumWorkers" 1 "resources" (dict) "extraEnv" (list)
      "extraEnvPath" "render.extraEnv" "extraVolumeMounts" (list))
env and extraEnv are checked against the shared variables ("render-service.checkEnv");
extraEnvPath names the value in the error message.
Startup and liveness probes use /health; readiness uses the optional "readinessPath" (default
/health): the gateway passes /ready, which is 503 until an engine is healthy, while its /health
only says the process is up. */}}
{{- define "render-service.container" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- include "render-service.checkEnv" (dict "root" $root "path" "env" "env" $v.env) }}
{{- include "render-service.checkEnv" (dict "root" $root "path" .extraEnvPath "env" .extraEnv) -}}
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
    {{- if include "render-service.apiKeyEnabled" $root }}
    - name: RENDER_SERVICE_API_KEY
      valueFrom:
        secretKeyRef:
          name: {{ include "render-service.apiKeySecretName" $root }}
          key: {{ include "render-service.apiKeySecretKey" $root }}
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
    {{- include "render-service.probe" (dict "probe" $v.probes.readiness "host" .host "port" .port "portName" .portName "path" .readinessPath) | trim | nindent 4 }}
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

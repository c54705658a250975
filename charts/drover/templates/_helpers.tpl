{{/*
Names. The full name is "<release>-drover" (or the release name when it already says "drover"),
cut to 52 characters so that every "<fullname>-<suffix>" below stays a valid 63-character DNS label.
*/}}
{{- define "drover.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "drover.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>": include "drover.suffixed" (list . "server") */}}
{{- define "drover.suffixed" -}}
{{- printf "%s-%s" (include "drover.fullname" (index . 0)) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "drover.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object: include "drover.labels" (list . "server") */}}
{{- define "drover.labels" -}}
{{- $ := index . 0 -}}
helm.sh/chart: {{ include "drover.chart" $ }}
{{ include "drover.selectorLabels" . }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
app.kubernetes.io/part-of: drover
{{- end -}}

{{/* Selector labels: include "drover.selectorLabels" (list . "server") */}}
{{- define "drover.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "drover.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Images. */}}
{{- define "drover.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "drover.executorImage" -}}
{{- $tag := .Values.executor.image.tag | default .Values.image.tag | default .Chart.AppVersion -}}
{{- printf "%s:%s" .Values.executor.image.repository $tag -}}
{{- end -}}

{{/* ServiceAccounts. */}}
{{- define "drover.serverServiceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "drover.suffixed" (list . "server")) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "drover.executorServiceAccount" -}}
{{- if .Values.executor.serviceAccount.create -}}
{{- .Values.executor.serviceAccount.name | default (include "drover.suffixed" (list . "executor")) -}}
{{- else -}}
{{- .Values.executor.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret with admin-token, secret-key and enrollment-token. */}}
{{- define "drover.tokensSecret" -}}
{{- .Values.auth.existingSecret | default (include "drover.suffixed" (list . "tokens")) -}}
{{- end -}}

{{/*
The database. Exactly one of the bundled Postgres and an external one (existingSecret or url);
anything else fails rendering with the reason.
*/}}
{{- define "drover.validateDatabase" -}}
{{- $pg := .Values.postgres -}}
{{- $external := or $pg.external.existingSecret $pg.external.url -}}
{{- if and $pg.bundled.enabled $external -}}
{{- fail "postgres: both postgres.bundled.enabled and postgres.external are set; choose one (set postgres.bundled.enabled=false to use the external database)" -}}
{{- end -}}
{{- if not (or $pg.bundled.enabled $external) -}}
{{- fail "postgres: no database configured; set postgres.bundled.enabled=true (to try Drover out), or postgres.external.existingSecret (a Secret with the URL under postgres.external.urlKey) or postgres.external.url" -}}
{{- end -}}
{{- if and $pg.external.existingSecret $pg.external.url -}}
{{- fail "postgres.external: set existingSecret or url, not both" -}}
{{- end -}}
{{- end -}}

{{/* The Secret and key the server reads DROVER_DATABASE_URL from. */}}
{{- define "drover.databaseSecret" -}}
{{- include "drover.validateDatabase" . -}}
{{- if .Values.postgres.bundled.enabled -}}
{{- include "drover.suffixed" (list . "postgres") -}}
{{- else if .Values.postgres.external.existingSecret -}}
{{- .Values.postgres.external.existingSecret -}}
{{- else -}}
{{- include "drover.suffixed" (list . "database") -}}
{{- end -}}
{{- end -}}

{{- define "drover.databaseSecretKey" -}}
{{- if .Values.postgres.bundled.enabled -}}url{{- else if .Values.postgres.external.existingSecret -}}{{ .Values.postgres.external.urlKey }}{{- else -}}url{{- end -}}
{{- end -}}

{{/*
The Secret the migration Job reads the URL from. A pre-install hook runs before the release's own
Secrets exist, so with postgres.external.url it reads a hook Secret of its own ("<fullname>-migrate").
*/}}
{{- define "drover.migrationDatabaseSecret" -}}
{{- if and (not .Values.postgres.bundled.enabled) (not .Values.postgres.external.existingSecret) -}}
{{- include "drover.suffixed" (list . "migrate") -}}
{{- else -}}
{{- include "drover.databaseSecret" . -}}
{{- end -}}
{{- end -}}

{{/* The checkpoint volume (the same directory for the server and every executor); none with an
object store. */}}
{{- define "drover.checkpointVolume" -}}
{{- if ne .Values.checkpoints.type "objectStore" }}
- name: checkpoints
{{- if eq .Values.checkpoints.type "hostPath" }}
  hostPath:
    path: {{ .Values.checkpoints.hostPath.path }}
    type: DirectoryOrCreate
{{- else }}
  persistentVolumeClaim:
    claimName: {{ .Values.checkpoints.pvc.existingClaim | default (include "drover.suffixed" (list . "checkpoints")) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The checkpoint volume's mount, where there is one. */}}
{{- define "drover.checkpointMount" -}}
{{- if ne .Values.checkpoints.type "objectStore" }}
- name: checkpoints
  mountPath: /var/lib/drover/checkpoints
{{- end }}
{{- end -}}

{{/* The object store's settings, for the server and the executors (the standard AWS variables). */}}
{{- define "drover.objectStoreEnv" -}}
{{- if eq .Values.checkpoints.type "objectStore" }}
{{- with .Values.checkpoints.objectStore }}
{{- if .region }}
- name: AWS_REGION
  value: {{ .region | quote }}
{{- end }}
{{- if .endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ .endpoint | quote }}
{{- end }}
{{- if .allowHttp }}
- name: AWS_ALLOW_HTTP
  value: "true"
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The object store's credentials Secret, as environment variables. */}}
{{- define "drover.objectStoreEnvFrom" -}}
{{- if and (eq .Values.checkpoints.type "objectStore") .Values.checkpoints.objectStore.existingSecret }}
- secretRef:
    name: {{ .Values.checkpoints.objectStore.existingSecret }}
{{- end }}
{{- end -}}

{{/* The hardened container securityContext every Drover container runs with. */}}
{{- define "drover.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "drover.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
An init container that hands hostPath directories to uid 10001: the kubelet creates a missing one
owned by root. Root, but with CAP_CHOWN only, and only for the directories given (not recursive).
include "drover.chownInit" (list (list "/mnt/data" "/mnt/checkpoints") image pullPolicy)
*/}}
{{- define "drover.chownInit" -}}
- name: chown-host-paths
  image: {{ index . 1 }}
  imagePullPolicy: {{ index . 2 }}
  command: ["chown", "10001:10001"{{ range index . 0 }}, {{ . | quote }}{{ end }}]
  securityContext:
    runAsNonRoot: false
    runAsUser: 0
    runAsGroup: 0
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
      add: ["CHOWN"]
    seccompProfile:
      type: RuntimeDefault
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      memory: 64Mi
{{- end -}}

{{/* A random secret value, or the one already stored under key in the existing Secret (lookup). */}}
{{- define "drover.keepOrGenerate" -}}
{{- $existing := index . 0 -}}
{{- $key := index . 1 -}}
{{- $fresh := index . 2 -}}
{{- if and $existing $existing.data (hasKey $existing.data $key) -}}
{{- index $existing.data $key -}}
{{- else -}}
{{- $fresh | b64enc -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the gateway's certificate authority (tls.crt, tls.key). */}}
{{- define "drover.caSecret" -}}
{{- .Values.gateway.caSecret | default (include "drover.suffixed" (list . "ca")) -}}
{{- end -}}

{{/*
Whether the chart renders its own authority "<fullname>-ca": it issues the server's certificate
(server.tls.source generated) and, unless gateway.caSecret names another, the gateway's.
*/}}
{{- define "drover.rendersCa" -}}
{{- if or (eq .Values.server.tls.source "generated") (and .Values.gateway.mutualTls (not .Values.gateway.caSecret)) -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret with the server's certificate (tls.crt, tls.key); empty for plain HTTP. */}}
{{- define "drover.serverTlsSecret" -}}
{{- $source := .Values.server.tls.source -}}
{{- if eq $source "existingSecret" -}}
{{- if not .Values.server.tls.existingSecret -}}
{{- fail "server.tls.existingSecret: name a kubernetes.io/tls Secret (server.tls.source is existingSecret)" -}}
{{- end -}}
{{- .Values.server.tls.existingSecret -}}
{{- else if eq $source "certManager" -}}
{{- if not .Values.server.tls.certManager.issuerRef.name -}}
{{- fail "server.tls.certManager.issuerRef.name: name cert-manager's issuer (server.tls.source is certManager)" -}}
{{- end -}}
{{- include "drover.suffixed" (list . "server-tls") -}}
{{- else if eq $source "generated" -}}
{{- include "drover.suffixed" (list . "server-tls") -}}
{{- end -}}
{{- end -}}

{{/* The names the server's certificate is for, as a JSON list: the Service's, then server.tls.dnsNames. */}}
{{- define "drover.serverDnsNames" -}}
{{- $name := include "drover.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- concat (list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns)) .Values.server.tls.dnsNames | toJson -}}
{{- end -}}

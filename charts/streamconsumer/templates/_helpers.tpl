{{- define "streamconsumer.name" -}}
{{- .Values.fullnameOverride | default (printf "%s-operator" .Release.Name) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The operator image: by digest when one is given (immutable), else by tag. */}}
{{- define "streamconsumer.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "streamconsumer.selectorLabels" -}}
app.kubernetes.io/name: streamconsumer-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "streamconsumer.labels" -}}
{{ include "streamconsumer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "streamconsumer.caSecret" -}}
{{- .Values.tls.caSecretName | default (printf "%s-ca" (include "streamconsumer.name" .)) -}}
{{- end -}}

{{- define "streamconsumer.scheme" -}}
{{- if eq .Values.tls.mode "disabled" }}http{{ else }}https{{ end -}}
{{- end -}}

{{/* The ConfigMap holding the CA certificate (never its key), for the ServiceMonitor. */}}
{{- define "streamconsumer.caBundle" -}}
{{ include "streamconsumer.name" . }}-ca-bundle
{{- end -}}

{{- /* "true" unless crds.install is false; true where `crds` is absent: a release upgraded
with --reuse-values from 0.1.x keeps that chart's values, which had none. */}}
{{- define "streamconsumer.installCRD" -}}
{{- ne (toString (dig "crds" "install" true .Values.AsMap)) "false" -}}
{{- end -}}

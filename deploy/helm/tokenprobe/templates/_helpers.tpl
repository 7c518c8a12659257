{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "tokenprobe.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified name: the release name, with the chart's name unless it already holds it. */}}
{{- define "tokenprobe.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tokenprobe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tokenprobe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tokenprobe.labels" -}}
{{ include "tokenprobe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "tokenprobe.secretName" -}}
{{- if .Values.apiKey.existingSecret -}}
{{- .Values.apiKey.existingSecret -}}
{{- else -}}
{{- include "tokenprobe.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* Whether the pod mounts an API key Secret at all. */}}
{{- define "tokenprobe.hasSecret" -}}
{{- if or .Values.apiKey.existingSecret .Values.apiKey.value -}}true{{- end -}}
{{- end -}}

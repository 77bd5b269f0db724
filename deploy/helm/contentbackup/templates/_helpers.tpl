{{/* The name every object shares: the release's, or "contentbackup". */}}
{{- define "contentbackup.name" -}}
{{- if eq .Release.Name "contentbackup" -}}contentbackup{{- else -}}{{ printf "%s-contentbackup" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "contentbackup.selector" -}}
app.kubernetes.io/name: contentbackup
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "contentbackup.labels" -}}
{{ include "contentbackup.selector" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "contentbackup.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Names and labels shared by every template. */}}

{{- define "fitgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name; every object name starts with it. */}}
{{- define "fitgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fitgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fitgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fitgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fitgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fitgate
{{- end -}}

{{- define "fitgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fitgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The objects fitgate touches under one name, by the keys of admission/kube/rbac.py NAMED.
RBAC rules with a resourceName and the configuration fitgate reads both take them from here.
*/}}
{{- define "fitgate.names" -}}
{{- $full := include "fitgate.fullname" . -}}
lease: {{ printf "%s-leader" $full }}
tlsSecret: {{ printf "%s-webhook-tls" $full }}
mutatingWebhook: {{ $full }}
validatingWebhook: {{ $full }}
service: {{ $full }}
certificate: {{ printf "%s-webhook" $full }}
{{- end -}}

{{/* true when the webhook runs outside the cluster (externalWebhook.url): no Deployment. */}}
{{- define "fitgate.external" -}}
{{- if .Values.externalWebhook.url -}}true{{- end -}}
{{- end -}}

{{/* The certificate mode fitgate runs with: external, cert-manager or self-managed. */}}
{{- define "fitgate.certMode" -}}
{{- if .Values.externalWebhook.url -}}external{{- else -}}{{ .Values.certificates.mode }}{{- end -}}
{{- end -}}

{{/* clientConfig of one webhook; call with (dict "ctx" $ "path" "/mutate-jobs"). */}}
{{- define "fitgate.clientConfig" -}}
{{- $ctx := .ctx -}}
{{- if $ctx.Values.externalWebhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" $ctx.Values.externalWebhook.url) .path | quote }}
{{- with $ctx.Values.externalWebhook.caBundle }}
caBundle: {{ . | quote }}
{{- end }}
{{- else }}
service:
  name: {{ include "fitgate.fullname" $ctx }}
  namespace: {{ $ctx.Release.Namespace }}
  path: {{ .path | quote }}
  port: {{ $ctx.Values.service.webhookPort }}
{{- end }}
{{- end -}}

{{/* Annotations of the webhook configurations: cert-manager injects the CA bundle. */}}
{{- define "fitgate.webhookAnnotations" -}}
{{- if eq (include "fitgate.certMode" .) "cert-manager" -}}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "fitgate.names" . | fromYaml).certificate }}
{{- end -}}
{{- end -}}

{{/* Namespaces no webhook acts in: fitgate's own, and those the values list. */}}
{{- define "fitgate.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- range (concat (list .Release.Namespace) .Values.webhook.excludeNamespaces | uniq) }}
      - {{ . | quote }}
      {{- end }}
{{- end -}}

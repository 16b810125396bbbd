{{/* Chart name. */}}
{{- define "karpenter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: the release name when it already contains the chart name. */}}
{{- define "karpenter.fullname" -}}
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

{{/* Labels of every object. */}}
{{- define "karpenter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "karpenter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels. */}}
{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Metadata block shared by every object: labels and the additional annotations. */}}
{{- define "karpenter.metadata" -}}
labels:
  {{- include "karpenter.labels" . | nindent 2 }}
{{- with .Values.additionalAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* ServiceAccount name. */}}
{{- define "karpenter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpenter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Controller image: the digest wins over the tag; the tag defaults to appVersion. */}}
{{- define "karpenter.controller.image" -}}
{{- if .Values.controller.image.digest }}
{{- printf "%s:%s@%s" .Values.controller.image.repository (default .Chart.AppVersion .Values.controller.image.tag) .Values.controller.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.controller.image.repository (default .Chart.AppVersion .Values.controller.image.tag) }}
{{- end }}
{{- end }}

{{/* FEATURE_GATES: one comma-joined string, upstream's gate names. */}}
{{- define "karpenter.featureGates" -}}
{{- $gates := .Values.settings.featureGates -}}
{{- printf "NodeRepair=%t,ReservedCapacity=%t,SpotToSpotConsolidation=%t,NodeOverlay=%t,StaticCapacity=%t,CapacityBuffer=%t" $gates.nodeRepair $gates.reservedCapacity $gates.spotToSpotConsolidation $gates.nodeOverlay $gates.staticCapacity $gates.capacityBuffer }}
{{- end }}

{{/* Required values fail the render with a message naming the value. */}}
{{- define "karpenter.validate" -}}
{{- if and (eq .Values.cloudProvider "aws") (not (include "karpenter.clusterName" .)) }}
{{- fail "settings.clusterName is required" }}
{{- end }}
{{- end }}

{{/* Cluster name; pre-v0.33 guides set it as settings.aws.clusterName, still honoured. */}}
{{- define "karpenter.clusterName" -}}
{{- .Values.settings.clusterName | default (dig "aws" "clusterName" "" .Values.settings) }}
{{- end }}

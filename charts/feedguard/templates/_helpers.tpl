{{/* _helpers.tpl — names, labels and shared snippets of the feedguard chart. */}}

{{- define "feedguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-feedguard, or the release name alone when it already contains the chart name. */}}
{{- define "feedguard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "feedguard.controller.fullname" -}}{{ include "feedguard.fullname" . }}-controller{{- end -}}
{{- define "feedguard.agent.fullname" -}}{{ include "feedguard.fullname" . }}-agent{{- end -}}
{{- define "feedguard.ca.secretName" -}}{{ include "feedguard.fullname" . }}-ca{{- end -}}
{{- define "feedguard.controller.tlsSecretName" -}}{{ include "feedguard.fullname" . }}-controller-tls{{- end -}}
{{- define "feedguard.agent.tlsSecretName" -}}{{ include "feedguard.fullname" . }}-agent-tls{{- end -}}

{{/* The controller Service's DNS names: the serving certificate's SANs and the agents' target. */}}
{{- define "feedguard.controller.dnsNames" -}}
{{- $svc := include "feedguard.controller.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson -}}
{{- end -}}

{{- define "feedguard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "feedguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: feedguard
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* selectorLabels COMPONENT — immutable selector of the controller or agent pods. */}}
{{- define "feedguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "feedguard.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "feedguard.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The agent's view of the host cgroup tree: "kubepods" (kubelet's pod tree only) or "all".
"all" is only ever an explicit choice: an empty agent.cgroup.hostMount means "kubepods", which
needs the version and driver (the defaults set both). */}}
{{- define "feedguard.agent.cgroupHostMount" -}}
{{- $c := .Values.agent.cgroup -}}
{{- $known := and $c.version $c.driver -}}
{{- if eq $c.hostMount "all" -}}
all
{{- else if $known -}}
kubepods
{{- else if eq $c.hostMount "kubepods" -}}
{{- fail "agent.cgroup.hostMount=kubepods needs agent.cgroup.version (v1|v2) and agent.cgroup.driver (systemd|cgroupfs) set: the chart mounts exactly kubelet's pod tree and cannot detect where it is" -}}
{{- else -}}
{{- fail "agent.cgroup.version and agent.cgroup.driver must both be set (v1|v2, systemd|cgroupfs) so that the agent gets only kubelet's pod tree; leaving either empty means detection on the node, which needs the host's whole /sys/fs/cgroup writable: say so with agent.cgroup.hostMount=all" -}}
{{- end -}}
{{- end -}}

{{/* kubelet's pod tree relative to a cgroup mount: <root>/kubepods (cgroupfs driver) or
<root>/kubepods.slice (systemd), the layout agent/cgroup/kubelet_facts.cc computes. */}}
{{- define "feedguard.agent.kubepodsRel" -}}
{{- $c := .Values.agent.cgroup -}}
{{- $root := trimAll "/" $c.root -}}
{{- $kp := ternary "kubepods.slice" "kubepods" (eq $c.driver "systemd") -}}
{{- if $root }}{{ $root }}/{{ $kp }}{{ else }}{{ $kp }}{{ end -}}
{{- end -}}

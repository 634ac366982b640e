{{/*
The image of the controller and the agent.
*/}}
{{- define "wasmgpu.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The controller's identity, as the admission policies name it.
*/}}
{{- define "wasmgpu.controllerUser" -}}
system:serviceaccount:{{ .Values.namespace }}:wasmgpu-controller
{{- end }}

{{/*
The shipped policies: which are in the image (the controller's --policy
files), which are only ConfigMaps.
*/}}
{{- define "wasmgpu.shippedPolicies" -}}
binpack spread fairshare
{{- end }}
{{- define "wasmgpu.imagePolicies" -}}
binpack spread
{{- end }}

{{/*
Refuses values that would install something that cannot work, with what to
change; rendered (as nothing) by namespace.yaml.
*/}}
{{- define "wasmgpu.validate" -}}
{{- $shipped := splitList " " (include "wasmgpu.shippedPolicies" .) }}
{{- $inImage := splitList " " (include "wasmgpu.imagePolicies" .) }}
{{- range .Values.policies.include }}
{{- if not (has . $shipped) }}
{{- fail (printf "policies.include: %q is not a shipped policy (%s)" . (join ", " $shipped)) }}
{{- end }}
{{- end }}
{{- if not (has .Values.policySource (list "configMap" "oci")) }}
{{- fail (printf "policySource: %q is neither configMap nor oci" .Values.policySource) }}
{{- end }}
{{- if and (has .Values.defaultPolicy $shipped) (not (has .Values.defaultPolicy $inImage)) (not (has .Values.defaultPolicy .Values.policies.include)) }}
{{- fail (printf "defaultPolicy: %s is not in the image, only a ConfigMap: add it to policies.include" .Values.defaultPolicy) }}
{{- end }}
{{- if eq .Values.policySource "oci" }}
{{- range .Values.policies.include }}
{{- if not (hasPrefix "oci://" (index $.Values.oci.references . | default "")) }}
{{- fail (printf "policySource: oci needs oci.references.%s, the component's oci://…@sha256:… reference (`wasmgpu policy push` prints it), or leave %s out of policies.include" . .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

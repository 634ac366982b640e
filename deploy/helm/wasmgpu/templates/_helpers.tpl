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
The shipped policies, in the order deploy/policies lists them. binpack and
spread are also in the image (the controller's --policy files); fairshare
is only a ConfigMap.
*/}}
{{- define "wasmgpu.shippedPolicies" -}}
binpack spread fairshare
{{- end }}

{{/*
Refuses values that would install something that cannot work, saying what to
change (values.schema.json checks each value alone); rendered, as nothing,
by namespace.yaml.
*/}}
{{- define "wasmgpu.validate" -}}
{{- if and (eq .Values.defaultPolicy "fairshare") (not (has "fairshare" .Values.policies.include)) }}
{{- fail "defaultPolicy: fairshare is not in the image, only a ConfigMap: add it to policies.include" }}
{{- end }}
{{- if eq .Values.policySource "oci" }}
{{- range .Values.policies.include }}
{{- if not (index $.Values.oci.references . | default "") }}
{{- fail (printf "policySource: oci needs oci.references.%s, the component's oci://…@sha256:… reference (`wasmgpu policy push` prints it), or %s left out of policies.include" . .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

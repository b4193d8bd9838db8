{{/* cnibox.image: REPOSITORY:TAG, or REPOSITORY:TAG@DIGEST when image.digest is set. */}}
{{- define "cnibox.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* cnibox.ipamNamespace: the cluster IPAM's pools' namespace. */}}
{{- define "cnibox.ipamNamespace" -}}
{{ .Values.clusterIPAM.namespace | default "kube-system" }}
{{- end -}}

{{/* cnibox.netConf: net-conf.json from podCIDR, podCIDRv6, backend and mtu. */}}
{{- define "cnibox.netConf" -}}
{{- $b := .Values.backend -}}
{{- $be := dict "Type" $b.type -}}
{{- range $k, $v := dict "VNI" $b.vni "Port" $b.port "DirectRouting" $b.directRouting "GBP" $b.gbp "Learning" $b.learning "ListenPort" $b.listenPort "ListenPortV6" $b.listenPortV6 "PSK" $b.psk "PersistentKeepaliveInterval" $b.persistentKeepaliveInterval "Mode" $b.mode "MTU" $.Values.mtu }}
{{- if $v }}{{ $_ := set $be $k $v }}{{ end }}
{{- end -}}
{{- $nc := dict "Network" .Values.podCIDR "Backend" $be -}}
{{- if .Values.podCIDRv6 }}{{ $_ := set $nc "EnableIPv6" true }}{{ $_ := set $nc "IPv6Network" .Values.podCIDRv6 }}{{ end -}}
{{ toPrettyJson $nc }}
{{- end -}}

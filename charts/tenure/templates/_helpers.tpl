{{/*
tenure.docs: the objects of one deploy/ file (a multi-document YAML), each
as a dict, with deploy/'s namespace moved to .Values.namespace and
kustomize's common label added (deploy/kustomization.yaml's labels).
*/}}
{{- define "tenure.docs" -}}
{{- $text := .ctx.Files.Get (printf "deploy/%s" .file) -}}
{{- if not $text }}{{ fail (printf "deploy/%s is not in the chart" .file) }}{{ end -}}
{{- $text = replace "namespace: tenure-system" (printf "namespace: %s" .ctx.Values.namespace) $text -}}
{{- $out := list -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $o := fromYaml $doc -}}
{{- if $o.kind -}}
{{- $md := $o.metadata -}}
{{- $labels := $md.labels | default dict -}}
{{- $_ := set $labels "app.kubernetes.io/part-of" "tenure" -}}
{{- $_ := set $md "labels" $labels -}}
{{- $out = append $out $o -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* tenure.image: the image reference of the values. */}}
{{- define "tenure.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
tenure.flatConfigName: kustomize's configMapGenerator name for the agent's
flat configuration: the name, a dash and kustomize's hash of the
ConfigMap (sha256 of its kind, name and data as JSON, the first 10 hex
digits with 0, 1, 3, a, e spelt g, h, k, m, t), so a changed file rolls
the DaemonSet as with kustomize. The name kustomize hashes is empty: its
hasher looks metadata/name up as one field, which no ConfigMap has.
*/}}
{{- define "tenure.flatConfigName" -}}
{{- $data := dict "tenure.conf" (.Files.Get "deploy/agent/tenure.conf") -}}
{{- $h := dict "kind" "ConfigMap" "name" "" "data" $data | toJson | sha256sum | trunc 10 -}}
{{- $h = $h | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" -}}
tenure-flat-config-{{ $h }}
{{- end -}}

{{/*
tenure.webhookListen: for nodeRestriction.webhookURL, as JSON: the URL, the
address the controller serves the webhook on (the URL's host and port) and
the IP its certificate must name (the host); all empty when the webhook is
called through its Service.
*/}}
{{- define "tenure.webhookListen" -}}
{{- $url := .Values.nodeRestriction.webhookURL | default "" -}}
{{- if not $url -}}
{{- dict "url" "" "addr" "" "ip" "" | toJson -}}
{{- else -}}
{{- $u := urlParse $url -}}
{{- $ip := regexReplaceAll ":[0-9]+$" $u.host "" | trimPrefix "[" | trimSuffix "]" -}}
{{- if or (ne $u.scheme "https") (eq $ip $u.host) (not (regexMatch "^([0-9.]+|[0-9a-fA-F:]+)$" $ip)) -}}
{{- fail (printf "nodeRestriction.webhookURL %q: want https://IP:PORT/PATH (the controller serves the webhook at IP:PORT, its certificate naming IP)" $url) -}}
{{- end -}}
{{- dict "url" $url "addr" $u.host "ip" $ip | toJson -}}
{{- end -}}
{{- end -}}

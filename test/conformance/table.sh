#!/usr/bin/env bash
# table.sh [DIR]: the side-by-side table of docs/conformance.md, from the
# results.tsv (spec, state) make test-conformance left in DIR/CONFIG/
# (default bin/conformance): one row per spec, one column per configuration
# (anchor, cnibox-vxlan, cnibox-hostgw, dualstack, those present), then
# the counts.
set -euo pipefail
dir=${1:-bin/conformance}
configs=()
for c in anchor cnibox-vxlan cnibox-hostgw dualstack; do
  [ -f "$dir/$c/results.tsv" ] && configs+=("$c")
done
[ ${#configs[@]} -gt 0 ] || { echo "table.sh: no $dir/*/results.tsv" >&2; exit 1; }
files=()
for c in "${configs[@]}"; do files+=("$dir/$c/results.tsv"); done
awk -F'\t' -v configs="${configs[*]}" '
BEGIN { n = split(configs, cs, " ") }
FNR == 1 { f++ }
{ state[$1, f] = $2; if (!($1 in seen)) { seen[$1] = 1; names[++m] = $1 } }
END {
  mark["passed"] = "pass"; mark["failed"] = "**FAIL**"; mark["skipped"] = "skip"
  printf "| spec |"; for (i = 1; i <= n; i++) printf " %s |", cs[i]; print ""
  printf "| --- |"; for (i = 1; i <= n; i++) printf " --- |"; print ""
  # sorted by name
  for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
  for (i = 1; i <= m; i++) {
    name = names[i]; gsub(/\|/, "\\|", name)
    printf "| %s |", name
    for (k = 1; k <= n; k++) { s = state[names[i], k]; printf " %s |", (s == "" ? "-" : mark[s]); if (s != "") cnt[k, s]++ }
    print ""
  }
  printf "| **passed / failed / skipped** |"
  for (k = 1; k <= n; k++) printf " %d / %d / %d |", cnt[k, "passed"], cnt[k, "failed"], cnt[k, "skipped"]
  print ""
}' "${files[@]}"

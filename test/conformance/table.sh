#!/usr/bin/env bash
# table.sh [DIR]: the side-by-side table of docs/conformance.md, from the
# results.tsv (spec, state) make test-conformance left in DIR/CONFIG/
# (default bin/conformance): one row per spec, one column per configuration
# (anchor, cnibox-vxlan, cnibox-hostgw, dualstack, those present; CONFIGS
# names others, e.g. CONFIGS='netpol-anchor netpol'), then the counts. A DIR/CONFIG-rerun*/results.tsv (the same configuration with
# CNIBOX_CONFORMANCE_FOCUS naming some specs again and
# CNIBOX_CONFORMANCE_REPORT there; several in name order, the last wins)
# gives those specs' state, marked "(rerun)".
set -euo pipefail
dir=${1:-bin/conformance}
configs=() files=() cols=()
for c in ${CONFIGS:-anchor cnibox-vxlan cnibox-hostgw dualstack}; do
  [ -f "$dir/$c/results.tsv" ] || continue
  configs+=("$c")
  files+=("$dir/$c/results.tsv") cols+=("${#configs[@]}")
  for r in "$dir/$c"-rerun*/results.tsv; do
    [ -f "$r" ] && files+=("$r") cols+=("-${#configs[@]}")
  done
done
[ ${#configs[@]} -gt 0 ] || { echo "table.sh: no $dir/*/results.tsv" >&2; exit 1; }
awk -F'\t' -v configs="${configs[*]}" -v cols="${cols[*]}" '
BEGIN { n = split(configs, cs, " "); split(cols, col, " ") }
FNR == 1 { f++; k = col[f]; rerun = k < 0; if (rerun) k = -k }
{
  if (!($1 in seen)) { seen[$1] = 1; names[++m] = $1 }
  state[$1, k] = $2; again[$1, k] = rerun
}
END {
  mark["passed"] = "pass"; mark["failed"] = "**FAIL**"; mark["skipped"] = "skip"
  printf "| spec |"; for (i = 1; i <= n; i++) printf " %s |", cs[i]; print ""
  printf "| --- |"; for (i = 1; i <= n; i++) printf " --- |"; print ""
  for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
  for (i = 1; i <= m; i++) {
    name = names[i]; gsub(/\|/, "\\|", name)
    printf "| %s |", name
    for (k = 1; k <= n; k++) {
      s = state[names[i], k]
      printf " %s%s |", (s == "" ? "-" : mark[s]), (again[names[i], k] ? " (rerun)" : "")
      if (s != "") cnt[k, s]++
    }
    print ""
  }
  printf "| **passed / failed / skipped** |"
  for (k = 1; k <= n; k++) printf " %d / %d / %d |", cnt[k, "passed"], cnt[k, "failed"], cnt[k, "skipped"]
  print ""
}' "${files[@]}"

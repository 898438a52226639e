#!/usr/bin/env bash
# Test lines per code line for every package directory under internal/ and
# cmd/ (its own _test.go files against its other .go files; files marked
# "// Code generated" left out on both sides), and the time.Sleep calls in
# test files (third_party, vendored etcd raft, counted apart).
#
#   scripts/testratio.sh            # a markdown table, as in docs/architecture.md
#   scripts/testratio.sh PKG...     # only these directories (internal/cluster ...)
set -euo pipefail
cd "$(dirname "$0")/.."
lines() { # the lines of the given files that are not generated
	local n=0 f
	for f in "$@"; do
		grep -q '^// Code generated' "$f" || n=$((n + $(wc -l <"$f")))
	done
	echo "$n"
}
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || mapfile -t dirs < <(ls -d internal/*/ cmd/*/ | sed 's:/$::')
echo "| package | code lines | test lines | tests per code line |"
echo "| --- | ---: | ---: | ---: |"
for d in "${dirs[@]}"; do
	shopt -s nullglob
	code=() tests=()
	for f in "$d"/*.go; do
		case $f in *_test.go) tests+=("$f") ;; *) code+=("$f") ;; esac
	done
	c=$(lines "${code[@]}") t=$(lines "${tests[@]}")
	[ "$c" -gt 0 ] || continue
	printf '| `%s` | %d | %d | %s |\n' "$d" "$c" "$t" "$(awk -v t="$t" -v c="$c" 'BEGIN{printf "%.2f", t/c}')"
done
ours=$(grep -r --include='*_test.go' 'time\.Sleep(' internal cmd | wc -l)
files=$(grep -rl --include='*_test.go' 'time\.Sleep(' internal cmd | wc -l)
vendored=$(grep -r --include='*_test.go' 'time\.Sleep(' third_party 2>/dev/null | wc -l)
echo
echo "time.Sleep in test files: $ours in $files files (internal/, cmd/); $vendored in third_party/"

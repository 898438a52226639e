#!/usr/bin/env bash
# Benchmark (a) of scripts/bench-tiered.sh (produce p99 while uploading, as
# a ratio to no tiering on the same node) for two builds, interleaved: an
# old commit (built from `git archive`) and this work tree, their order
# alternating by round, so that the machine's load hits both alike. Each
# round runs bench-tiered.sh with ROUNDS=2 for each build (both orders of
# its own two cases). Prints a markdown table and the load averages.
#
#   scripts/bench-tiered-ab.sh 419b138                 # 4 rounds of 10 s runs
#   AB_ROUNDS=6 SECONDS_PER_RUN=10 scripts/bench-tiered-ab.sh main
#   PART=b CATCHUP_MIB=256 scripts/bench-tiered-ab.sh 17cb8e8  # (b), the catch-up read, instead
#   scripts/bench-tiered-ab.sh 17cb8e8 HEAD       # "new" built from a commit too, not the work tree
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
old=${1:?usage: bench-tiered-ab.sh OLD_COMMIT [NEW_COMMIT]}
new=${2:-}
rounds=${AB_ROUNDS:-4}
part=${PART:-a}
base=${PORT_BASE:-39400} # runs use ports base+4, base+5, base+8, ...: another run at once needs another base
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "building $old and the work tree into $work" >&2
mkdir "$work/src"
git -C "$repo" archive "$old" | tar -x -C "$work/src"
(cd "$work/src" && CGO_ENABLED=0 go build -o "$work/holdfast-old" ./cmd/holdfast)
if [ -n "$new" ]; then
	mkdir "$work/src-new"
	git -C "$repo" archive "$new" | tar -x -C "$work/src-new"
	(cd "$work/src-new" && CGO_ENABLED=0 go build -o "$work/holdfast-new" ./cmd/holdfast)
else
	(cd "$repo" && CGO_ENABLED=0 go build -o "$work/holdfast-new" ./cmd/holdfast)
fi
load0=$(cut -d' ' -f1-3 /proc/loadavg)
run=0
for round in $(seq "$rounds"); do
	order="old new"; if [ $((round % 2)) = 0 ]; then order="new old"; fi
	for b in $order; do
		# Each run on its own ports (a node just stopped may still hold
		# the last ones); a run that fails (a start too slow on a loaded
		# machine) is tried once more.
		for try in 1 2; do
			run=$((run + 1))
			echo "A/B round $round: $b (try $try)" >&2
			if HOLDFAST_BIN="$work/holdfast-$b" ONLY=$part ROUNDS=2 KEEP="$work/$b-$round.jsonl" \
				PORT=$((base + 4 * run)) S3_PORT=$((base + 1 + 4 * run)) "$repo/scripts/bench-tiered.sh" >/dev/null; then
				break
			fi
			[ "$try" = 1 ] || { echo "round $round: $b failed twice" >&2; exit 1; }
		done
	done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$work" "$rounds" "$old" "$load0" "$load1" "$(nproc)" "$part" "${CATCHUP_MIB:-64}" "${SIZE:-1024}" "$new" <<'PY'
import json, statistics, sys
work, rounds, old, load0, load1, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
part, mib, size, new = sys.argv[7], int(sys.argv[8]), int(sys.argv[9]), sys.argv[10]
med = statistics.median
if part == "b":
    # Per run: local and object store MiB/s, and holdfast's CPU s per GiB
    # read from the object store.
    def rate(r): return r["mb_per_s"] * 1e6 / 1048576 if "mb_per_s" in r else r["records_per_s"] * size / 1048576
    def cpu(r): return (r["cpu"][0] - r["cpu"][1]) * 1024 / mib
    print("load average at the start: %s, at the end: %s (%s cores)" % (load0, load1, ncpu))
    print()
    print("| round | %s: MiB/s local / object store (ratio), CPU s/GiB remote | %s: the same |" % (old, new or "work tree"))
    print("|---|---|---|")
    ratios, rem, cpus = {"old": [], "new": []}, {"old": [], "new": []}, {"old": [], "new": []}
    for k in range(1, rounds + 1):
        cells = []
        for b in ("old", "new"):
            rows = [json.loads(l) for l in open("%s/%s-%d.jsonl" % (work, b, k))]
            cs = []
            for r in sorted({x["round"] for x in rows}):
                c = {x["tiered"]: x for x in rows if x["round"] == r and x["bench"] == "catchup"}
                n, t = rate(c["no"]), rate(c["yes"])
                ratios[b].append(t / n); rem[b].append(t); cpus[b].append(cpu(c["yes"]))
                cs.append("%.0f / %.0f (%.2fx), %.2f" % (n, t, t / n, cpus[b][-1]))
            cells.append("; ".join(cs))
        print("| %d | %s | %s |" % (k, cells[0], cells[1]))
    print("| median | **%.2fx**, object store %.0f MiB/s, %.2f CPU s/GiB | **%.2fx**, object store %.0f MiB/s, %.2f CPU s/GiB |" % (
        med(ratios["old"]), med(rem["old"]), med(cpus["old"]), med(ratios["new"]), med(rem["new"]), med(cpus["new"])))
    sys.exit()
def cases(b, k):
    rows = [json.loads(l) for l in open("%s/%s-%d.jsonl" % (work, b, k))]
    out = []
    for r in sorted({x["round"] for x in rows}):
        p = {x["tiered"]: x["produce_latency"]["p99_ms"] for x in rows if x["round"] == r}
        out.append((p["no"], p["yes"]))
    return out
print("load average at the start: %s, at the end: %s (%s cores)" % (load0, load1, ncpu))
print()
print("| round | %s: p99 ms no tiering / tiered (ratio) | work tree: p99 ms no tiering / tiered (ratio) |" % old)
print("|---|---|---|")
ratios = {"old": [], "new": []}
for k in range(1, rounds + 1):
    cells = []
    for b in ("old", "new"):
        c = cases(b, k)
        cells.append(", ".join("%.2f / %.2f (%.2fx)" % (n, t, t / n) for n, t in c))
        ratios[b] += [t / n for n, t in c]
    print("| %d | %s | %s |" % (k, cells[0], cells[1]))
print("| median of the ratios | **%.2fx** | **%.2fx** |" % (med(ratios["old"]), med(ratios["new"])))
PY

#!/usr/bin/env bash
# RF=3 on three local nodes against one node, same binary, interleaved
# (issue 17: "RF=3 at half the single-node rate"). Each round runs the
# single node, then a fresh 3-node cluster (three `holdfast serve`
# processes, flush=sync) with a topic of replication factor 3, both driven
# by ../shared/tools/kload (franz-go, idempotent, acks=all, 100 B records,
# saturated, one partition). CPU is the broker processes' user+system time
# (/proc/PID/stat) over the produce run, summed over the nodes.
# PARTITIONS and SIZE change the topic's partition count and the record
# size (issue 27: "3 nodes RF=3, 1,000 partitions: >= 0.5x one node's rate
# at 1,000 partitions"); WARMUP=n creates the topic and writes n records
# per partition before the measured window, so creating 1,000 partitions
# is not counted as the records' CPU.
#
#   scripts/bench-rf3.sh [BINARY...]       # default: this tree; several: compared, interleaved
#   ROUNDS=5 RECORDS=1000000 PORT=39700 scripts/bench-rf3.sh OLD NEW
#   PARTITIONS=1000 SIZE=1024 WARMUP=4 RECORDS=200000 scripts/bench-rf3.sh
#
# kload exits 2 if an acknowledged record is lost; the script stops then.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
rounds=${ROUNDS:-3}
records=${RECORDS:-1000000}
port=${PORT:-39700}
partitions=${PARTITIONS:-1}
size=${SIZE:-100}
warmup=${WARMUP:-0}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
bins=()
if [ $# -ge 1 ]; then
	for b in "$@"; do bins+=("B${#bins[@]}"); cp "$b" "$work/B$((${#bins[@]} - 1))"; done
else
	bins=(B0); (cd "$repo" && CGO_ENABLED=0 go build -o "$work/B0" ./cmd/holdfast)
fi
(cd "$shared/tools/kload" && go build -o "$work/kload" .)
hz=$(getconf CLK_TCK)

pids=()
waitport() {
	for _ in $(seq 100); do
		if (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; then return; fi
		sleep 0.1
	done
	echo "port $1 did not open" >&2; exit 1
}
ticks() {
	local t=0 p
	for p in "${pids[@]}"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
	echo $t
}
stopall() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
# run BIN NAME NODES -> appends "BIN name records/s p50 p99 cpu-s-per-M" to results
results=$work/results
run() {
	local bin=$1 name=$2 nodes=$3 brokers="" peers="" i
	rm -rf "$work/data"
	for i in $(seq "$nodes"); do peers+="${peers:+,}$i@127.0.0.1:$((port + 50 + i))"; done
	for i in $(seq "$nodes"); do
		if [ "$nodes" = 1 ]; then
			"$work/$bin" serve --listen 127.0.0.1:$((port + i)) --data-dir "$work/data/n$i" --metrics-listen "" --log-level warn &
		else
			"$work/$bin" serve --node-id "$i" --peers "$peers" --listen 127.0.0.1:$((port + i)) --data-dir "$work/data/n$i" --metrics-listen "" --log-level warn &
		fi
		pids+=($!)
		brokers+="${brokers:+,}127.0.0.1:$((port + i))"
	done
	for i in $(seq "$nodes"); do waitport $((port + i)); done
	[ "$nodes" = 1 ] || sleep 3 # the metadata quorum elects and registers every node
	local c0 c1 topic="t$RANDOM" create=-create
	if [ "$warmup" -gt 0 ]; then
		"$work/kload" produce -brokers "$brokers" -topic "$topic" -create -partitions "$partitions" -rf "$nodes" \
			-records $((partitions * warmup)) -size "$size" -acks all >/dev/null
		create=
	fi
	c0=$(ticks)
	"$work/kload" produce -brokers "$brokers" -topic "$topic" $create -partitions "$partitions" -rf "$nodes" \
		-records "$records" -size "$size" -acks all -rate 0 | tail -1 > "$work/out.json"
	c1=$(ticks)
	stopall
	python3 - "$bin" "$name" "$work/out.json" $((c1 - c0)) "$hz" "$records" >> "$results" <<'PY'
import json, sys
b, name, path, ticks, hz, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
r = json.load(open(path)); l = r["produce_latency"]
print(b, name, r["records_per_s"], l["p50_ms"], l["p99_ms"], ticks / hz / (n / 1e6))
PY
}
for round in $(seq "$rounds"); do
	echo "round $round of $rounds (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	for b in "${bins[@]}"; do
		run "$b" single 1
		run "$b" rf3 3
	done
done
python3 - "$results" "$rounds" "$@" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, name, *v = line.split()
    rows[(b, name)].append([float(x) for x in v])
names = sys.argv[3:]
print("| binary | round | single records/s | RF=3 records/s | RF=3/single | single p99 ms | RF=3 p99 ms | p99 ratio | single CPU-s/M | RF=3 CPU-s/M | CPU ratio |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
bins = sorted({b for b, _ in rows})
med = lambda xs, j: statistics.median(x[j] for x in xs)
for b in bins:
    label = names[int(b[1:])] if len(names) > int(b[1:]) else "this tree"
    S, R = rows[(b, "single")], rows[(b, "rf3")]
    for i, (s, r) in enumerate(zip(S, R), 1):
        print("| %s | %d | %.0f | %.0f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f |" % (label, i, s[0], r[0], r[0]/s[0], s[2], r[2], r[2]/s[2], s[3], r[3], r[3]/s[3]))
    print("| %s | median | %.0f | %.0f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f |" % (label, med(S,0), med(R,0), med(R,0)/med(S,0),
          med(S,2), med(R,2), med(R,2)/med(S,2), med(S,3), med(R,3), med(R,3)/med(S,3)))
    print("| %s | p50 ms | %.1f | %.1f | | | | | | | |" % (label, med(S,1), med(R,1)))
print("\n(%s rounds; per round each binary runs the single node, then the 3-node cluster)" % sys.argv[2])
PY

#!/usr/bin/env bash
# A/B benchmark of two Holdfast binaries on one node (flush=sync), with the
# shared kload tool: saturated produce and p50/p99 ack latency at a fixed
# offered rate. Runs alternate A, B, A, B... so the shared machine's load
# changes hit both alike; the table gives each case's median over ROUNDS.
#
#   scripts/bench-ab.sh OLD_BINARY [NEW_BINARY]   # NEW defaults to this tree
#   ROUNDS=3 RECORDS=100000 scripts/bench-ab.sh /tmp/holdfast-old
#
# kload exits 2 if an acknowledged record is lost; the script stops then.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
rounds=${ROUNDS:-5}
records=${RECORDS:-200000}
[ $# -ge 1 ] || { echo "usage: $0 OLD_BINARY [NEW_BINARY]" >&2; exit 2; }
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
cp "$1" "$work/A"
if [ $# -ge 2 ]; then cp "$2" "$work/B"; else (cd "$repo" && CGO_ENABLED=0 go build -o "$work/B" ./cmd/holdfast); fi
(cd "$shared/tools/kload" && go build -o "$work/kload" .)

port=${PORT:-39192}
start() { # binary
	rm -rf "$work/data"
	(cd "$work" && exec "./$1" serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn) &
	pid=$!
	for _ in $(seq 100); do
		if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then return; fi
		sleep 0.1
	done
	echo "$1 did not start" >&2; exit 1
}
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }

# case NAME PARTITIONS RECORDS RATE -> appends "peer name records/s p50 p99" lines
results=$work/results
bench() {
	local peer=$1 name=$2 parts=$3 n=$4 rate=$5
	start "$peer"
	"$work/kload" produce -brokers 127.0.0.1:$port -topic "t$RANDOM" -create -partitions "$parts" \
		-records "$n" -size 100 -acks all -rate "$rate" | tail -1 |
		python3 -c 'import json,sys; r=json.load(sys.stdin); l=r["produce_latency"]; print(sys.argv[1], sys.argv[2], r["records_per_s"], l["p50_ms"], l["p99_ms"])' "$peer" "$name" >> "$results"
	stop
}
for round in $(seq "$rounds"); do
	echo "round $round of $rounds" >&2
	for peer in A B; do
		bench $peer saturated-1p 1 "$records" 0
		bench $peer saturated-6p 6 "$records" 0
		bench $peer rate-1000 1 10000 1000
	done
done
python3 - "$results" "$rounds" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    peer, name, rps, p50, p99 = line.split()
    rows[(name, peer)].append((float(rps), float(p50), float(p99)))
print("| case | A records/s | B records/s | B/A | A p50 ms | B p50 ms | A p99 ms | B p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for name in ("saturated-1p", "saturated-6p", "rate-1000"):
    a, b = rows[(name, "A")], rows[(name, "B")]
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print("| %s | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (name, med(a,0), med(b,0), med(b,0)/med(a,0),
          med(a,1), med(b,1), med(a,2), med(b,2)))
print("\n(medians of %s rounds; A and B alternate)" % sys.argv[2])
PY

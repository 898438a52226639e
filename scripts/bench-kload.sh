#!/usr/bin/env bash
# Broker benchmark with the shared kload tool: Holdfast (flush=sync) next to
# franz-go's kfake (in memory, and with an fsync per batch) in the same run,
# so the figures compare as ratios on the same (noisy) machine.
#
#   scripts/bench-kload.sh              # all cases, results in a markdown table on stdout
#   SHARED=/path/to/shared RECORDS_SCALE=0.2 scripts/bench-kload.sh   # quicker
#
# Every run also checks the records: kload exits 2 if an acknowledged record is lost.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
scale=${RECORDS_SCALE:-1}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

echo "building holdfast, kload, kfake-server into $work" >&2
(cd "$repo" && CGO_ENABLED=0 go build -o "$work/holdfast" ./cmd/holdfast)
(cd "$shared/tools/kload" && go build -o "$work/kload" . && go build -o "$work/kfake-server" ./cmd/kfake-server)

port=39092
start_peer() { # name -> starts it on $port, sets $pid
	rm -rf "$work/data"; mkdir -p "$work/data"
	case $1 in
	holdfast) (cd "$work" && exec ./holdfast serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn) & ;;
	kfake-mem) "$work/kfake-server" -port $port >/dev/null 2>&1 & ;;
	kfake-sync) "$work/kfake-server" -port $port -data-dir "$work/data" -sync >/dev/null 2>&1 & ;;
	esac
	pid=$!
	for _ in $(seq 100); do
		if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then return; fi
		sleep 0.1
	done
	echo "$1 did not start" >&2; exit 1
}
stop_peer() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }

# run PEER SIZE PARTITIONS RECORDS [RATE]: one kload produce, prints a table row.
run() {
	local peer=$1 size=$2 parts=$3 records=$4 rate=${5:-0} topic="b-$2-$3-$RANDOM"
	local out rss=""
	out=$("$work/kload" produce -brokers 127.0.0.1:$port -topic "$topic" -create -partitions "$parts" \
		-records "$records" -size "$size" -acks all -rate "$rate" | tail -1)
	if [ "$peer" = holdfast ]; then rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' /proc/$pid/status); fi
	python3 -c '
import json,sys
r=json.loads(sys.argv[1]); l=r["produce_latency"]
mode="saturated" if float(sys.argv[4])==0 else "rate %s/s" % sys.argv[4]
print("| %s | %s B | %s | %s | %.0f | %.1f | %.2f | %.2f | %s | %s |" % (sys.argv[2], r["size"], r["partitions"], mode,
      r["records_per_s"], r["mb_per_s"], l["p50_ms"], l["p99_ms"], r["failed"], sys.argv[3] or "-"))
' "$out" "$peer" "$rss" "$rate"
}

echo "| peer | record | partitions | load | records/s | MB/s | p50 ms | p99 ms | failed | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
# Peers are interleaved per case so that a change in the machine's load
# (it is shared) hits all three alike instead of one peer's whole block.
for size in 100 1024; do
	n=$(python3 -c "print(int((500000 if $size==100 else 200000)*$scale))")
	for parts in 1 6; do
		for rate in 0 1000; do
			for peer in holdfast kfake-sync kfake-mem; do
				start_peer $peer
				if [ "$rate" = 0 ]; then
					run $peer $size $parts "$n"
				else
					run $peer $size $parts "$(python3 -c "print(int(10000*$scale))")" 1000
				fi
				stop_peer
			done
		done
	done
done

#!/usr/bin/env bash
# The first produce after a whole-cluster restart. Each round starts NODES
# `holdfast serve` processes, creates a topic of PARTITIONS partitions at
# RF (default 3) and acknowledges a record on each, stops every node with
# SIGTERM, starts them all again together and, from the moment every node
# listens, measures:
#   franz-go (default settings, scripts/restartprobe): one acks=all record to
#     every partition at once - time to the first ack and to the last, the
#     Metadata requests the client sent, and how many partitions a Metadata
#     request sent at that moment answered without a leader;
#   kcat (librdkafka): after another whole restart, one record to the last
#     partition, time to its ack.
# Several binaries are compared, interleaved round by round.
#
#   scripts/bench-restart.sh [BINARY...]     # default: this tree
#   PARTITIONS=300 ROUNDS=3 PORT=41000 scripts/bench-restart.sh OLD NEW
#   KCAT_DEBUG=metadata,topic KEEP_LOG=/tmp/x scripts/bench-restart.sh   # kcat's debug log kept
#   PROBE_TIMEOUT=600s scripts/bench-restart.sh   # the probe's limit (60s: 10,000 RF=3 on a loaded VM needs more)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
nodes=${NODES:-3}
rf=${RF:-3}
parts=${PARTITIONS:-300}
rounds=${ROUNDS:-1}
port=${PORT:-47400}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
bins=()
if [ $# -ge 1 ]; then
	for b in "$@"; do cp "$b" "$work/B${#bins[@]}"; bins+=("B${#bins[@]}"); done
else
	bins=(B0); (cd "$repo" && CGO_ENABLED=0 go build -o "$work/B0" ./cmd/holdfast)
fi
(cd "$repo" && go build -o "$work/probe" ./scripts/restartprobe)
bootstrap=""
for i in $(seq "$nodes"); do bootstrap+="${bootstrap:+,}127.0.0.1:$((port + i))"; done
pids=()
now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{printf "%.2f", $1 - $2}'; }
listening() {
	local i
	for i in $(seq "$nodes"); do (exec 3<>/dev/tcp/127.0.0.1/$((port + i))) 2>/dev/null || return 1; done
}
start() { # BIN
	local bin=$1 peers="" i
	pids=()
	for i in $(seq "$nodes"); do peers+="${peers:+,}$i@127.0.0.1:$((port + 50 + i))"; done
	for i in $(seq "$nodes"); do
		"$work/$bin" serve --node-id "$i" --peers "$peers" --raft-listen 127.0.0.1:$((port + 50 + i)) \
			--listen 127.0.0.1:$((port + i)) --data-dir "$work/data/n$i" --metrics-listen "" --console=false --log-level warn 2>>"$work/log" &
		pids+=($!)
	done
	until listening; do
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a node exited:"; tail -5 "$work/log"; exit 1; }; done
		sleep 0.02
	done
}
stop() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
for round in $(seq "$rounds"); do
	for bin in "${bins[@]}"; do
		rm -rf "$work/data"
		start "$bin"
		until "$work/$bin" topic create restart --if-not-exists --partitions "$parts" --replication-factor "$rf" \
			--bootstrap "$bootstrap" --timeout 10m >/dev/null 2>>"$work/log"; do sleep 0.5; done
		"$work/probe" -timeout "${PROBE_TIMEOUT:-60s}" -bootstrap "$bootstrap" -topic restart -partitions "$parts" >/dev/null
		sleep 3 # groups quiesce
		stop
		start "$bin"
		fr=$("$work/probe" -timeout "${PROBE_TIMEOUT:-60s}" ${PROBE_VERBOSE:+-v} -bootstrap "$bootstrap" -topic restart -partitions "$parts" 2>>"$work/log")
		stop
		start "$bin"
		t0=$(now)
		echo x | kcat -P -b "$bootstrap" -t restart -p $((parts - 1)) -X request.required.acks=-1 ${KCAT_DEBUG:+-d "$KCAT_DEBUG"} 2>>"$work/log"
		kc=$(since "$t0")
		stop
		[ -z "${KEEP_LOG:-}" ] || cp "$work/log" "$KEEP_LOG.$round.$bin"
		echo "round $round $bin partitions=$parts rf=$rf: franz-go $fr; kcat first_ack=${kc}s"
	done
done

#!/usr/bin/env bash
# Many partitions on real processes (issue 17: "10,000 partitions on 3
# nodes: start-up to first produce under 10 s, idle CPU under 5% of a core,
# memory stated per partition"; issue 27: "100,000 partitions on one node:
# CreateTopics of 100 topics x 1,000 partitions to every partition
# acknowledging a write"). Each round starts NODES `holdfast serve`
# processes (a cluster; one node: a single node), creates TOPICS topics
# (default 1) of PARTITIONS/TOPICS partitions each at replication factor
# RF, produces one record with acks=all to every partition
# (scripts/scaleprobe, retried until each is acknowledged; the time to the
# last acknowledgement is "created+every ack"), then measures the brokers'
# idle CPU
# (user + system from /proc/PID/stat, summed over the nodes, over IDLE
# seconds after QUIESCE seconds) and RSS; then stops every node with SIGTERM
# (a clean shutdown), starts them all again together and reports the time
# until every node listens and until the first record is acknowledged
# (acks=all, retried until it is), with the CPU the nodes spent until then
# (and until every partition answers a ListOffsets again: a node with many
# replicas opens them after it listens)
# (a loaded machine moves the wall time far more than the CPU), and the
# idle CPU and RSS after that; then it waits for every replica to be open
# and times the stop after the restart (the logs opened after a clean
# shutdown, one of them written).
# Each node runs with GODEBUG=gctrace=1 (a line per GC cycle, to a file of
# its own): the report gives the GC cycles that fell inside each idle
# window and the CPU they marked with (summed over the nodes). An idle node
# with 10,000 replicas holds ~1M heap objects, and a cycle marks them in
# 0.1-0.3 CPU-s: one landing in a 10 s window moves the figure by up to 3
# points per node (the runtime forces one every 2 minutes, and the last
# allocations of a creation or a restart can trigger one), so IDLE=60
# gives a steadier figure than the default 10 s.
# After each window (not measured) the nodes' metrics give the Raft groups
# that still tick, by role (0/0/0 when every group quiesced), and the ticks
# that found a peer silent (each wakes the quiesced groups depending on it);
# a binary without those metrics shows blanks. (The admin listener serves
# only the metrics and /debug/pprof: --console=false, as before the
# listener was on. PROFILE=path takes CPU profiles of node 1 over the first
# PROFILE_SECONDS (30) of the creation and of the restart. RESTART=0
# stops after the clean stop. Each round times one scrape of node 1's /metrics after the
# idle window ("seconds/CPU-seconds/series"); HEAP=path saves node 1's heap profile then;
# IDLE_PROFILE=path takes node 1's CPU profile over each idle window, to path.PHASE.)
# The clean stop is timed too, with the ERROR lines the nodes logged during
# it (KEEP_LOG=path keeps that log). Several binaries are compared,
# interleaved round by round.
#
#   scripts/bench-scale.sh [BINARY...]     # default: this tree
#   NODES=3 RF=3 PARTITIONS=10000 ROUNDS=1 scripts/bench-scale.sh OLD NEW
#
# Serve keeps --max-connections descriptors for connections and a reserve,
# and holds the data files' descriptors in a cache of the rest
# (log.max.open.files, docs/storage.md): the nodes run with
# MAX_CONNECTIONS=1000 (default), which leaves 18,744 descriptors for data
# files at a limit of 20,000, whatever the partition count.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
nodes=${NODES:-3}
rf=${RF:-1}
parts=${PARTITIONS:-10000}
topics=${TOPICS:-1}
[ $((parts % topics)) = 0 ] || { echo "PARTITIONS must be a multiple of TOPICS"; exit 1; }
rounds=${ROUNDS:-1}
idle=${IDLE:-10}
quiesce=${QUIESCE:-5}
port=${PORT:-47300}
maxconns=${MAX_CONNECTIONS:-1000}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
bins=()
if [ $# -ge 1 ]; then
	for b in "$@"; do cp "$b" "$work/B${#bins[@]}"; bins+=("B${#bins[@]}"); done
else
	bins=(B0); (cd "$repo" && CGO_ENABLED=0 go build -o "$work/B0" ./cmd/holdfast)
fi
(cd "$repo" && CGO_ENABLED=0 go build -o "$work/probe" ./scripts/scaleprobe)
hz=$(getconf CLK_TCK)
bootstrap=""
for i in $(seq "$nodes"); do bootstrap+="${bootstrap:+,}127.0.0.1:$((port + i))"; done

pids=()
now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{printf "%.2f", $1 - $2}'; }
listening() {
	local i
	for i in $(seq "$nodes"); do (exec 3<>/dev/tcp/127.0.0.1/$((port + i))) 2>/dev/null || return 1; done
}
ticks() {
	local t=0 p
	for p in "${pids[@]}"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
	echo $t
}
rss_mib() {
	local k=0 p
	for p in "${pids[@]}"; do k=$((k + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status"))); done
	echo $((k / 1024))
}
start() { # BIN PHASE
	local bin=$1 peers="" i
	pids=()
	phase=$2
	t_start=$(now)
	for i in $(seq "$nodes"); do peers+="${peers:+,}$i@127.0.0.1:$((port + 50 + i))"; done
	for i in $(seq "$nodes"); do
		if [ "$nodes" = 1 ]; then
			GODEBUG=gctrace=1 "$work/$bin" serve --listen 127.0.0.1:$((port + i)) --data-dir "$work/data/n$i" --metrics-listen "127.0.0.1:$((port + 20 + i))" --console=false --log-level warn --max-connections "$maxconns" 2> >(gcsplit "$phase.n$i") &
		else
			GODEBUG=gctrace=1 "$work/$bin" serve --node-id "$i" --peers "$peers" --raft-listen 127.0.0.1:$((port + 50 + i)) \
				--listen 127.0.0.1:$((port + i)) --data-dir "$work/data/n$i" --metrics-listen "127.0.0.1:$((port + 20 + i))" --console=false --log-level warn --max-connections "$maxconns" 2> >(gcsplit "$phase.n$i") &
		fi
		pids+=($!)
	done
}
gcsplit() { # NAME: gctrace lines to $work/gc.NAME, the rest to the log
	awk -v gc="$work/gc.$1" -v lg="$work/log" '/^gc [0-9]+ @/ {print >> gc; fflush(gc); next} {print >> lg; fflush(lg)}'
}
gc_in() { # PHASE FROM TO (seconds since the phase's start): "cycles/mark CPU ms" over the nodes
	cat "$work"/gc."$1".n* 2>/dev/null | awk -v a="$2" -v b="$3" '
		{ t = substr($3, 2) + 0; if (t < a || t >= b) next
		  for (i = 1; i <= NF; i++) if ($(i + 1) == "ms" && $(i + 2) == "cpu,") { split($i, p, /[+\/]/); for (k in p) ms += p[k] }
		  n++ }
		END { printf "%d/%.0f", n, ms }'
}
ticking() { # after an idle window (its scrape is not measured): each node's Raft groups not quiesced, leaders/followers/electing, and silent-peer ticks
	local i out=""
	for i in $(seq "$nodes"); do
		out+="${out:+ }n$i:$(curl -s --max-time 20 "127.0.0.1:$((port + 20 + i))/metrics" | awk '
			/^holdfast_raft_groups_ticking\{role="leader"\}/ {l = $2} /^holdfast_raft_groups_ticking\{role="follower"\}/ {f = $2}
			/^holdfast_raft_groups_ticking\{role="electing"\}/ {e = $2} /^holdfast_raft_silent_peer_ticks_total/ {s = $2}
			END {printf "%s/%s/%s,%s", l, f, e, s}')"
	done
	echo "$out"
}
scrape_metrics() { # node 1's /metrics once: "seconds/CPU-seconds of the nodes/series"
	local t0 c0 n
	t0=$(now); c0=$(ticks)
	n=$(curl -s --max-time 120 "127.0.0.1:$((port + 21))/metrics" | grep -vc '^#' || true)
	echo "$(since "$t0")s/$(echo "$(ticks) $c0" | awk -v hz="$hz" '{printf "%.2f", ($1 - $2) / hz}')cpu-s/$n"
}
stop() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
probe() { # MODE: scripts/scaleprobe against the nodes
	local prefix=scale
	[ "$topics" = 1 ] || prefix=scale-
	"$work/probe" -bootstrap "$bootstrap" -mode "$1" -prefix "$prefix" -topics "$topics" -partitions $((parts / topics)) -rf "$rf" 2>>"$work/log"
}
produce_one() { # until one record to the last partition is acknowledged
	until probe one >/dev/null; do sleep 0.1; done
}
idle_cpu() { # PHASE: percent of a core over $idle s, after $quiesce s, and the GC cycles in that window
	sleep "$quiesce"
	local t0 t1 w0 w1
	if [ -n "${IDLE_PROFILE:-}" ]; then # node 1's CPU profile over the idle window
		curl -s --max-time $((idle + 60)) "127.0.0.1:$((port + 21))/debug/pprof/profile?seconds=$idle" >"$IDLE_PROFILE.$1" &
	fi
	w0=$(since "$t_start"); t0=$(ticks); sleep "$idle"; t1=$(ticks); w1=$(since "$t_start")
	sleep 0.5 # the gctrace lines of the window's last cycles
	# (gctrace times count from each node's start, within ms of t_start)
	echo "$(echo "$t0 $t1" | awk -v hz="$hz" -v d="$idle" '{printf "%.1f", 100 * ($2 - $1) / hz / d}') $(gc_in "$1" "$w0" "$w1")"
}

for round in $(seq "$rounds"); do
	for bin in "${bins[@]}"; do
		rm -rf "$work/data"
		: >"$work/log" # the last binary's stop logged its peers' silences
		start "$bin" "c$round.$bin"
		until listening; do
			for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a node exited:"; tail -5 "$work/log"; exit 1; }; done
			sleep 0.1
		done
		sleep 1
		empty=$(rss_mib)
		t0=$(now); c0=$(ticks)
		# Retried until every broker has registered (RF > the brokers known is refused).
		if [ -n "${PROFILE:-}" ]; then # a CPU profile of node 1 over the creation's first PROFILE_SECONDS
			curl -s --max-time 600 "127.0.0.1:$((port + 21))/debug/pprof/profile?seconds=${PROFILE_SECONDS:-30}" >"$PROFILE.$round.$bin.create" &
		fi
		answered=$(probe create | awk '/^created/ {print $2}')
		created=$(since "$t0")
		ccpu=$(echo "$(ticks) $c0" | awk -v hz="$hz" '{printf "%.1f", ($1 - $2) / hz}')
		read -r cpu gcs < <(idle_cpu "c$round.$bin"); rss=$(rss_mib)
		per=$(echo "$rss $empty" | awk -v n=$((parts * rf)) '{printf "%.1f", ($1 - $2) * 1024 / n}')
		silent=$(grep -c 'has not been heard' "$work/log" || true)
		tick1=$(ticking)
		scrape=$(scrape_metrics)
		if [ -n "${HEAP:-}" ]; then # node 1's heap at rest (go tool pprof -sample_index=inuse_space)
			curl -s --max-time 120 "127.0.0.1:$((port + 21))/debug/pprof/heap?gc=1" >"$HEAP.$round.$bin"
		fi
		: >"$work/log"
		t0=$(now)
		stop
		stopped=$(since "$t0")
		errs=$(grep -c 'level=ERROR' "$work/log" || true)
		[ -z "${KEEP_LOG:-}" ] || cp "$work/log" "$KEEP_LOG.$round.$bin"
		: >"$work/log"
		if [ "${RESTART:-1}" = 0 ]; then
			echo "round $round $bin nodes=$nodes rf=$rf partitions=$parts topics=$topics: created ${answered}s, created+every ack ${created}s (${ccpu} CPU-s of the nodes); idle ${cpu}% of a core (GC cycles/mark CPU-ms in it ${gcs}; peer silences ${silent}; ticking L/F/E,silent ticks ${tick1}), RSS ${rss} MiB (${per} KiB per replica above ${empty} MiB); /metrics scrape ${scrape}; stop ${stopped}s (${errs} ERROR lines); no restart (RESTART=0)"
			continue
		fi
		t0=$(now)
		start "$bin" "r$round.$bin"
		# Every replica open again (a node may open them after it listens):
		# every partition answers a ListOffsets without an error (scaleprobe
		# -mode serving, once a second, read-only), in seconds since the
		# start, to $work/opened. (Polling /metrics instead cost the node
		# seconds of CPU per scrape at 100,000 partitions and slowed the
		# opens tenfold.)
		rm -f "$work/opened"
		(until listening; do sleep 0.2; done; probe serving >/dev/null && since "$t0" >"$work/opened") &
		opener=$!
		if [ -n "${PROFILE:-}" ]; then
			(until curl -s --max-time 600 "127.0.0.1:$((port + 21))/debug/pprof/profile?seconds=${PROFILE_SECONDS:-30}" >"$PROFILE.$round.$bin.restart" 2>/dev/null; do sleep 0.05; done) &
		fi
		until listening; do sleep 0.05; done
		up=$(since "$t0")
		produce_one
		first=$(since "$t0")
		rcpu=$(echo "$(ticks)" | awk -v hz="$hz" '{printf "%.1f", $1 / hz}')
		read -r cpu2 gcs2 < <(idle_cpu "r$round.$bin"); rss2=$(rss_mib)
		silent2=$(grep -c 'has not been heard' "$work/log" || true)
		tick2=$(ticking)
		wait "$opener" 2>/dev/null || true
		opened=$(cat "$work/opened" 2>/dev/null || echo "?")
		: >"$work/log"
		t0=$(now)
		stop
		stopped2=$(since "$t0")
		errs2=$(grep -c 'level=ERROR' "$work/log" || true)
		echo "round $round $bin nodes=$nodes rf=$rf partitions=$parts topics=$topics: created ${answered}s, created+every ack ${created}s (${ccpu} CPU-s of the nodes); idle ${cpu}% of a core (GC cycles/mark CPU-ms in it ${gcs}; peer silences ${silent}; ticking L/F/E,silent ticks ${tick1}), RSS ${rss} MiB (${per} KiB per replica above ${empty} MiB); /metrics scrape ${scrape}; stop ${stopped}s (${errs} ERROR lines); restart: listening ${up}s, first ack ${first}s (${rcpu} CPU-s of the nodes); idle ${cpu2}% (GC ${gcs2}; peer silences ${silent2}; ticking ${tick2}), RSS ${rss2} MiB; every replica open ${opened}s; stop after the restart ${stopped2}s (${errs2} ERROR lines)"
	done
done

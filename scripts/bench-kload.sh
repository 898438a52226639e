#!/usr/bin/env bash
# Broker benchmark with the shared kload tool: Holdfast (flush=sync) next to
# franz-go's kfake (in memory, and with an fsync per batch) in the same run,
# so the figures compare as ratios on the same (noisy) machine.
#
#   scripts/bench-kload.sh                      # every case, 3 rounds; markdown on stdout
#   ROUNDS=5 RECORDS_SCALE=0.5 scripts/bench-kload.sh
#   CASES="1000p-1KiB" scripts/bench-kload.sh   # only the cases named
#   BASE_BIN=/path/to/old/holdfast scripts/bench-kload.sh   # adds that binary as peer holdfast-base
#   SHARED=/path/to/shared scripts/bench-kload.sh            # if it is not ../shared
#   DIRECT=1 scripts/bench-kload.sh             # adds peer holdfast-direct (--log-direct-io)
#   JOURNAL=1 scripts/bench-kload.sh            # adds peer holdfast-journal (--log-journal)
#                                               # (and holdfast-base-journal with BASE_BIN)
#   NEW_FLAGS="--raft-solo-path" scripts/bench-kload.sh # extra serve flags for this tree's holdfast peers
#   PEERS="holdfast holdfast-direct" scripts/bench-kload.sh  # only these peers
#   KEEP=/tmp/results.jsonl scripts/bench-kload.sh           # keep the raw results (one JSON line per run)
#   WARMUP=4 scripts/bench-kload.sh             # produce cases: create the topic and write 4 records
#                                               # per partition before the measured window
#
# Without WARMUP a produce case's window includes creating the topic: at
# 1,000 partitions on this VM that is 3-4 CPU-s of the broker (directories,
# segment and checkpoint files, fsyncs: docs/benchmarks.md, round 12), i.e.
# most of the "CPU per record" of a 100,000-record run. With WARMUP the
# creation's CPU is reported on its own (setup CPU-s) and the window holds
# only records written to partitions that exist.
#
# Cases are produce runs, except the consume ones (produce, then time a
# consumer reading it all back: the read path right after the writes, page
# cache or not) and the e2e ones (kload e2e at a fixed rate: a tailing
# consumer; p50/p99 are then end-to-end latencies).
#
# Every case runs each peer once per round, peers interleaved, so a change of
# the machine's load hits all alike. The table has each case's medians, the
# broker process's CPU per record (user + system from /proc/PID/stat over the
# run), and holdfast / kfake-sync per round. kload exits 2 if an acknowledged
# record is lost, which stops the script.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
scale=${RECORDS_SCALE:-1}
rounds=${ROUNDS:-3}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

# name  record-bytes  partitions  records  rate(0 = saturated)  kind  linger
# (an RF=3 case needs a 3-node start_peer; add its line and a branch there)
# linger is the producer's linger.ms (kload -linger); 0 = send at once.
all_cases="
1p-1KiB     1024  1     200000 0     produce 0
6p-1KiB     1024  6     200000 0     produce 0
6p-100B     100   6     500000 0     produce 0
1000p-1KiB  1024  1000  200000 0     produce 0
1000p-1KiB-linger5 1024 1000 200000 0 produce 5ms
1p-rate1k   1024  1     10000  1000  produce 0
1p-consume  1024  1     200000 0     consume 0
1p-e2e      1024  1     200000 50000 e2e     0
"
default_cases=$(echo "$all_cases" | awk 'NF && $6 == "produce" {print $1}')
cases=${CASES:-$default_cases}
peers="holdfast kfake-sync kfake-mem"
if [ -n "${BASE_BIN:-}" ]; then peers="holdfast holdfast-base kfake-sync kfake-mem"; fi
if [ -n "${DIRECT:-}" ]; then peers="${peers/holdfast /holdfast holdfast-direct }"; fi
if [ -n "${JOURNAL:-}" ]; then peers="${peers/holdfast /holdfast holdfast-journal }"; fi
if [ -n "${JOURNAL:-}" ] && [ -n "${BASE_BIN:-}" ]; then peers="${peers/holdfast-base /holdfast-base holdfast-base-journal }"; fi
peers=${PEERS:-$peers}

echo "building holdfast, kload, kfake-server into $work" >&2
(cd "$repo" && CGO_ENABLED=0 go build -o "$work/holdfast" ./cmd/holdfast)
(cd "$shared/tools/kload" && go build -o "$work/kload" . && go build -o "$work/kfake-server" ./cmd/kfake-server)

port=${PORT:-39092}
start_peer() { # name -> starts it on $port, sets $pid
	rm -rf "$work/data"; mkdir -p "$work/data"
	case $1 in
	holdfast) (cd "$work" && exec ./holdfast serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn ${NEW_FLAGS:-}) & ;;
	holdfast-direct) (cd "$work" && exec ./holdfast serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn --log-direct-io ${NEW_FLAGS:-}) & ;;
	holdfast-journal) (cd "$work" && exec ./holdfast serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn --log-journal ${NEW_FLAGS:-}) & ;;
	holdfast-base) (cd "$work" && exec "$BASE_BIN" serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn) & ;;
	holdfast-base-journal) (cd "$work" && exec "$BASE_BIN" serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn --log-journal) & ;;
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
cpu_ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; }
# The client's own CPU (user + system seconds, from GNU time when installed):
# client and broker share the machine's cores, so a case's records/s can
# never pass cores / (client + broker CPU per record).
timed() {
	if [ -x /usr/bin/time ]; then /usr/bin/time -f '%U %S' -o "$work/client-cpu" "$@"; else echo "0 0" >"$work/client-cpu"; "$@"; fi
}

# run CASE PEER ROUND: one kload produce; appends a JSON line to $work/results.
run() {
	local name=$1 peer=$2 round=$3 size parts records rate kind linger
	read -r _ size parts records rate kind linger <<<"$(echo "$all_cases" | awk -v n="$name" '$1 == n')"
	records=$(python3 -c "print(max(1000, int($records*$scale)))")
	local topic="b-$name-$RANDOM" out c0 c1 rss=0 setup=0 create=-create
	if [ "${WARMUP:-0}" -gt 0 ] && [ "$kind" = produce ]; then
		c0=$(cpu_ticks "$pid")
		"$work/kload" produce -brokers 127.0.0.1:$port -topic "$topic" -create -partitions "$parts" \
			-records $((parts * WARMUP)) -size "$size" -acks all >/dev/null
		setup=$(( $(cpu_ticks "$pid") - c0 ))
		create=
	fi
	local produce=("$work/kload" produce -brokers 127.0.0.1:$port -topic "$topic" $create -partitions "$parts"
		-records "$records" -size "$size" -acks all -rate "$rate" -linger "${linger:-0}")
	case $kind in
	consume)
		"${produce[@]}" -acked "$work/acked" >/dev/null
		c0=$(cpu_ticks "$pid")
		out=$(timed "$work/kload" consume -brokers 127.0.0.1:$port -topic "$topic" -expect "$work/acked" | tail -1)
		c1=$(cpu_ticks "$pid") ;;
	e2e)
		c0=$(cpu_ticks "$pid")
		out=$(timed "$work/kload" e2e -brokers 127.0.0.1:$port -topic "$topic" -create -partitions "$parts" \
			-records "$records" -size "$size" -acks all -rate "$rate" | tail -1)
		c1=$(cpu_ticks "$pid") ;;
	*)
		c0=$(cpu_ticks "$pid")
		out=$(timed "${produce[@]}" | tail -1)
		c1=$(cpu_ticks "$pid") ;;
	esac
	if [ -r "/proc/$pid/status" ]; then rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$pid/status"); fi
	python3 -c '
import json,sys
r=json.loads(sys.argv[1])
if r.get("cmd") == "e2e":  # the row: produce rate, end-to-end latency
    lat = r["consume"].get("e2e_latency") or r["produce"]["produce_latency"]
    r = dict(r["produce"], produce_latency=lat)
elif r.get("cmd") == "consume":  # the row: consume rate, no latency
    r = dict(r, records=r["fetched"], acked=r["fetched"], failed=r.get("lost", 0), produce_latency={"p50_ms": 0, "p99_ms": 0})
r.update(case=sys.argv[2], peer=sys.argv[3], round=int(sys.argv[4]), cpu_s=(int(sys.argv[6])-int(sys.argv[5]))/100.0, rss_mib=int(sys.argv[7]),
         client_cpu_s=sum(float(x) for x in sys.argv[8].split()[:2]), setup_cpu_s=int(sys.argv[9])/100.0)
print(json.dumps(r))' "$out" "$name" "$peer" "$round" "$c0" "$c1" "$rss" "$(tail -1 "$work/client-cpu" 2>/dev/null || echo 0 0)" "$setup" >>"$work/results"
}

for name in $cases; do
	for round in $(seq "$rounds"); do
		for peer in $peers; do
			echo "case $name round $round: $peer" >&2
			start_peer "$peer"
			run "$name" "$peer" "$round"
			stop_peer
		done
	done
done

if [ -n "${KEEP:-}" ]; then cp "$work/results" "$KEEP"; fi
python3 - "$work/results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cases = list(dict.fromkeys(r["case"] for r in rows))
peers = list(dict.fromkeys(r["peer"] for r in rows))
med = lambda xs: statistics.median(xs) if xs else float("nan")
setup = any(r.get("setup_cpu_s") for r in rows)
print("| case | peer | records/s | MB/s | p50 ms | p99 ms | broker CPU µs/record | client CPU µs/record | peak RSS MiB | failed |" + (" setup CPU-s |" if setup else ""))
print("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if setup else ""))
for c in cases:
    for p in peers:
        rs = [r for r in rows if r["case"] == c and r["peer"] == p]
        if not rs: continue
        l = [r["produce_latency"] for r in rs]
        n = lambda r: max(1, r["acked"] if "acked" in r else r["records"])
        cpu = med([1e6 * r["cpu_s"] / n(r) for r in rs])
        ccpu = med([1e6 * r.get("client_cpu_s", 0) / n(r) for r in rs])
        print("| %s | %s | %.0f | %.1f | %.2f | %.2f | %.2f | %.2f | %s | %d |" % (c, p,
            med([r["records_per_s"] for r in rs]), med([r["mb_per_s"] for r in rs]),
            med([x["p50_ms"] for x in l]), med([x["p99_ms"] for x in l]), cpu, ccpu,
            max(r["rss_mib"] for r in rs) or "-", sum(r["failed"] for r in rs)) +
            (" %.2f |" % med([r.get("setup_cpu_s", 0) for r in rs]) if setup else ""))
print()
print("Per round, holdfast / kfake-sync (records/s; CPU per record)" + (" and holdfast / holdfast-base" if "holdfast-base" in peers else "") + ":")
print()
print("| case | records/s ratio per round | median | CPU/record ratio per round | median |" + (" records/s vs base | CPU vs base |" if "holdfast-base" in peers else ""))
print("|---|---|---|---|---|" + ("---|---|" if "holdfast-base" in peers else ""))
def get(c, p, k):
    return {r["round"]: r for r in rows if r["case"] == c and r["peer"] == p}.get(k)
def cpr(r):
    return r["cpu_s"] / max(1, r.get("acked", r["records"]))
for c in cases:
    rr, cr, br, bc = [], [], [], []
    for k in sorted({r["round"] for r in rows if r["case"] == c}):
        h, s, b = get(c, "holdfast", k), get(c, "kfake-sync", k), get(c, "holdfast-base", k)
        if h and s and s["records_per_s"] > 0 and cpr(s) > 0:
            rr.append(h["records_per_s"] / s["records_per_s"]); cr.append(cpr(h) / cpr(s))
        if h and b and b["records_per_s"] > 0 and cpr(b) > 0:
            br.append(h["records_per_s"] / b["records_per_s"]); bc.append(cpr(h) / cpr(b))
    f = lambda xs: ", ".join("%.2f" % x for x in xs)
    line = "| %s | %s | %.2fx | %s | %.2fx |" % (c, f(rr), med(rr), f(cr), med(cr))
    if "holdfast-base" in peers:
        line += " %s (%.2fx) | %s (%.2fx) |" % (f(br), med(br), f(bc), med(bc))
    print(line)
if "kfake-mem" in peers:
    print()
    print("Per round, holdfast / kfake-mem (records/s; CPU per record):")
    print()
    print("| case | records/s ratio per round | median | CPU/record ratio per round | median |")
    print("|---|---|---|---|---|")
    for c in cases:
        rr, cr = [], []
        for k in sorted({r["round"] for r in rows if r["case"] == c}):
            h, m = get(c, "holdfast", k), get(c, "kfake-mem", k)
            if h and m and m["records_per_s"] > 0 and cpr(m) > 0:
                rr.append(h["records_per_s"] / m["records_per_s"]); cr.append(cpr(h) / cpr(m))
        f = lambda xs: ", ".join("%.2f" % x for x in xs)
        print("| %s | %s | %.2fx | %s | %.2fx |" % (c, f(rr), med(rr), f(cr), med(cr)))
others = [p for p in peers if p.startswith("holdfast-") and p != "holdfast-base"]
if others:
    print()
    print("Per round, against holdfast (records/s; CPU per record; p50):")
    print()
    print("| case | peer | records/s ratio per round | median | CPU/record ratio per round | median | p50 ratio per round | median |")
    print("|---|---|---|---|---|---|---|---|")
    for c in cases:
        for p in others:
            rr, cr, lr = [], [], []
            for k in sorted({r["round"] for r in rows if r["case"] == c}):
                h, o = get(c, "holdfast", k), get(c, p, k)
                if h and o and h["records_per_s"] > 0 and cpr(h) > 0:
                    rr.append(o["records_per_s"] / h["records_per_s"]); cr.append(cpr(o) / cpr(h))
                    if h["produce_latency"]["p50_ms"] > 0:
                        lr.append(o["produce_latency"]["p50_ms"] / h["produce_latency"]["p50_ms"])
            f = lambda xs: ", ".join("%.2f" % x for x in xs)
            print("| %s | %s | %s | %.2fx | %s | %.2fx | %s | %.2fx |" % (c, p, f(rr), med(rr), f(cr), med(cr), f(lr), med(lr)))
EOF

#!/usr/bin/env bash
# Tiered storage's two benchmark targets (issue 28, docs/tiered-storage.md),
# each as a ratio of two cases measured in the same run on the same node:
#
#   (a) produce p99 while uploading: kload produce at a fixed rate to a topic
#       with remote.storage.enable=true and small segments (so segments are
#       uploaded, and the local tier deleted, during the run) next to the
#       same topic with remote storage off. Target: tiered p99 <= 1.5x.
#   (b) catch-up read: produce N MiB, then time a consumer reading it all
#       from offset 0, once when the data is only in the object store (a
#       local tier of one byte deleted every uploaded segment) and once when
#       it is all on the local disk. Target: remote MiB/s >= 0.5x local.
#
#   scripts/bench-tiered.sh                     # 3 rounds; markdown on stdout
#   ROUNDS=5 RATE=2000 SECONDS_PER_RUN=10 CATCHUP_MIB=64 scripts/bench-tiered.sh
#   SEGMENT_BYTES=1048576 TASK_INTERVAL=1s scripts/bench-tiered.sh
#   KEEP=/tmp/tiered.jsonl scripts/bench-tiered.sh   # keep the raw kload lines
#   HOLDFAST_BIN=/tmp/old/holdfast ONLY=a scripts/bench-tiered.sh  # a built binary; (a) only
#   ONLY=b scripts/bench-tiered.sh              # (b) only
#   CACHE_BYTES=67108864 ONLY=b scripts/bench-tiered.sh  # a read cache smaller than what (b) reads
#   (scripts/bench-tiered-ab.sh runs it for two commits, interleaved)
#
# One holdfast node (flush=sync, the default) with tiered storage on and one
# versitygw (an S3-compatible server with a POSIX backend, on this machine's
# disk) for the whole run; every case gets its own topic, the cases of a
# round run interleaved (their order alternating by round), so a change of
# the machine's load hits both alike. kload exits 2 if an acknowledged
# record is lost or read back wrong, which stops the script.
#
# Needs versitygw on PATH or in $(go env GOPATH)/bin (.ci/run installs
# v1.8.0) and the shared kload tool (SHARED, default ../shared).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
rounds=${ROUNDS:-3}
rate=${RATE:-2000}               # records/s offered in (a)
secs=${SECONDS_PER_RUN:-10}      # length of one produce run in (a)
size=${SIZE:-1024}               # record value bytes
catchup_mib=${CATCHUP_MIB:-64}   # MiB read back in (b)
seg=${SEGMENT_BYTES:-1048576}    # segment.bytes of every topic
interval=${TASK_INTERVAL:-1s}    # remote.log.manager.task.interval.ms
cache=()                         # remote.log.storage.cache.bytes (default: the node's, 1 GiB)
if [ -n "${CACHE_BYTES:-}" ]; then cache=(--remote-log-storage-cache-bytes "$CACHE_BYTES"); fi
port=${PORT:-39192}
s3port=${S3_PORT:-39193}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

gw=$(command -v versitygw || echo "$(go env GOPATH)/bin/versitygw")
[ -x "$gw" ] || { echo "versitygw not found: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0" >&2; exit 1; }

echo "building holdfast, kload into $work" >&2
if [ -n "${HOLDFAST_BIN:-}" ]; then cp "$HOLDFAST_BIN" "$work/holdfast"; else (cd "$repo" && CGO_ENABLED=0 go build -o "$work/holdfast" ./cmd/holdfast); fi
(cd "$shared/tools/kload" && go build -o "$work/kload" .)

await_port() { # port name (30 s: a start on a loaded machine)
	for _ in $(seq 300); do
		if (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; then return; fi
		sleep 0.1
	done
	echo "$2 did not start" >&2; exit 1
}

export AWS_ACCESS_KEY_ID=benchaccess AWS_SECRET_ACCESS_KEY=benchsecret1234
mkdir -p "$work/s3/bench" "$work/data"
"$gw" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port 127.0.0.1:$s3port --quiet posix "$work/s3" >"$work/s3.log" 2>&1 &
gwpid=$!
await_port $s3port versitygw
(cd "$work" && exec ./holdfast serve --listen 127.0.0.1:$port --data-dir "$work/data" --metrics-listen "" --log-level warn \
	--remote-log-storage --remote-log-storage-s3-bucket bench --remote-log-storage-s3-endpoint http://127.0.0.1:$s3port \
	--remote-log-storage-s3-region us-east-1 --remote-log-storage-s3-path-style \
	--remote-log-manager-task-interval "$interval" ${cache[@]+"${cache[@]}"}) >"$work/holdfast.log" 2>&1 &
pid=$!
await_port $port holdfast
hf() { "$work/holdfast" --bootstrap 127.0.0.1:$port "$@"; }

create() { # topic tiered(yes|no)
	local c=(-c "segment.bytes=$seg")
	if [ "$2" = yes ]; then c+=(-c remote.storage.enable=true -c local.retention.bytes=1); fi
	hf topic create "$1" -p 1 -r 1 "${c[@]}" >/dev/null
}
# local_bytes TOPIC: the partition's size on the local disk (DescribeLogDirs).
local_bytes() { hf log-dirs --topic "$1" | awk -v t="$1" '$1 == t {print $3}'; }
note() { python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(bench=sys.argv[2], tiered=sys.argv[3], round=int(sys.argv[4]), cpu=[float(x) for x in sys.argv[5:]]); print(json.dumps(r))' "$@" >>"$work/results"; }
# cpu PID: the process's CPU seconds so far (user + system). A process's CPU
# per MiB moves less with the machine's load than its rate does.
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{print ($14 + $15) / t}' "/proc/$1/stat"; }

records_a=$((rate * secs))
records_b=$((catchup_mib * 1048576 / size))
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >"$work/load"
for round in $(seq "$rounds"); do
	order="no yes"; if [ $((round % 2)) = 0 ]; then order="yes no"; fi
	# (a) produce p99 at a fixed rate, tiered or not.
	for tiered in $order; do
		[ "${ONLY:-}" != b ] || break
		topic="a-$tiered-$round"
		echo "round $round: produce $records_a records at $rate/s, tiered=$tiered" >&2
		create "$topic" "$tiered"
		# The last round's (b) wrote hundreds of MiB (the topics, the
		# object store's copies) that the kernel writes back ~30 s later,
		# i.e. during this run: its fdatasyncs then waited 100+ ms behind
		# that writeback, in either case. Written back first, each run
		# measures its own uploads.
		sync -f "$work/data"
		out=$("$work/kload" produce -brokers 127.0.0.1:$port -topic "$topic" -records "$records_a" -size "$size" -acks all -rate "$rate" | tail -1)
		note "$out" produce "$tiered" "$round"
	done
	# (b) catch-up read from offset 0: written first, then (tiered) waited
	# on until the local tier holds less than two segments, i.e. the
	# consumer's reads below it all go to the object store.
	for tiered in $order; do
		[ "${ONLY:-}" != a ] || break
		topic="b-$tiered-$round"
		create "$topic" "$tiered"
		echo "round $round: write $catchup_mib MiB, tiered=$tiered" >&2
		"$work/kload" produce -brokers 127.0.0.1:$port -topic "$topic" -records "$records_b" -size "$size" -acks all -acked "$work/acked-$topic" >/dev/null
		if [ "$tiered" = yes ]; then
			for i in $(seq 600); do
				b=$(local_bytes "$topic"); if [ "${b:-0}" -lt $((2 * seg)) ]; then break; fi
				if [ "$i" = 600 ]; then echo "the local tier of $topic still holds $b bytes after 60 s" >&2; exit 1; fi
				sleep 0.1
			done
		fi
		echo "round $round: catch-up read, tiered=$tiered (local bytes $(local_bytes "$topic"))" >&2
		h0=$(cpu $pid) g0=$(cpu $gwpid)
		out=$("$work/kload" consume -brokers 127.0.0.1:$port -topic "$topic" -expect "$work/acked-$topic" | tail -1)
		note "$out" catchup "$tiered" "$round" "$(cpu $pid)" "$h0" "$(cpu $gwpid)" "$g0"
	done
done
if ! kill -0 "$pid" 2>/dev/null; then echo "holdfast died" >&2; tail "$work/holdfast.log" >&2; exit 1; fi

echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)" >>"$work/load"
if [ -n "${KEEP:-}" ]; then cp "$work/results" "$KEEP"; fi
cat "$work/load"; echo
python3 - "$work/results" "$rate" "$secs" "$catchup_mib" "$seg" "$interval" "$size" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rate, secs, mib, seg, interval, size = sys.argv[2:]
med = statistics.median
rounds = sorted({r["round"] for r in rows})
def get(bench, tiered, k):
    return next(r for r in rows if r["bench"] == bench and r["tiered"] == tiered and r["round"] == k)
def p99(r): return r["produce_latency"]["p99_ms"]
def mibs(r): return r["mb_per_s"] * 1e6 / 1048576 if "mb_per_s" in r else r["records_per_s"] * int(size) / 1048576
def table_a():
    print("(a) produce at %s records/s of %s B for %s s, segment.bytes=%s, task interval %s: p99 ms per round" % (rate, size, secs, seg, interval))
    print()
    def p50(r): return r["produce_latency"]["p50_ms"]
    print("| round | no tiering p50 / p99 ms | tiered p50 / p99 ms | p99 tiered / no tiering |")
    print("|---|---|---|---|")
    ra = []
    for k in rounds:
        n, t = get("produce", "no", k), get("produce", "yes", k)
        ra.append(p99(t) / p99(n))
        print("| %d | %.2f / %.2f | %.2f / %.2f | %.2fx |" % (k, p50(n), p99(n), p50(t), p99(t), ra[-1]))
    col = lambda f, tiered: med([f(get("produce", tiered, k)) for k in rounds])
    print("| median | %.2f / %.2f | %.2f / %.2f | **%.2fx** (target <= 1.5x) |" % (col(p50, "no"), col(p99, "no"), col(p50, "yes"), col(p99, "yes"), med(ra)))
    print()
if any(r["bench"] == "produce" for r in rows):
    table_a()
if not any(r["bench"] == "catchup" for r in rows):
    sys.exit()
print("(b) catch-up read of %s MiB from offset 0: MiB/s per round" % mib)
print()
print("| round | local disk MiB/s | object store MiB/s | object store / local |")
print("|---|---|---|---|")
rb = []
for k in rounds:
    n, t = get("catchup", "no", k), get("catchup", "yes", k)
    rb.append(mibs(t) / mibs(n))
    print("| %d | %.1f | %.1f | %.2fx |" % (k, mibs(n), mibs(t), rb[-1]))
print("| median | %.1f | %.1f | **%.2fx** (target >= 0.5x) |" % (med([mibs(get("catchup", "no", k)) for k in rounds]), med([mibs(get("catchup", "yes", k)) for k in rounds]), med(rb)))
print()
# CPU seconds of holdfast and of the object store during each read, per
# GiB read: what the remote path costs the machine (the consumer's own is
# the same in both cases).
def cpu(r, i): return (r["cpu"][2 * i] - r["cpu"][2 * i + 1]) * 1024 / int(mib)
print("CPU seconds per GiB read during (b): holdfast (local / object store), and the object store's process")
print()
print("| round | holdfast, local disk | holdfast, object store | versitygw |")
print("|---|---|---|---|")
for k in rounds:
    n, t = get("catchup", "no", k), get("catchup", "yes", k)
    print("| %d | %.2f | %.2f | %.2f |" % (k, cpu(n, 0), cpu(t, 0), cpu(t, 1)))
print("| median | %.2f | %.2f | %.2f |" % tuple(med([cpu(get("catchup", x, k), i) for k in rounds]) for x, i in (("no", 0), ("yes", 0), ("yes", 1))))
EOF

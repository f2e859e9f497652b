#!/usr/bin/env bash
# Remote workers over a real (virtual) link: a network namespace plays the worker host,
# a veth pair is the wire. Measures
#   1. a plain TCP stream over the pair, both directions (the bandwidth reference), with
#      the cores the whole machine kept busy meanwhile (as for every run below);
#   2. W2/W3 (--variant gen --verify, 3 epochs) with --workers 2 (local), --workers 1
#      --remote S1 and --workers 0 --remote S1 --remote S2, 2 rounds (ABC then CBA):
#      samples/s, MB/s and main_cpu_us_per_batch of epochs 2-3, checksums against local;
#   3. the goal figure: W2, --workers 0, 2 hosts, MB/s / TCP stream MB/s;
#   4. losing the host (W2 --n 60000, 1 epoch, --workers 1 --remote S1): SIGKILL,
#      SIGSTOP and the outside veth end set down, each once the server's stats line shows
#      tasks_done >= 5: exit status, checksum against --workers 2, the loss warning naming
#      host:port, seconds from the fault to the warning and to the end of the run.
# Everything is printed as JSON lines and written to $OUT
# (default bench/results/remote_netns.jsonl).
#
# Usage (as root): scripts/remote_netns.sh
# Environment: OUT, LOADER (default build/loader; copied to a temporary folder first so a
# rebuild during the run does not change it), TOTAL_S (whole-run bound, default 900),
# BENCH_TIMEOUT_S (per loader run, default 120), ROUNDS (default 2), TCP_BYTES
# (default 2000000000), W2_N (3000), W3_N (2000), LOSS_N (60000),
# REMOTE_TIMEOUT_MS (default 10000, the loader's default), BENCH_EXTRA (more `loader bench`
# arguments for every W2/W3 run, e.g. "--prefetch-factor 4"; default none).
# Whatever happens (error, Ctrl-C, SIGTERM, the TOTAL_S bound), the trap kills the
# processes this script started, deletes the namespace and the veth pair and the
# temporary folder.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOTAL_S=${TOTAL_S:-900}

# The whole run is bounded: re-run this script under timeout (the trap below runs on its
# SIGTERM). --foreground keeps Ctrl-C from a terminal working.
if [[ -z "${LDRTEST_INNER:-}" ]]; then
  export LDRTEST_INNER=1
  exec timeout --foreground -k 30 "$TOTAL_S" bash "${BASH_SOURCE[0]}" "$@"
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "remote_netns.sh: needs root (network namespaces, veth)" >&2
  exit 2
fi

OUT=${OUT:-$ROOT/bench/results/remote_netns.jsonl}
LOADER_SRC=${LOADER:-$ROOT/build/loader}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-120}
ROUNDS=${ROUNDS:-2}
TCP_BYTES=${TCP_BYTES:-2000000000}
TCP_CHUNK=$((4 * 1024 * 1024))
W2_N=${W2_N:-3000}
W3_N=${W3_N:-2000}
LOSS_N=${LOSS_N:-60000}
REMOTE_TIMEOUT_MS=${REMOTE_TIMEOUT_MS:-10000}
PY=/usr/bin/python3

TAG=ldrtest$$
NS=$TAG
VO=${TAG}o   # outside end (at most 15 characters: pid_max <= 4194304)
VI=${TAG}i   # inside end, moved into $NS
TMP=""
PIDS=()      # every background process this script started (pids of timeout/ip/python)
LINK_DOWN=0

cleanup() {
  local rc=$?
  # Ignore further signals while cleaning up: a Ctrl-C reaches this shell twice (from
  # the terminal and forwarded by timeout), and the second must not cut the cleanup short.
  # (The cleanup is bounded; timeout -k SIGKILLs it 30 s after TOTAL_S at worst.)
  trap '' INT TERM HUP
  trap - EXIT
  set +e
  local p
  # A server whose client link is down does not end on SIGTERM (seen: > 60 s); set the
  # link up first, then SIGTERM, and SIGKILL whatever is left after 5 s.
  ((LINK_DOWN)) && ip link set "$VO" up 2>/dev/null
  # Servers may be stopped (SIGSTOP test): continue them so they can die.
  for p in "${PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || continue
    pkill -CONT -P "$p" 2>/dev/null
    kill -CONT "$p" 2>/dev/null
    kill -TERM "$p" 2>/dev/null
  done
  local deadline=$((SECONDS + 5)) alive
  while ((SECONDS < deadline)); do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || continue
    pkill -KILL -P "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  # Anything still running inside our namespace was started by us (servers, receivers).
  if ip netns list 2>/dev/null | grep -qw "$NS"; then
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  fi
  { wait; } 2>/dev/null   # (bash's "Killed" notices of our own kills)
  ip link del "$VO" 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  [[ -n "$TMP" ]] && rm -rf "$TMP"
  ((rc == 0)) || echo "remote_netns.sh: exit status $rc (failed, interrupted or past TOTAL_S=${TOTAL_S}s); cleaned up (namespace $NS, veth $VO/$VI, the processes it started)" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

now() { echo "$EPOCHREALTIME"; }
emit() { printf '%s\n' "$1"; printf '%s\n' "$1" >>"$OUT"; }
die() { echo "remote_netns.sh: $*" >&2; exit 1; }

TMP=$(mktemp -d "/tmp/${TAG}.XXXXXX")
mkdir -p "$(dirname "$OUT")"
: >"$OUT"

[[ -x "$LOADER_SRC" ]] || die "no loader binary at $LOADER_SRC"
cp "$LOADER_SRC" "$TMP/loader"
LOADER_MTIME=$(stat -c %y "$LOADER_SRC")
LOADER="$TMP/loader"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
echo >>"$TMP/token"
chmod 600 "$TMP/token"
TOK="$TMP/token"

# ---------------------------------------------------------------- python helpers
cat >"$TMP/helper.py" <<'PYEOF'
import json, os, signal, socket, sys, time

def cpu_jiffies():
    # (busy, total) jiffies of the whole machine, from /proc/stat's first line
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)  # idle + iowait
    return sum(f) - idle, sum(f)

def busy_cores(a, b):
    # cores the machine kept busy between two cpu_jiffies() readings
    return (b[0] - a[0]) / (b[1] - a[1]) * os.cpu_count() if b[1] > a[1] else None

def recv(host, port, ready):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen(1)
    with open(ready + ".tmp", "w") as f:
        f.write("ready\n")
    os.rename(ready + ".tmp", ready)
    c, _ = s.accept()
    buf = bytearray(4 << 20)
    mv = memoryview(buf)
    n = c.recv_into(mv)
    t0 = time.perf_counter()
    j0 = cpu_jiffies()
    total = n
    first = n
    while n:
        n = c.recv_into(mv)
        total += n
    t1 = time.perf_counter()
    j1 = cpu_jiffies()
    # MB/s from the first byte to EOF (the first recv's bytes are not timed); the cores
    # the whole machine kept busy meanwhile (sender, receiver, the veth pair's kernel path)
    secs = t1 - t0
    print(json.dumps({"bytes": total, "seconds": secs,
                      "MB_per_s": (total - first) / secs / 1e6 if secs > 0 else None,
                      "machine_busy_cores": busy_cores(j0, j1)}))

def send(host, port, nbytes, chunk):
    nbytes, chunk = int(float(nbytes)), int(chunk)
    c = socket.create_connection((host, int(port)), timeout=30)
    data = bytes(chunk)
    sent = 0
    t0 = time.perf_counter()
    while sent < nbytes:
        m = min(chunk, nbytes - sent)
        c.sendall(data if m == chunk else data[:m])
        sent += m
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    c.close()
    t1 = time.perf_counter()
    print(json.dumps({"sent": sent, "sender_seconds": t1 - t0}))

def stamp():
    # stderr lines of a run, each prefixed with the wall-clock time it arrived
    for line in sys.stdin.buffer:
        sys.stdout.write("%.6f\t%s" % (time.time(), line.decode("utf-8", "replace")))
        sys.stdout.flush()

def epochs_of(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return [e for e in out if "epoch" in e]

def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None

def bench_record(workload, config, rnd, rc, outp, errp, refp, secs, j0, j1):
    eps = epochs_of(outp)
    ref = epochs_of(refp) if refp != "-" else None
    late = [e for e in eps if e.get("epoch", 0) >= 2]
    sums = [e.get("checksum") for e in eps]
    ref_sums = [e.get("checksum") for e in ref] if ref is not None else None
    err = open(errp, errors="replace").read() if os.path.exists(errp) else ""
    warn = [l for l in err.splitlines() if "Warning" in l or "warning" in l]
    rec = {"kind": "bench", "workload": workload, "config": config, "round": int(rnd),
           "rc": int(rc), "wall_s": float(secs), "epochs": len(eps),
           "machine_busy_cores_run": busy_cores([int(x) for x in j0.split(",")], [int(x) for x in j1.split(",")]),
           "workers_reported": eps[0].get("workers") if eps else None,
           "samples_per_s_e23": mean([e.get("samples_per_s") for e in late]),
           "MB_per_s_e23": mean([e.get("MB_per_s") for e in late]),
           "main_cpu_us_per_batch_e23": mean([e.get("main_cpu_us_per_batch") for e in late]),
           "per_epoch_samples_per_s": [e.get("samples_per_s") for e in eps],
           "per_epoch_MB_per_s": [e.get("MB_per_s") for e in eps],
           "ok": all(e.get("ok") for e in eps) if eps else False,
           "checksums": sums,
           "checksum_equal_local": (sums == ref_sums) if ref_sums is not None else None,
           "stderr_warnings": len(warn),
           "stderr_tail": err.strip().splitlines()[-1][:300] if err.strip() and int(rc) != 0 else None}
    print(json.dumps(rec))

def bench_summary(workload, *files):
    recs = [json.loads(l) for f in files for l in open(f) if l.strip()]
    by = {}
    for r in recs:
        if r.get("kind") == "bench" and r["workload"] == workload:
            by.setdefault(r["config"], []).append(r)
    for cfg, rs in by.items():
        print(json.dumps({"kind": "bench_summary", "workload": workload, "config": cfg,
                          "rounds": len(rs),
                          "samples_per_s_e23": mean([r["samples_per_s_e23"] for r in rs]),
                          "MB_per_s_e23": mean([r["MB_per_s_e23"] for r in rs]),
                          "main_cpu_us_per_batch_e23": mean([r["main_cpu_us_per_batch_e23"] for r in rs]),
                          "machine_busy_cores_run": mean([r.get("machine_busy_cores_run") for r in rs]),
                          "per_round_MB_per_s_e23": [r["MB_per_s_e23"] for r in rs],
                          "all_rc_0": all(r["rc"] == 0 for r in rs),
                          "all_ok": all(r["ok"] for r in rs),
                          "checksums_all_equal_local": all(r["checksum_equal_local"] is not False for r in rs)}))

def last_stats(path):
    last = None
    try:
        for l in open(path):
            if l.startswith("{") and "tasks_done" in l:
                last = l
    except OSError:
        pass
    return json.loads(last) if last else None

def loss_record(fault, hostport, rc, t_fault, t_end, outp, errts, refp, stats_at_fault, statsp):
    eps = epochs_of(outp)
    ref = epochs_of(refp)
    lines = []
    if os.path.exists(errts):
        for l in open(errts, errors="replace"):
            t, _, text = l.rstrip("\n").partition("\t")
            lines.append((float(t), text))
    needle = "DataLoader worker on " + hostport
    hits = [(t, x) for t, x in lines if needle in x]
    t_fault, t_end = float(t_fault), float(t_end)
    sums = [e.get("checksum") for e in eps]
    ref_sums = [e.get("checksum") for e in ref]
    try:
        st = json.loads(stats_at_fault)
    except ValueError:
        st = None
    rec = {"kind": "loss", "fault": fault, "host": hostport, "rc": int(rc),
           "checksum": sums[0] if len(sums) == 1 else sums,
           "checksum_workers2": ref_sums[0] if len(ref_sums) == 1 else ref_sums,
           "checksum_equal": bool(sums) and sums == ref_sums,
           "ok": all(e.get("ok") for e in eps) if eps else False,
           "samples_per_s": eps[0].get("samples_per_s") if eps else None,
           "loss_warning": bool(hits), "loss_warnings": len(hits),
           "fault_to_warning_s": (hits[0][0] - t_fault) if hits else None,
           "fault_to_end_s": t_end - t_fault,
           "server_tasks_done_at_fault": st.get("tasks_done") if st else None,
           "server_last_stats": last_stats(statsp),
           "stderr_lines": len(lines),
           "warning_text": hits[0][1][:240] if hits else None,
           "other_stderr": [x[:240] for t, x in lines if needle not in x and not x.startswith("[loader bench]")][:5]}
    print(json.dumps(rec))

def goal(tcp_file, bench_file):
    recs = [json.loads(l) for l in open(bench_file) if l.strip()]
    rs = [r for r in recs if r.get("kind") == "bench" and r["workload"] == "W2" and r["config"] == "w0_remote2"]
    tcp = [json.loads(l) for l in open(tcp_file) if l.strip()]
    def best(d):
        v = [t["MB_per_s"] for t in tcp if t.get("kind") == "tcp_stream" and t["direction"] == d and t.get("MB_per_s")]
        return max(v) if v else None
    def avg(d):
        return mean([t["MB_per_s"] for t in tcp if t.get("kind") == "tcp_stream" and t["direction"] == d])
    h2c, c2h = best("host_to_client"), best("client_to_host")
    h2c_m = avg("host_to_client")
    mb = mean([r["MB_per_s_e23"] for r in rs])
    print(json.dumps({"kind": "goal", "what": "W2 --workers 0, 2 remote hosts: MB/s of epochs 2-3 (mean of rounds) / plain TCP stream MB/s host->client (batches' direction; best rep, and mean of reps)",
                      "W2_w0_remote2_MB_per_s": mb,
                      "per_round_MB_per_s": [r["MB_per_s_e23"] for r in rs],
                      "tcp_host_to_client_MB_per_s_best": h2c, "tcp_host_to_client_MB_per_s_mean": h2c_m,
                      "tcp_client_to_host_MB_per_s_best": c2h,
                      "tcp_client_to_host_MB_per_s_mean": avg("client_to_host"),
                      "tcp_host_to_client_machine_busy_cores": mean([t.get("machine_busy_cores") for t in tcp if t.get("kind") == "tcp_stream" and t["direction"] == "host_to_client"]),
                      "W2_w0_remote2_machine_busy_cores_run": mean([r.get("machine_busy_cores_run") for r in rs]),
                      "ratio": mb / h2c if mb and h2c else None,
                      "ratio_vs_mean": mb / h2c_m if mb and h2c_m else None,
                      "ratio_vs_client_to_host_best": mb / c2h if mb and c2h else None}))

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"recv": recv, "send": send, "stamp": stamp, "bench-record": bench_record,
     "bench-summary": bench_summary, "loss-record": loss_record, "goal": goal}[cmd](*args)
PYEOF
H="$TMP/helper.py"

# ---------------------------------------------------------------- 1. namespace and veth
X=$(($$ % 200))
for _ in $(seq 200); do
  if ! ip -o -4 addr show | grep -q " 10\.199\.$X\." && [[ -z "$(ip -4 route show 10.199.$X.0/24)" ]]; then break; fi
  X=$(((X + 1) % 200))
done
OIP=10.199.$X.1
IIP=10.199.$X.2
ip netns add "$NS"
ip link add "$VO" type veth peer name "$VI"
ip link set "$VI" netns "$NS"
ip addr add "$OIP/24" dev "$VO"
ip link set "$VO" up
ip netns exec "$NS" ip addr add "$IIP/24" dev "$VI"
ip netns exec "$NS" ip link set "$VI" up
ip netns exec "$NS" ip link set lo up

emit "$($PY - "$NS" "$VO" "$VI" "$OIP" "$IIP" "$LOADER_SRC" "$LOADER_MTIME" "$(nproc)" "$(uname -r)" "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')" <<'EOF'
import json, sys, time
a = sys.argv[1:]
print(json.dumps({"kind": "setup", "netns": a[0], "veth_outside": a[1], "veth_inside": a[2],
                  "outside_ip": a[3], "inside_ip": a[4], "loader": a[5], "loader_mtime": a[6],
                  "nproc": int(a[7]), "kernel": a[8], "git_head": a[9], "started": time.time(),
                  "loadavg_at_start": open("/proc/loadavg").read().split()[:3]}))
EOF
)"

# Background process, bounded, recorded for the trap. Usage: bg NAME cmd...; pid in $BGPID.
bg() {
  local name=$1; shift
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  BGPID=$!
  PIDS+=("$BGPID")
}

wait_file() {  # wait_file PATH SECONDS [PID]: until PATH exists (PID, if given, must live)
  local path=$1 pid=${3:-} deadline=$((SECONDS + $2))
  while [[ ! -s "$path" ]]; do
    ((SECONDS < deadline)) || return 1
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.05
  done
}

# ---------------------------------------------------------------- 2. plain TCP stream
: >"$TMP/tcp.jsonl"
tcp_run() {  # tcp_run DIRECTION REP
  local dir=$1 rep=$2 port=$((5200 + $2)) rhost rpfx=() spfx=() rpid spid rc=0
  rm -f "$TMP/tcp_ready"
  if [[ $dir == client_to_host ]]; then rhost=$IIP; rpfx=(ip netns exec "$NS"); else rhost=$OIP; spfx=(ip netns exec "$NS"); fi
  bg tcp_recv "${rpfx[@]}" timeout 60 "$PY" "$H" recv "$rhost" "$port" "$TMP/tcp_ready"; rpid=$BGPID
  wait_file "$TMP/tcp_ready" 10 "$rpid" || die "TCP receiver did not start: $(cat "$TMP/tcp_recv.err")"
  bg tcp_send "${spfx[@]}" timeout 60 "$PY" "$H" send "$rhost" "$port" "$TCP_BYTES" "$TCP_CHUNK"; spid=$BGPID
  wait "$spid" || rc=$?
  wait "$rpid" || rc=$?
  ((rc == 0)) || die "TCP stream $dir failed ($rc): $(cat "$TMP/tcp_send.err" "$TMP/tcp_recv.err")"
  local line
  line=$($PY -c 'import json,sys; r=json.loads(sys.argv[1]); s=json.loads(sys.argv[2]); r.update(s); r.update(kind="tcp_stream", direction=sys.argv[3], rep=int(sys.argv[4]), chunk=int(sys.argv[5])); print(json.dumps(r))' \
    "$(cat "$TMP/tcp_recv.out")" "$(cat "$TMP/tcp_send.out")" "$dir" "$rep" "$TCP_CHUNK")
  echo "$line" >>"$TMP/tcp.jsonl"
  emit "$line"
}
tcp_run client_to_host 1
tcp_run host_to_client 1
tcp_run host_to_client 2
tcp_run client_to_host 2

# ---------------------------------------------------------------- 3. servers in the namespace
SRV_TPID=()   # pid of timeout (the ip netns exec process execs it)
SRV_PID=()    # pid of loader serve
SRV_ADDR=()
start_server() {  # start_server IDX PORT
  local i=$1 port=$2 deadline
  rm -f "$TMP/srv$i.out"
  bg "srv$i" ip netns exec "$NS" timeout "$TOTAL_S" "$LOADER" serve --listen "$IIP:$port" \
    --token-file "$TOK" --stats-every-ms 200
  SRV_TPID[i]=$BGPID
  disown "$BGPID"   # no "Killed" job notice when the SIGKILL test kills it; stop_server polls
  wait_file "$TMP/srv$i.out" 15 "$BGPID" || die "server $i did not start: $(cat "$TMP/srv$i.err")"
  grep -q '"listening"' "$TMP/srv$i.out" || die "server $i: no listening line: $(head -1 "$TMP/srv$i.out")"
  deadline=$((SECONDS + 5))
  SRV_PID[i]=""
  while [[ -z "${SRV_PID[i]}" ]]; do
    SRV_PID[i]=$(pgrep -P "$BGPID" -f "loader serve" || true)
    ((SECONDS < deadline)) || die "server $i: no loader process under timeout pid $BGPID"
    [[ -n "${SRV_PID[i]}" ]] || sleep 0.05
  done
  SRV_ADDR[i]="$IIP:$port"
}
stop_server() {  # stop_server IDX: SIGTERM, then SIGKILL if it is still there after 5 s
  local i=$1 deadline=$((SECONDS + 5))
  kill -CONT "${SRV_PID[i]}" 2>/dev/null || true
  kill -TERM "${SRV_TPID[i]}" 2>/dev/null || true
  while kill -0 "${SRV_PID[i]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
  if kill -0 "${SRV_PID[i]}" 2>/dev/null; then
    echo "remote_netns.sh: server ${SRV_ADDR[i]} still there 5 s after SIGTERM: SIGKILL" >&2
    kill -KILL "${SRV_PID[i]}" 2>/dev/null || true
  fi
  deadline=$((SECONDS + 5))
  while kill -0 "${SRV_TPID[i]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
}
PORT0=$((40000 + X * 20))
start_server 1 "$PORT0"
start_server 2 "$((PORT0 + 1))"
S1=${SRV_ADDR[1]}
S2=${SRV_ADDR[2]}

# ---------------------------------------------------------------- 4. W2 / W3 benches
: >"$TMP/bench.jsonl"
# The machine's (busy, total) jiffies, for the cores a run kept busy.
JIFFIES='f=[int(x) for x in open("/proc/stat").readline().split()[1:]]; i=f[3]+f[4]; print("%d,%d" % (sum(f)-i, sum(f)))'
bench_run() {  # bench_run WORKLOAD N CONFIG ROUND
  local w=$1 n=$2 cfg=$3 rnd=$4 name="b_${1}_${3}_${4}" rc=0 t0 t1 ref=- extra=()
  case $cfg in
    w2_local) extra=(--workers 2) ;;
    w1_remote1) extra=(--workers 1 --remote "$S1" --token-file "$TOK" --remote-timeout-ms "$REMOTE_TIMEOUT_MS") ;;
    w0_remote2) extra=(--workers 0 --remote "$S1" --remote "$S2" --token-file "$TOK" --remote-timeout-ms "$REMOTE_TIMEOUT_MS") ;;
  esac
  local j0 j1
  j0=$($PY -c "$JIFFIES")
  t0=$(now)
  bg "$name" timeout "$BENCH_TIMEOUT_S" "$LOADER" bench --workload "$w" --variant gen --n "$n" \
    --epochs 3 --verify "${extra[@]}" ${BENCH_EXTRA:-}
  wait "$BGPID" || rc=$?
  t1=$(now)
  j1=$($PY -c "$JIFFIES")
  [[ -s "$TMP/b_${w}_w2_local_1.out" ]] && ref="$TMP/b_${w}_w2_local_1.out"
  local line
  line=$($PY "$H" bench-record "$w" "$cfg" "$rnd" "$rc" "$TMP/$name.out" "$TMP/$name.err" "$ref" \
    "$($PY -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$t0" "$t1")" "$j0" "$j1")
  echo "$line" >>"$TMP/bench.jsonl"
  emit "$line"
}
for w in W2 W3; do
  n=$W2_N; [[ $w == W3 ]] && n=$W3_N
  for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then order=(w2_local w1_remote1 w0_remote2); else order=(w0_remote2 w1_remote1 w2_local); fi
    for cfg in "${order[@]}"; do bench_run "$w" "$n" "$cfg" "$r"; done
  done
done
for w in W2 W3; do
  while read -r line; do emit "$line"; done < <($PY "$H" bench-summary "$w" "$TMP/bench.jsonl")
done
for i in 1 2; do
  emit "$($PY -c 'import json,sys; l=[x for x in open(sys.argv[1]) if "tasks_done" in x]; print(json.dumps({"kind":"server_stats_after_benches","server":sys.argv[2],"last":json.loads(l[-1]) if l else None}))' "$TMP/srv$i.out" "${SRV_ADDR[i]}")"
done
stop_server 1
stop_server 2

# ---------------------------------------------------------------- 5. the goal figure
emit "$($PY "$H" goal "$TMP/tcp.jsonl" "$TMP/bench.jsonl")"

# ---------------------------------------------------------------- 6. losing the host
LOSS_REF=b_loss_ref
bg "$LOSS_REF" timeout "$BENCH_TIMEOUT_S" "$LOADER" bench --workload W2 --variant gen --n "$LOSS_N" \
  --epochs 1 --verify --workers 2
rc=0; wait "$BGPID" || rc=$?
((rc == 0)) || die "the --workers 2 reference run failed ($rc): $(tail -1 "$TMP/$LOSS_REF.err")"
emit "$($PY - "$TMP/$LOSS_REF.out" "$LOSS_N" <<'EOF'
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(json.dumps({"kind": "loss_reference", "workers": 2, "n": int(sys.argv[2]),
                  "checksum": e[0]["checksum"], "ok": e[0]["ok"], "samples_per_s": e[0]["samples_per_s"]}))
EOF
)"

tasks_done() {  # the last stats line's tasks_done of server IDX (empty if none yet)
  tail -n 1 "$TMP/srv$1.out" 2>/dev/null | sed -n 's/.*"tasks_done": *\([0-9]*\).*/\1/p'
}

loss_run() {  # loss_run FAULT IDX PORT
  local fault=$1 i=$2 port=$3 name="loss_$1" rc=0 t_fault t_end spid bpid td deadline st
  start_server "$i" "$port"
  rm -f "$TMP/$name.fifo"; mkfifo "$TMP/$name.fifo"
  "$PY" "$H" stamp <"$TMP/$name.fifo" >"$TMP/$name.errts" &
  spid=$!; PIDS+=("$spid")
  timeout "$BENCH_TIMEOUT_S" "$LOADER" bench --workload W2 --variant gen --n "$LOSS_N" --epochs 1 \
    --verify --workers 1 --remote "${SRV_ADDR[i]}" --token-file "$TOK" \
    --remote-timeout-ms "$REMOTE_TIMEOUT_MS" >"$TMP/$name.out" 2>"$TMP/$name.fifo" &
  bpid=$!; PIDS+=("$bpid")
  # wait for the server's stats line to show tasks_done >= 5 (never a fixed sleep)
  deadline=$((SECONDS + 60))
  while :; do
    td=$(tasks_done "$i")
    [[ -n "$td" ]] && ((td >= 5)) && break
    kill -0 "$bpid" 2>/dev/null || die "$fault: the run ended before the server did 5 tasks"
    ((SECONDS < deadline)) || die "$fault: the server did not reach 5 tasks in 60 s"
    sleep 0.02
  done
  st=$(tail -n 1 "$TMP/srv$i.out")
  t_fault=$(now)
  case $fault in
    sigkill) kill -KILL "${SRV_PID[i]}" ;;
    sigstop) kill -STOP "${SRV_PID[i]}" ;;
    linkdown) ip link set "$VO" down; LINK_DOWN=1 ;;
  esac
  wait "$bpid" || rc=$?
  t_end=$(now)
  wait "$spid" || true
  case $fault in
    sigstop) kill -CONT "${SRV_PID[i]}" 2>/dev/null || true ;;
    linkdown) ip link set "$VO" up; LINK_DOWN=0 ;;
  esac
  stop_server "$i"
  emit "$($PY "$H" loss-record "$fault" "${SRV_ADDR[i]}" "$rc" "$t_fault" "$t_end" "$TMP/$name.out" \
    "$TMP/$name.errts" "$TMP/$LOSS_REF.out" "$st" "$TMP/srv$i.out")"
}
loss_run sigkill 3 "$((PORT0 + 3))"
loss_run sigstop 4 "$((PORT0 + 4))"
loss_run linkdown 5 "$((PORT0 + 5))"

emit "$($PY -c 'import json,sys,time; print(json.dumps({"kind":"done","out":sys.argv[1],"finished":time.time()}))' "$OUT")"

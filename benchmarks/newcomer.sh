#!/usr/bin/env bash
# What a newcomer meets: clone this repository's HEAD into a temporary folder and run the README's
# two commands there, `bash scripts/main.sh --out <tmp>/run` then `bash scripts/test.sh`, with an
# empty REPLAYBANK_CACHE. Records each command's wall time (the main job's with the bootstrap it
# starts with, and the bootstrap alone: the moment its stamp file was written), the torch threads
# the run chose and why and the seconds of each of its phases (metrics.json), and the 1-minute load average before and after each
# command. Writes benchmarks/results/newcomer.json and prints a table.
#
# Takes 30+ minutes of every CPU: run it on a machine doing nothing else.
#   NEWCOMER_DRY=1   print the commands instead of running them; the JSON goes to the temporary folder
#   NEWCOMER_KEEP=1  keep the temporary folder (clone, run, logs) and print where it is
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out_json="$repo/benchmarks/results/newcomer.json"
dry=${NEWCOMER_DRY:-0}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/newcomer.XXXXXX")
if [ "${NEWCOMER_KEEP:-0}" = 1 ]; then
  echo "keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
[ "$dry" = 1 ] && out_json="$tmp/newcomer.json"

now() { date +%s.%N; }
load1() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo null; }
# run LOG CMD...: CMD in the clone, its output to LOG; prints nothing, returns CMD's status
run() {
  local log=$1
  shift
  if [ "$dry" = 1 ]; then
    echo "+ (cd $tmp/clone && $*) >$log 2>&1"
    return 0
  fi
  (cd "$tmp/clone" && "$@") >"$log" 2>&1
}

commit=$(git -C "$repo" rev-parse HEAD)
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "note: uncommitted changes in $repo are not in the clone (HEAD $commit)" >&2
fi
if [ "$dry" = 1 ]; then
  echo "+ git clone --quiet $repo $tmp/clone"
else
  git clone --quiet "$repo" "$tmp/clone" || exit 1
fi
export REPLAYBANK_CACHE="$tmp/cache"  # a newcomer's cache is empty: GGUF conversion, suite answers, self rows

main_load_before=$(load1)
t0=$(now)
run "$tmp/main.log" bash scripts/main.sh --out "$tmp/run"
main_rc=$?
t1=$(now)
main_load_after=$(load1)
stamp="$tmp/clone/.venv/.replaybank-stamp-main"  # the main job installs its own, smaller set
bootstrap_end=$( [ -f "$stamp" ] && date -r "$stamp" +%s.%N || echo "")

test_load_before=$(load1)
t2=$(now)
run "$tmp/test.log" bash scripts/test.sh
test_rc=$?
t3=$(now)
test_load_after=$(load1)
stamp_all="$tmp/clone/.venv/.replaybank-stamp-all"  # the test command installs the rest
test_boot_end=$( [ -f "$stamp_all" ] && date -r "$stamp_all" +%s.%N || echo "")

for step in main test; do
  rc_var=${step}_rc
  if [ "${!rc_var}" != 0 ]; then
    echo "$step command failed (exit ${!rc_var}); its last lines:" >&2
    tail -n 20 "$tmp/$step.log" >&2
  fi
done

NC_COMMIT=$commit NC_CPUS=$(nproc 2>/dev/null || echo null) NC_DRY=$dry NC_OUT="$out_json" NC_RUN="$tmp/run" \
NC_T0=$t0 NC_T1=$t1 NC_T2=$t2 NC_T3=$t3 NC_BOOT_END=$bootstrap_end NC_TEST_BOOT_END=$test_boot_end NC_MAIN_RC=$main_rc NC_TEST_RC=$test_rc \
NC_MAIN_LB=$main_load_before NC_MAIN_LA=$main_load_after NC_TEST_LB=$test_load_before NC_TEST_LA=$test_load_after \
python3 - <<'EOF'
import json
import os
import time
from pathlib import Path

e = os.environ


def num(name):
    v = e.get(name, "")
    return None if v in ("", "null") else float(v)


t0, t1, t2, t3, boot_end, test_boot_end = (num(k) for k in ("NC_T0", "NC_T1", "NC_T2", "NC_T3", "NC_BOOT_END", "NC_TEST_BOOT_END"))
metrics_file = Path(e["NC_RUN"]) / "metrics.json"
metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
env = metrics.get("environment", {})
bootstrap = round(boot_end - t0, 1) if boot_end is not None and t0 <= boot_end <= t1 else None
result = {
    "commit": e["NC_COMMIT"],
    "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0)),
    "cpus": int(e["NC_CPUS"]) if e["NC_CPUS"].isdigit() else None,
    "dry_run": e["NC_DRY"] == "1",
    "main": {
        "command": "bash scripts/main.sh --out <tmp>/run",
        "exit_code": int(e["NC_MAIN_RC"]),
        "seconds": round(t1 - t0, 1),
        "bootstrap_seconds": bootstrap,
        "run_seconds": round(t1 - boot_end, 1) if bootstrap is not None else None,
        "inside_run_seconds": metrics.get("wall_seconds"),
        "loadavg_1min_before": num("NC_MAIN_LB"),
        "loadavg_1min_after": num("NC_MAIN_LA"),
        "loadavg_1min_run_start": env.get("loadavg_1min_start"),
        "torch_threads": env.get("threads"),
        "thread_choice": env.get("thread_choice"),
        "arm_processes": env.get("arm_processes"),
        "phase_seconds": metrics.get("timings"),
    },
    "test": {
        "command": "bash scripts/test.sh",
        "exit_code": int(e["NC_TEST_RC"]),
        "seconds": round(t3 - t2, 1),
        "bootstrap_seconds": round(test_boot_end - t2, 1) if test_boot_end is not None and t2 <= test_boot_end <= t3 else None,
        "loadavg_1min_before": num("NC_TEST_LB"),
        "loadavg_1min_after": num("NC_TEST_LA"),
    },
}
out = Path(e["NC_OUT"])
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(result, indent=2) + "\n")

m, t = result["main"], result["test"]
choice = m["thread_choice"] or {}
print(f"\nnewcomer at {result['commit'][:10]}, {result['cpus']} CPUs, {result['date_utc']} UTC"
      f"{' (dry run: nothing ran)' if result['dry_run'] else ''}")
print(f"{'command':<40} {'exit':>4} {'seconds':>8} {'load before':>11} {'load after':>10}")
print(f"{m['command']:<40} {m['exit_code']:>4} {m['seconds']:>8} {m['loadavg_1min_before']!s:>11} {m['loadavg_1min_after']!s:>10}")
print(f"{'  of which the bootstrap':<40} {'':>4} {m['bootstrap_seconds']!s:>8}")
print(f"{'  of which replaybank run':<40} {'':>4} {m['run_seconds']!s:>8} {m['loadavg_1min_run_start']!s:>11}")
print(f"{t['command']:<40} {t['exit_code']:>4} {t['seconds']:>8} {t['loadavg_1min_before']!s:>11} {t['loadavg_1min_after']!s:>10}")
print(f"{'  of which the bootstrap (the rest)':<40} {'':>4} {t['bootstrap_seconds']!s:>8}")
print(f"torch threads: {m['torch_threads']} ({choice.get('reason', 'no metrics.json')})")
print(f"arm processes: {(m['arm_processes'] or {}).get('processes')} ({(m['arm_processes'] or {}).get('reason')})")
print(f"wrote {out}")
EOF
[ "$main_rc" = 0 ] && [ "$test_rc" = 0 ]

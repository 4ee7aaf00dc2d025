#!/bin/sh
# Start-up cost of llmhost commands (a benchmark, not a test; see docs/benchmarks.md):
# the median over RUNS runs of the wall time and the peak resident set (GNU time's "Maximum
# resident set size") of
#   llmhost --version | list | explain CONFIG | resolve CONFIG
# for each BUILD_DIR given (e.g. one with the CUDA half linked eagerly and one that loads it
# on demand), with the device as DEVICE says (LLMHOST_DEVICE; default cpu, the CPU-only case;
# auto probes CUDA, which loads the CUDA library where there is one).
#   sh tools/bench/startup_bench.sh [-n RUNS] [-d DEVICE] [-c CONFIG] BUILD_DIR...
# Prints one table row per build and command: build, command, median ms, median max-RSS MB.
set -eu
RUNS=9
DEVICE=cpu
CONFIG=$(cd "$(dirname "$0")/../.." && pwd)/tests/fixtures/configs/llama-3.1-405b
while getopts n:d:c: o; do
    case $o in
    n) RUNS=$OPTARG ;;
    d) DEVICE=$OPTARG ;;
    c) CONFIG=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-n RUNS] [-d DEVICE] [-c CONFIG] BUILD_DIR..." >&2; exit 2; }
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "$0: needs GNU time at $TIME" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf '%-28s %-10s %10s %12s\n' build command wall_ms max_rss_MB
for b in "$@"; do
    exe=$b/host/llmhost
    [ -x "$exe" ] || { echo "$0: $exe not found" >&2; exit 2; }
    for cmd in --version list explain resolve; do
        case $cmd in
        # the flag, not only LLMHOST_DEVICE: explain's device section probes CUDA unless the
        # run config itself names the CPU
        explain) set -- "$cmd" "$CONFIG" --device "$DEVICE" ;;
        resolve) set -- "$cmd" "$CONFIG" ;;
        *) set -- "$cmd" ;;
        esac
        : >"$tmp/ms"
        : >"$tmp/kb"
        i=0
        while [ $i -lt "$RUNS" ]; do
            LLMHOST_DEVICE=$DEVICE LLMHOST_LOG=error "$TIME" -f '%e %M' -o "$tmp/t" \
                "$exe" "$@" >/dev/null 2>&1 || { echo "$0: $exe $* failed" >&2; exit 1; }
            # %e has 10 ms resolution: time the run again with date for ms
            s=$(date +%s%N)
            LLMHOST_DEVICE=$DEVICE LLMHOST_LOG=error "$exe" "$@" >/dev/null 2>&1
            e=$(date +%s%N)
            echo $(((e - s) / 1000000)) >>"$tmp/ms"
            awk '{print $2}' "$tmp/t" >>"$tmp/kb"
            i=$((i + 1))
        done
        printf '%-28s %-10s %10s %12.1f\n' "$(basename "$b")" "$cmd" "$(median <"$tmp/ms")" \
            "$(median <"$tmp/kb" | awk '{print $1 / 1024}')"
    done
done

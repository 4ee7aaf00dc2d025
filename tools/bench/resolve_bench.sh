#!/bin/sh
# Benchmark (not a test): cost of `llmhost resolve` with 200 plugin files present, lazy (the
# custom dir has an arch_index.tsv with 200 model rows: one plugin is loaded) against eager
# (the same 200 files without an index: every plugin is loaded at declaration).
# Reports the median wall time of N runs and the files opened (strace, openat/open calls).
#
#   sh tools/bench/resolve_bench.sh [BUILD_DIR] [RUNS]
set -eu
BUILD=${1:-build}
RUNS=${2:-21}
LLMHOST="$BUILD/host/llmhost"
PLUGIN="$BUILD/tests/plugins/libmodel_bench.so"
[ -x "$LLMHOST" ] && [ -f "$PLUGIN" ] || { echo "build first: make build" >&2; exit 2; }
command -v strace >/dev/null || { echo "needs strace (apt-get install strace)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -m 755 "$work/lazy" "$work/eager" "$work/model"
printf '#llmhost-arch-index\t1\n#kind\tname\tshared_object\n' > "$work/lazy/arch_index.tsv"
i=0
while [ $i -lt 200 ]; do
    n=$(printf '%03d' $i)
    cp "$PLUGIN" "$work/lazy/libmodel_bench_$n.so"
    cp "$PLUGIN" "$work/eager/libmodel_bench_$n.so"
    printf 'model\tBench_libmodel_bench_%s\tlibmodel_bench_%s.so\n' "$n" "$n" >> "$work/lazy/arch_index.tsv"
    i=$((i + 1))
done
chmod 755 "$work"/lazy/*.so "$work"/eager/*.so
cat > "$work/model/config.json" <<'JSON'
{"architectures": ["Bench_libmodel_bench_123"], "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256}
JSON

now_ns() { date +%s%N; }

measure() { # label dir
    label=$1
    dir=$2
    times=""
    r=0
    while [ $r -lt "$RUNS" ]; do
        t0=$(now_ns)
        "$LLMHOST" resolve "$work/model" --custom-module-dir "$dir" --json > "$work/out.json"
        t1=$(now_ns)
        times="$times $(( (t1 - t0) / 1000 ))"
        r=$((r + 1))
    done
    median=$(echo $times | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    strace -f -qq -e trace=open,openat -o "$work/trace" \
        "$LLMHOST" resolve "$work/model" --custom-module-dir "$dir" --json > /dev/null
    opens=$(grep -c 'open' "$work/trace" || true)
    plugin_opens=$(grep -c "$dir/libmodel_bench_" "$work/trace" || true)
    loaded=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['loaded_plugins']))" "$work/out.json")
    printf '%-6s median %7.2f ms over %d runs; open calls %4d (plugin files %3d); plugins loaded %3d\n' \
        "$label" "$(echo "$median" | awk '{print $1/1000}')" "$RUNS" "$opens" "$plugin_opens" "$loaded"
}

echo "llmhost resolve, 200 model rows / 200 plugin files ($(nproc) cores, $(uname -m))"
measure lazy "$work/lazy"
measure eager "$work/eager"

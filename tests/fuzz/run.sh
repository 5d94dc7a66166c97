#!/bin/sh
# run.sh SECONDS [TARGET...] - run the libFuzzer harnesses of a build tree
# configured with --enable-fuzz, each for SECONDS, BT_FUZZ_JOBS at a time
# (default: the number of CPUs). Each target starts from its committed seed
# corpus (tests/fuzz/corpus/T) plus what earlier runs found
# ($BT_BUILDDIR/fuzz/corpus/T, which is where new inputs go). Prints one
# line per target (execs, coverage, features) and exits 1 if any target
# crashed, with the artifact's path; a target whose inputs are missing
# (fuzz_tokenizer without BT_SHARED models) is reported as skipped.
set -u
secs=${1:-20}; shift 2>/dev/null || true
src=${BT_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bld=${BT_BUILDDIR:-$(pwd)}
shared=${BT_SHARED:-$src/../shared}
jobs=${BT_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
targets=${*:-"gguf llama2c llama2c_tok request inject tokenizer trace safetensors hf reply numerics spm_model"}
work=$bld/fuzz
mkdir -p "$work/logs" "$work/artifacts"

run_one() {   # run_one TARGET
    t=$1 bin=$bld/tests/fuzz/fuzz_$1 log=$work/logs/$1.log
    if [ ! -x "$bin" ]; then echo "$t: not built" >"$log.status"; return; fi
    if [ "$t" = tokenizer ] && [ ! -f "$shared/models/llama2c/tok512.bin" ]; then
        echo "skip" >"$log.status"; return
    fi
    mkdir -p "$work/corpus/$t"
    # per-target options: the trace commands print a lot; a trace input
    # needs room for a few SQLite pages
    opts="-max_len=65536"
    case $t in
        trace) opts="-max_len=262144 -close_fd_mask=3" ;;
        tokenizer|request|inject|reply|numerics) opts="-max_len=4096" ;;
    esac
    seeds=$src/tests/fuzz/corpus/$t
    if [ "$t" = trace ]; then
        # an input is a selector byte (which command) + a trace file: the
        # committed seeds are plain traces, given here under every selector
        seeds=$work/seeds/trace
        mkdir -p "$seeds"
        for f in "$src/tests/fuzz/corpus/trace/"*; do
            s=0
            while [ $s -lt 13 ]; do
                { printf "\\$(printf %03o $s)"; cat "$f"; } >"$seeds/$(basename "$f").$s"
                s=$((s + 1))
            done
        done
    fi
    BT_SHARED=$shared ASAN_OPTIONS=${ASAN_OPTIONS_FUZZ:-detect_leaks=1:abort_on_error=1} \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$bin" $opts -max_total_time="$secs" -timeout=25 -rss_limit_mb=3072 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/$t-" "$work/corpus/$t" "$seeds" >"$log" 2>&1
    echo $? >"$log.status"
}

i=0
for t in $targets; do
    rm -f "$work/logs/$t.log.status"
    run_one "$t" &
    i=$((i + 1))
    [ $((i % jobs)) -eq 0 ] && wait
done
wait

rc=0
printf '%-12s %12s %8s %8s  %s\n' target execs cov ft result
for t in $targets; do
    log=$work/logs/$t.log st=$(cat "$work/logs/$t.log.status" 2>/dev/null || echo missing)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" 2>/dev/null | tail -n1)
    last=$(grep -E '^#[0-9]+' "$log" 2>/dev/null | tail -n1)
    cov=$(printf '%s' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(printf '%s' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    case $st in
        0) res=ok ;;
        skip) res="skipped (no $shared/models)" ;;
        *) res="FAILED (exit $st)"; rc=1 ;;
    esac
    printf '%-12s %12s %8s %8s  %s\n' "$t" "${execs:--}" "${cov:--}" "${ft:--}" "$res"
    if [ "$res" != ok ] && [ "$st" != skip ]; then
        grep -E 'ERROR: |runtime error|invariant failed|Test unit written to|SUMMARY' "$log" | head -n 8 | sed 's/^/    /'
        echo "    log: $log"
    fi
done
exit $rc

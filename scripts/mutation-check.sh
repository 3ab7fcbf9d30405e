#!/usr/bin/env bash
# Mutation check: does the test suite catch small, realistic bugs? Run by hand, not in CI.
#
# For each mutation of the list below (one literal replacement in one source line), in a scratch
# copy of the working tree (never the checkout itself): apply it, rebuild incrementally (ccache),
# run the GoogleTest binary (two shards in parallel, OMP_NUM_THREADS=1 each, as CTest does), and
# record which tests failed. A mutation is "killed" when at least one test fails (or the run
# times out), "SURVIVED" otherwise. The table goes to stdout and to $WORK/report.md; the
# recorded run is in docs/testing.md.
#
# Usage: scripts/mutation-check.sh [ID...]        (default: every mutation)
# Env:   PLDR_MUT_WORK    scratch directory (default build-mutation/, ignored by git; under the
#                         repository so that ccache's base_dir shares the unchanged objects)
#        PLDR_CPU_LOCK    lock taken around each build and test run (default /tmp/pldr-cpu.lock)
#        PLDR_MUT_TIMEOUT seconds allowed for one test run (default 1200)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mkdir -p "${PLDR_MUT_WORK:-build-mutation}" && cd "${PLDR_MUT_WORK:-build-mutation}" && pwd)
LOCK=${PLDR_CPU_LOCK:-/tmp/pldr-cpu.lock}
TIMEOUT=${PLDR_MUT_TIMEOUT:-1200}

# id @@ file @@ original text (must occur exactly once) @@ replacement @@ what it breaks
# (lines starting with # are comments)
MUTATIONS=$(cat <<'EOF'
# The first six are the bugs that survived the suite before (issue 18).
infer-roll-eos @@ src/infer/score.cpp @@ inp[size_t(j)] = t < 0 ? eos_id : tokens[size_t(t)]; @@ inp[size_t(j)] = t < start ? eos_id : tokens[size_t(t)]; @@ rolling windows conditioned on EOS instead of the previous tokens
infer-trunc-plus @@ src/infer/score.cpp @@ std::max<int64_t>(0, whole - L); @@ std::max<int64_t>(0, whole - L + 1); @@ left truncation cuts one token too many
infer-trunc-minus @@ src/infer/score.cpp @@ std::max<int64_t>(0, whole - L); @@ std::max<int64_t>(0, whole - L - 1); @@ left truncation cuts one token too few
infer-gen-eos @@ src/infer/generate.cpp @@ if (opt.stop_at_eos && id == m.cfg.eos_token_id) break; @@ if (opt.stop_at_eos && id == m.cfg.eos_token_id) continue; @@ generation never stops at EOS
infer-cli-eos @@ tools/pldr/cmd_generate.cpp @@ opt.stop_at_eos = !a.no_eos_stop; @@ opt.stop_at_eos = false; @@ pldr generate never stops at EOS
model-exact-dk @@ src/model/model.cpp @@ return T(std::sqrt(double(cfg.head_dim))); @@ return T(std::sqrt(double(cfg.hidden_size))); @@ --numerics exact scales the scores by sqrt(d), not sqrt(dk)
infer-roll-prefix @@ src/infer/score.cpp @@ inp[size_t(j)] = t < 0 ? eos_id : tokens[size_t(t)]; @@ inp[size_t(j)] = t < 0 ? tokens[0] : tokens[size_t(t)]; @@ first rolling window starts from the first token, not EOS
infer-roll-last @@ src/infer/score.cpp @@ const int64_t S = start == 0 ? len : L; @@ const int64_t S = start == 0 ? len : len; @@ short last rolling window sees only the previous token
infer-seq-prefix @@ src/infer/score.cpp @@ prefix(inp.begin(), inp.begin() + i); @@ prefix(inp.begin(), inp.begin() + i + 1); @@ sequential scoring's prefix includes the scored token
infer-greedy-flag @@ src/infer/score.cpp @@ r.is_greedy = r.is_greedy && r.argmax_ids[k] @@ r.is_greedy = r.is_greedy || r.argmax_ids[k] @@ is_greedy true whenever nothing fails first
infer-cached-feed @@ src/infer/score.cpp @@ lg = &s.decode(inp[size_t(i)]); @@ lg = &s.decode(inp[size_t(i - 1)]); @@ cached scoring feeds the wrong token
model-exact-d @@ src/model/model.cpp @@ return T(std::sqrt(double(cfg.hidden_size))); @@ return T(std::sqrt(double(cfg.head_dim))); @@ --numerics exact scales the embeddings by sqrt(dk), not sqrt(d)
infer-kl @@ src/infer/collapse.cpp @@ (la[size_t(v)] - lb[size_t(v)]) @@ (lb[size_t(v)] - la[size_t(v)]) @@ collapse KL with the log ratio reversed
infer-session-pos @@ src/infer/session.cpp @@ a.pos[size_t(s)] = Tp + s; @@ a.pos[size_t(s)] = Tp + s + 1; @@ cached decoding one position ahead
infer-repeat-pen @@ src/infer/sampler.cpp @@ x = x > 0 ? x / r : x * r; @@ x = x > 0 ? x * r : x / r; @@ repetition penalty rewards repeats
audit-eps-g @@ src/audit/stats.cpp @@ return num / rms(x, n); @@ return num / rms(ref, n); @@ eps_G normalised by the cached G, not the recomputed one
io-overlap @@ src/io/safetensors.cpp @@ order[i]->begin < order[i - 1]->end) @@ order[i]->begin < order[i - 1]->begin) @@ overlapping safetensors offsets accepted
io-trailing @@ src/io/safetensors.cpp @@ if (covered != data_size) @@ if (covered > data_size) @@ trailing bytes after the last tensor accepted
io-f16 @@ src/io/safetensors.cpp @@ bits = sign | (exp + 127 - 15) << 23 | man << 13; @@ bits = sign | (exp + 127 - 16) << 23 | man << 13; @@ F16 exponent bias off by one
io-npy-order @@ src/io/npy.cpp @@ 'fortran_order': False @@ 'fortran_order': True @@ npy header claims column-major data
train-adam-bc1 @@ src/train/adamw.cpp @@ 1.0 - std::pow(cfg.beta1, td) @@ 1.0 - std::pow(cfg.beta1, td + 1) @@ AdamW first-moment bias correction off by one step
train-warmup @@ src/train/schedule.cpp @@ return (1.0 / warmup_d) * s; @@ return (1.0 / warmup_d) * (s + 1); @@ warmup starts at lr > 0
train-clip @@ src/train/clip.cpp @@ const T lo = -limit; @@ const T lo = -2 * limit; @@ clip by value is asymmetric
model-causal @@ src/ops/attention.cpp @@ if (j > Tp + i || (key_ids @@ if (j > Tp + i + 1 || (key_ids @@ causal mask lets each position see the next one
model-emb-grad @@ src/model/backward.cpp @@ e[j] += dx0[n * d + j] * scale; @@ e[j] += dx0[n * d + j]; @@ embedding gradient misses the sqrt(d) factor
ops-rope-sign @@ src/ops/rope.cpp @@ v[i0] = x0 * c - x1 * s; @@ v[i0] = x0 * c + x1 * s; @@ RoPE (interleaved) rotates the wrong way
ops-rope-grad @@ src/ops/rope.cpp @@ g1 = d1 * c - d0 * s; @@ g1 = d1 * c + d0 * s; @@ RoPE backward sign (exact numerics)
ops-ce-count @@ src/ops/cross_entropy.cpp @@ ++scored; @@ scored += 2; @@ masked cross-entropy divides by the wrong token count
ops-dag-taylor @@ src/ops/dag_expm.h @@ S(1 / 2.0), S(1 / 6.0), S(1 / 24.0) @@ S(1 / 2.0), S(1 / 6.0), S(1 / 20.0) @@ expm T4 Taylor coefficient
ops-dag-grad @@ src/ops/dag_expm.h @@ const double g = scale * sg * 2.0; @@ const double g = scale * sg; @@ exact DAG gradient halved
ops-ln-eps @@ src/ops/dense.cpp @@ std::sqrt(v + T(eps)) @@ std::sqrt(v + T(10 * eps)) @@ LayerNorm epsilon ×10
ops-glu-swap @@ src/ops/dense.cpp @@ gated[i] = silu(h1[i]) * h2[i] @@ gated[i] = silu(h2[i]) * h1[i] @@ GLU gates the wrong branch
ops-alm-floor @@ src/ops/plga_elementwise.h @@ z * silu(z) + T(1e-9) @@ z * silu(z) + T(1e-8) @@ A_LM floor 1e-8 instead of 1e-9
EOF
)

declare -a IDS FILES OLDS NEWS WHATS
while IFS= read -r line; do
    [[ -z "$line" || "$line" == \#* ]] && continue
    IFS=$'\x1f' read -r id file old new what <<<"$(sed 's/ @@ /\x1f/g' <<<"$line")"
    IDS+=("$id") FILES+=("$file") OLDS+=("$old") NEWS+=("$new") WHATS+=("$what")
done <<<"$MUTATIONS"

want() {  # want ID: is ID selected on the command line?
    local id=$1
    shift
    [ ${#SEL[@]} -eq 0 ] && return 0
    for s in "${SEL[@]}"; do [ "$s" = "$id" ] && return 0; done
    return 1
}
SEL=("$@")

# One literal replacement in FILE (relative to DIR); fails unless OLD occurs exactly once.
apply() {
    /usr/bin/python3 - "$1/$2" "$3" "$4" <<'PY'
import sys
path, old, new = sys.argv[1:4]
s = open(path, encoding="utf-8").read()
n = s.count(old)
if n != 1:
    sys.exit(f"{path}: the original text occurs {n} times (want exactly 1): {old}")
open(path, "w", encoding="utf-8").write(s.replace(old, new))
PY
}

SRC="$WORK/tree"
BUILD="$SRC/build"  # same relative layout as build/ in the checkout: ccache hits
mkdir -p "$SRC" "$BUILD"
echo "== scratch copy of the working tree in $SRC"
# Tracked and untracked (not ignored) files, as they are now in the checkout; only files whose
# content differs are copied (with a new mtime, so that make rebuilds exactly those).
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -f "$f" ] || continue
    if ! cmp -s "$f" "$SRC/$f"; then
        mkdir -p "$SRC/$(dirname "$f")"
        cp "$f" "$SRC/$f"
    fi
done

# Every mutation must apply to the pristine copy (checked before any build).
for i in "${!IDS[@]}"; do
    want "${IDS[$i]}" || continue
    tmp=$(mktemp -d)
    mkdir -p "$tmp/$(dirname "${FILES[$i]}")"
    cp "$SRC/${FILES[$i]}" "$tmp/${FILES[$i]}"
    apply "$tmp" "${FILES[$i]}" "${OLDS[$i]}" "${NEWS[$i]}" || { rm -rf "$tmp"; exit 1; }
    rm -rf "$tmp"
done

# ccache where installed (optional: make's own timestamps already rebuild only the mutated file)
LAUNCHER=()
if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}" \
    -DPLDR_BUILD_BENCH=OFF -DPLDR_FATAL_WARNINGS=OFF >"$WORK/configure.log"  # (a mutation may leave a variable unused)

# Builds, then runs the GoogleTest binary in two shards, all under one hold of the lock.
# Prints "BUILD FAILED", or the failed test names, one per line (nothing: all passed).
build_and_test() {
    local log=$WORK/tests
    rm -f "$log".*
    if ! flock "$LOCK" bash -c '
        cmake --build "'"$BUILD"'" -j2 >"'"$WORK"'/build.log" 2>&1 || exit 1  # kept when it fails
        for k in 0 1; do
            GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$k OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
                timeout '"$TIMEOUT"' "'"$BUILD"'/tests/pldr_tests" --gtest_brief=1 \
                >"'"$log"'.$k" 2>&1 &
        done
        wait
        exit 0'; then
        echo "BUILD FAILED"
        return
    fi
    local failed k
    failed=$(grep -h '^\[  FAILED  \] [A-Za-z0-9_/.]*' "$log".* | sed 's/^\[  FAILED  \] \([^ ,]*\).*/\1/' |
        grep -v '^[0-9]' | sort -u || true)
    # A shard that crashed or timed out never prints its summary.
    for k in 0 1; do
        grep -q '^\[  PASSED  \]' "$log.$k" 2>/dev/null ||
            failed=$(printf '%s\n%s' "$failed" "(shard $k crashed or timed out)" | sed '/^$/d')
    done
    printf '%s\n' "$failed"
}

echo "== baseline build and tests"
base=$(build_and_test)
if [ "$base" = "BUILD FAILED" ]; then
    echo "baseline build failed, see $WORK/build.log" >&2
    exit 1
elif [ -n "$base" ]; then
    echo "baseline tests fail (fix them first):" >&2
    echo "$base" >&2
    exit 1
fi

REPORT="$WORK/report.md"
{
    echo "| id | file | mutation | result | tests that caught it |"
    echo "|---|---|---|---|---|"
} >"$REPORT"
killed=0 total=0
for i in "${!IDS[@]}"; do
    id=${IDS[$i]} file=${FILES[$i]}
    want "$id" || continue
    total=$((total + 1))
    echo "== [$total] $id: ${WHATS[$i]}"
    cp "$SRC/$file" "$WORK/pristine"
    apply "$SRC" "$file" "${OLDS[$i]}" "${NEWS[$i]}"
    caught=$(build_and_test)
    if [ "$caught" = "BUILD FAILED" ]; then
        result="build fails" caught="(does not compile: not a valid mutation)"
    else
        if [ -n "$caught" ]; then
            result="killed" killed=$((killed + 1))
        else
            result="SURVIVED"
        fi
    fi
    cp "$WORK/pristine" "$SRC/$file"  # restore
    n=$(grep -c . <<<"$caught" || true)
    short=$(head -n 6 <<<"$caught" | sed ':a;N;$!ba;s/\n/, /g')
    [ "$n" -gt 6 ] && short="$short, … ($n tests)"
    echo "   $result: $short"
    printf '| %s | `%s` | %s | %s | %s |\n' "$id" "$file" "${WHATS[$i]}" "$result" "$short" >>"$REPORT"
done
echo
cat "$REPORT"
echo
echo "mutations killed: $killed of $total (report: $REPORT)"
[ "$killed" -eq "$total" ]

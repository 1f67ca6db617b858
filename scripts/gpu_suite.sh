#!/usr/bin/env bash
# The GPU suite for the lent 2xH200 (or any 2+ GPU box): GPU-marked tests, then the benchmarks.
#   [NPROC=N] scripts/gpu_suite.sh [env|tests|shared|profile|gemm|bench|layers|mlp|gpt|gpt-nosp|inference|overlap|limit|limit-unaligned|limit-rs|models|allreduce|norm|graphs|trace|all ...]  (default: all)
# The world size (TP) is NPROC, by default every GPU torch sees: each torchrun part runs NPROC ranks,
# the profiler profiles at TP=NPROC, and the GPU tests that work at any size run on NPROC GPUs
# (FLUXLITE_GPU_RANKS; tests/test_world_sizes.py runs them when it is over 2); the others keep their 2.
# overlap: fluxlite-profile of the llama3-70b preset at TP=NPROC (8192 tokens), with --tune: table, JSON,
# CSV and PNG in $OUT/overlap_llama3_70b/, and the dispatch cache it filled in $OUT/dispatch_cache/.
# On a one-GPU machine, FLUXLITE_GPU_SHARE=1 runs the 2-rank GPU tests with both ranks on that GPU
# (CUDA IPC; correctness only, timings mean nothing; docs/testing.md). shared: the ops' GPU tests at
# twice NPROC ranks, two on each GPU.
# Each part is bounded; `tests` runs one bounded pytest per GPU test file (GPU_TEST_FILE_S, default
# 420 s), from four GPUs on in lanes of two GPUs at once (logs: $OUT/tests/): in shared mode on one
# H100 the files took about 15 minutes in all, more than one device call allows, so give a device
# call a subset: GPU_TESTS="tests/test_gpu_fused.py ...".
# The other parts take about 10 minutes on 2xH200 (at larger NPROC, run the parts one by one).
# Carry megatron-core's cp312 wheel in .whl/ (device tool: carry [".whl"]) for the Megatron GPU tests
# (MEGATRON_WHEELS=DIR takes the wheel from DIR instead, e.g. another megatron-core version's),
# and the layer baseline: with no network it is installed from there to /tmp/site. Logs and JSON go
# to $OUT (the device tool's output folder) or ./gpu_out.
set -uo pipefail
cd "$(dirname "$0")/.."
# Never NVLink multicast on the shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
wheels="${MEGATRON_WHEELS:-.whl}"
if compgen -G "$wheels/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
OUT="${OUT:-$PWD/gpu_out}"
NPROC="${NPROC:-$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null)}"
if ! [[ $NPROC =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu_suite.sh: no GPU count (NPROC='$NPROC'); set NPROC=N" >&2
  exit 2
fi
export FLUXLITE_GPU_RANKS="$NPROC"
echo "gpu_suite.sh: world size $NPROC"
mkdir -p "$OUT"
parts=("${@:-all}")
want() { for p in "${parts[@]}"; do [[ $p == all || $p == "$1" ]] && return 0; done; return 1; }
status=0
# Clocks and power once a second, to read power throttling next to the timings.
nvidia-smi dmon -s pc -d 1 > "$OUT/dmon.log" 2>&1 &
dmon=$!
trap 'kill $dmon 2>/dev/null' EXIT

if want env; then
  nvidia-smi -L
  nvidia-smi topo -m 2>/dev/null | head -5
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
fi
if want tests; then
  # One bounded pytest per file: a slow or stuck file costs its own bound, not the rest of the run.
  # From four GPUs on, the files run in lanes of two GPUs each, the lanes at once (their tests take
  # two ranks), and tests/test_world_sizes.py, whose GPU cases take every GPU, alone after them.
  mkdir -p "$OUT/tests"
  files=(${GPU_TESTS:-$(grep -l "mark.gpu" tests/test_*.py)})
  IFS=, read -ra gpu_ids <<< "${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((NPROC - 1)))}"
  lanes=$(( NPROC >= 4 && ${#gpu_ids[@]} >= 4 ? ${#gpu_ids[@]} / 2 : 1 ))
  paired=() whole=()
  for file in "${files[@]}"; do
    if (( lanes > 1 )) && [[ $file == tests/test_world_sizes.py ]]; then whole+=("$file"); else paired+=("$file"); fi
  done
  test_file() {  # FILE: its log in $OUT/tests/NAME.log, its exit status in NAME.rc, a line here
    local name; name=$(basename "$1" .py)
    timeout "${GPU_TEST_FILE_S:-420}" python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 "$1" \
      > "$OUT/tests/$name.log" 2>&1
    echo $? > "$OUT/tests/$name.rc"
    echo "$name: $(tail -1 "$OUT/tests/$name.log")"
  }
  pids=()
  for ((lane = 0; lane < lanes; lane++)); do
    (
      if (( lanes > 1 )); then
        export CUDA_VISIBLE_DEVICES="${gpu_ids[2 * lane]},${gpu_ids[2 * lane + 1]}" FLUXLITE_GPU_RANKS=2
      fi
      for ((i = lane; i < ${#paired[@]}; i += lanes)); do test_file "${paired[i]}"; done
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for file in "${whole[@]}"; do test_file "$file"; done
  : > "$OUT/gpu_tests.log"
  for file in "${files[@]}"; do
    name=$(basename "$file" .py)
    cat "$OUT/tests/$name.log" >> "$OUT/gpu_tests.log"
    rc=$(cat "$OUT/tests/$name.rc" 2>/dev/null || echo 1)
    [[ $rc == 5 ]] || status=$((status | rc))  # 5: pytest selected no test in the file
  done
fi
if want shared; then
  # Twice as many ranks as GPUs, two on each (CUDA IPC between the ranks of one GPU): the ops' GPU tests
  # that run at any world size (tests/test_world_sizes.py), where a copy between two ranks of one GPU
  # may run on its SMs, which the spinning kernels of a fused call must leave it.
  FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=$((2 * NPROC)) timeout "${GPU_TEST_FILE_S:-420}" \
    python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3 tests/test_world_sizes.py \
    -k "at_every_gpu and (fused_shapes or gemm_ar or missing_peer)" 2>&1 \
    | tee "$OUT/gpu_tests_shared.log" | tail -4
  status=$((status | PIPESTATUS[0]))
fi
if want profile; then
  timeout 180 torchrun --standalone --nproc-per-node "$NPROC" scripts/profile_host.py --top 18 2>&1 | tee "$OUT/profile_host.log" \
    | grep -v '^W1' | head -30
  status=$((status | PIPESTATUS[0]))
fi
if want gemm; then
  timeout 100 python3 scripts/bench_gemm.py --out "$OUT/bench_gemm.json" 2>&1 | tee "$OUT/bench_gemm.log" | tail -8
  status=$((status | PIPESTATUS[0]))
fi
# layers: the Llama block step against Megatron's layers; mlp: its MLP half alone (no attention, so the
# layers' share of the step is larger). megatron: the same block with megatron-core's layers (needs its
# wheel in .whl/), the baseline; deferred: the block with norms folded into QKV and fc1 (SwiGLU in fc1's
# epilogue, or not)
for part in layers mlp; do
  want "$part" || continue
  modes=sequential,fused,auto; block=mlp; out=bench_layers_mlp
  [[ $part == layers ]] && modes=$modes,deferred,deferred-unfused-act block=transformer out=bench_layers
  python3 -c "import megatron.core" 2>/dev/null && modes=megatron,$modes
  timeout 300 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_layers.py --block "$block" --modes "$modes" \
    --out "$OUT/$out.json" 2>&1 | tee "$OUT/$out.log" | grep -v '^W1' | tail -6
  status=$((status | PIPESTATUS[0]))
done
# gpt: a whole GPTModel step, fluxlite's layers against Megatron's own (needs .whl), sequence parallel;
# gpt-nosp: the same without sequence parallelism (the Row forward runs GEMM-AllReduce)
for part in gpt gpt-nosp; do
  want "$part" || continue
  if python3 -c "import megatron.core" 2>/dev/null; then
    extra=(); [[ $part == gpt-nosp ]] && extra=(--no-sequence-parallel)
    timeout 400 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_gpt.py "${extra[@]}" \
      --out "$OUT/bench_$part.json" 2>&1 | tee "$OUT/bench_$part.log" | grep -v '^W1' | tail -8
    status=$((status | PIPESTATUS[0]))
  else
    echo "gpu_suite.sh $part: megatron-core is not importable (carry its wheel in .whl/)" >&2
    status=1
  fi
done
if want inference; then  # the TP decoder stack under CUDA graphs: prefill and decode, both decode layouts
  for layout in sp replicated; do
    timeout 240 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_inference.py --layers 2 \
      --decode-layout "$layout" --out "$OUT/bench_inference_$layout.json" 2>&1 \
      | tee "$OUT/bench_inference_$layout.log" | grep -v '^W1' | tail -32
    status=$((status | PIPESTATUS[0]))
  done
fi
if want norm; then  # norm -> AG-GEMM -> SwiGLU, unfused vs separate vs deferred fully fused
  timeout 200 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_norm_linear.py --out "$OUT/bench_norm_linear.json" \
    2>&1 | tee "$OUT/bench_norm_linear.log" | grep -v '^W1' | tail -7
  status=$((status | PIPESTATUS[0]))
fi
if want overlap; then
  FLUXLITE_CACHE_DIR="$OUT/dispatch_cache" timeout 420 python3 -m fluxlite.profile --model llama3-70b --tp "$NPROC" \
    --tokens 8192 --nproc "$NPROC" --tune --no-progress --out "$OUT/overlap_llama3_70b" 2>&1 \
    | tee "$OUT/overlap_llama3_70b.log" | grep -v '^W1' | tail -16
  status=$((status | PIPESTATUS[0]))
fi
if want limit; then  # where a fused call's time goes against the overlap limit, aligned and unaligned shapes
  timeout 300 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_overlap.py --rounds 5 --out "$OUT/bench_overlap.json" \
    --shapes 8192,8192,14336 8192,8192,5120 16384,8192,4096 ag:6000,5000,7000 rs:6000,7000,5000 ag:3000,5000,3500 \
    rs:7000,4500,7000 ag:2048,8192,7168 2>&1 | tee "$OUT/bench_overlap.log" | grep -v '^W1' | grep '^ag\|^rs'
  status=$((status | PIPESTATUS[0]))
fi
if want limit-unaligned; then  # the same against the limit, at shapes whose N and K are not multiples of 128
  timeout 300 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_overlap.py --rounds 5 \
    --out "$OUT/bench_overlap_unaligned.json" --shapes ag:8192,5184,6976 rs:8192,6976,5184 ag:6144,7232,5440 \
    rs:6144,5440,7232 ag:12288,4160,9664 rs:12288,9664,4160 ag:4096,9280,11072 rs:4096,11072,9280 2>&1 \
    | tee "$OUT/bench_overlap_unaligned.log" | grep -v '^W1' | grep '^ag\|^rs'
  status=$((status | PIPESTATUS[0]))
fi
if want limit-rs; then  # GEMM-RS's matmul consumer, split GEMMs and the copy apart: the preset shapes over 1.03x the
  # limit on 2xH200 (2026-11-27), and the furthest of the shapes off multiples of 128
  timeout 300 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_overlap.py --rounds 5 \
    --out "$OUT/bench_overlap_rs.json" --shapes rs:4096,14336,4096 rs:8192,7168,4096 rs:16384,3072,4096 \
    rs:4096,14784,8192 rs:4096,6144,12288 rs:4096,24576,12288 rs:8192,18432,12288 rs:8192,6144,12288 \
    rs:8192,11832,7184 2>&1 \
    | tee "$OUT/bench_overlap_rs.log" | grep -v '^W1' | grep '^rs'
  status=$((status | PIPESTATUS[0]))
fi
# models: every AG and GEMM-RS shape of four presets (forward and backward) against the limit, fused and
# torch's fused ops only (MODEL_TOKENS: the token counts, default 8192)
if want models; then
  for tokens in ${MODEL_TOKENS:-8192}; do
    for model in llama3-8b llama3-70b qwen2.5-72b gpt3-175b; do
      timeout 300 python3 -m fluxlite.profile --model "$model" --tp "$NPROC" --tokens "$tokens" --nproc "$NPROC" \
        --ops ag,rs --impls fused,torch_symm_mem --rounds 5 --no-progress --out "$OUT/models/${model}_$tokens" 2>&1 \
        | tee "$OUT/models_${model}_$tokens.log" | grep -v '^W1' | tail -12
      status=$((status | PIPESTATUS[0]))
    done
  done
fi
if want allreduce; then  # GEMM-AllReduce at decode (one-shot) and prefill (two-shot) sizes, and auto, three modes
  shapes=()
  for s in 1,14336,8192 8,4096,8192 64,14336,8192 256,4096,8192 2048,14336,8192 8192,4096,8192 4096,5000,7000; do
    shapes+=(--shape "ar:$s")
  done
  FLUXLITE_CACHE_DIR="$OUT/dispatch_cache" timeout 300 python3 -m fluxlite.profile --nproc "$NPROC" --tune --no-progress \
    "${shapes[@]}" --out "$OUT/allreduce" 2>&1 | tee "$OUT/allreduce.log" | grep -v '^W1' | tail -14
  status=$((status | PIPESTATUS[0]))
fi
if want trace; then  # where a fused call's device time goes: kineto timelines of AG, GEMM-RS and GEMM-AllReduce calls
  timeout 240 torchrun --standalone --nproc-per-node "$NPROC" scripts/trace_calls.py --shapes 8192,4096,8192 \
    2048,14336,8192 --out "$OUT/traces" 2>&1 | tee "$OUT/trace_calls.log" | grep '^==\|us per call'
  status=$((status | PIPESTATUS[0]))
fi
if want graphs; then  # fused calls replayed from a CUDA graph vs eager vs sequential (host, latency, throughput)
  timeout 300 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_graphs.py --out "$OUT/bench_graphs.json" 2>&1 \
    | tee "$OUT/bench_graphs.log" | grep -v '^W1' | tail -10
  status=$((status | PIPESTATUS[0]))
fi
if want bench; then
  timeout 300 torchrun --standalone --nproc-per-node "$NPROC" scripts/bench_ops.py --out "$OUT/bench_ops.json" 2>&1 \
    | tee "$OUT/bench_ops.log" | grep -v "^{\|^W1" | tail -24
  status=$((status | PIPESTATUS[0]))
fi
exit $status

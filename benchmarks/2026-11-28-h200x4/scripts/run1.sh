R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
nvidia-smi -L > $R/gpus_all.txt; nvidia-smi topo -m > $R/topo.txt 2>&1
python3 -c "import torch,triton;print(torch.__version__, triton.__version__, torch.cuda.nccl.version(), torch.cuda.device_count())" > $R/env.txt
cat $R/gpus_all.txt $R/env.txt
P="python3 -m pytest -m gpu -q -p no:cacheprovider --durations=3"
export FLUXLITE_GPU_RANKS=2
( export CUDA_VISIBLE_DEVICES=0,1; for f in tests/test_inference_mode.py tests/test_parallel_megatron.py tests/test_parallel_gpu.py; do
  n=$(basename $f .py); timeout 260 $P $f > $R/$n.log 2>&1; echo "$n: $(tail -1 $R/$n.log) at ${SECONDS}s"; done ) &
( export CUDA_VISIBLE_DEVICES=2,3; for f in tests/test_gpu_gemm_ar.py tests/test_gpu_graphs.py; do
  n=$(basename $f .py); timeout 230 $P $f > $R/$n.log 2>&1; echo "$n: $(tail -1 $R/$n.log) at ${SECONDS}s"; done ) &
wait
unset FLUXLITE_GPU_RANKS
timeout $((580 - SECONDS)) python3 -m fluxlite.profile --model llama3-70b --tokens 8192 --nproc 4 --ops ag,rs,ar --impls fused,torch_symm_mem,auto \
  --rounds 7 --tune --time-limit $((550 - SECONDS)) --no-progress --out $R/tp4_llama70b_8192 > $R/tp4_llama70b_8192.log 2>&1
echo "profile rc=$? at ${SECONDS}s"; grep -v '^W1' $R/tp4_llama70b_8192.log | tail -40

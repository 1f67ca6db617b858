#!/bin/bash
# call 1: GPU tests of HEAD (2 GPUs, shared GPU, W=3/4 sharing), graph anatomy.
R=/tmp/r1; S=.scratch/s21
source $S/common.sh
T() { local name=$1 lim=$2; shift 2; echo "== $name" | tee -a $R/tests.log; /usr/bin/time -f "%e s" timeout $lim "$@" >> $R/tests.log 2>&1; echo "rc $? $name" | tee -a $R/tests.log; tail -3 $R/tests.log; }
T gemm_ar 150 python3 -m pytest -m gpu -q -p no:cacheprovider -x tests/test_gpu_gemm_ar.py
T anatomy 120 torchrun --standalone --nproc-per-node 2 $S/graph_anatomy.py
cp $R/tests.log $R/tests.bak
T megatron 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_parallel_megatron.py
T shared_w2_ar 150 env CUDA_VISIBLE_DEVICES=0 FLUXLITE_GPU_SHARE=1 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_ar.py -k "random_shapes or two-shot"
T w3_ar 150 env FLUXLITE_GPU_RANKS=3 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "gemm_ar"
T w4_ar 150 env FLUXLITE_GPU_RANKS=4 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "gemm_ar"

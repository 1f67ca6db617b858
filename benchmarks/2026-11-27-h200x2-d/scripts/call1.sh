#!/usr/bin/env bash
# GEMM-RS breakdown at the shapes furthest from the limit: as shipped, and two consumer variants.
R=/tmp/res23a; source .scratch/s23/common.sh
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'nccl', torch.cuda.nccl.version())" | tee -a $R/gpus.txt
nvidia-smi dmon -s pc -d 1 > $R/dmon.log 2>&1 &
SH="rs:4096,14336,4096 rs:8192,7168,4096 rs:16384,3072,4096 rs:4096,14784,8192 rs:4096,6144,12288 rs:4096,24576,12288 rs:8192,18432,12288 rs:8192,6144,12288 rs:8192,11832,7184"
for v in "" torchblas splits4; do
  VARIANT=$v timeout ${BOUND:-200} torchrun --standalone --nproc-per-node 2 .scratch/s23/bo_variant.py --rounds 5 \
    --out $R/bo_${v:-default}.json --shapes $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/bo_${v:-default}.log
  echo "variant '${v}' rc=${PIPESTATUS[0]} at ${SECONDS}s"; grep '^rs' $R/bo_${v:-default}.log | cut -c1-400
done

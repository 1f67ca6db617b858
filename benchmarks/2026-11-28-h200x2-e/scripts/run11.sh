# on the warm machine of run 10 (its megatron-core in /tmp/site)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD:/tmp/site
timeout 75 torchrun --standalone --nproc-per-node 2 scripts/bench_layers.py --block mlp --modes megatron,fused,auto 2>&1 | grep -iv "warn\|^W1" | tail -4

#!/bin/bash
# call 5: ranks beyond the GPUs on two GPUs; one AG split / two RS splits: GPU tests, A/B against the old tree, replays.
R=/tmp/r5; S=.scratch/s21
source $S/common.sh
export OLD=$PWD/$S/old R
T() { local name=$1 lim=$2; shift 2; echo "== $name" | tee -a $R/tests.log; /usr/bin/time -f "%e s" timeout $lim "$@" >> $R/tests.log 2>&1; echo "rc $? $name" | tee -a $R/tests.log; tail -3 $R/tests.log; }
T mixed_test 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "more_ranks_than_gpus"
T w4_probe 60 torchrun --standalone --nproc-per-node 4 $S/w3_probe.py
T w4_ar 120 env FLUXLITE_GPU_SHARE=1 FLUXLITE_GPU_RANKS=4 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_world_sizes.py -k "gemm_ar"
T fused 150 python3 -m pytest -m gpu -q -p no:cacheprovider --durations=5 tests/test_gpu_fused.py -k "anchor or recurring_eager or pull_calls"
bash $S/ab_profile.sh p --shape ag:4556,2048,768 --shape ag:4096,4096,1792 --shape ag:4096,8192,2560 --shape ag:1024,5120,3000 \
  --shape ag:6000,3000,1500 --shape rs:4096,2048,8192 --shape rs:4096,7168,4096 --shape rs:8192,2048,4096 | tee -a $R/tests.log
python3 $S/summarize_ab.py $R > $R/ab_summary.txt; cat $R/ab_summary.txt
for v in old new; do
  if [ $v = old ]; then D=$OLD; else D=$PWD; fi
  (cd $D && PYTHONPATH=$D:/tmp/site timeout 100 torchrun --standalone --nproc-per-node 2 scripts/bench_graphs.py --rounds 3 --out $R/graphs_$v.json 2>&1 \
    | grep -v '^W1\|Warning\|enable_symm' > $R/graphs_$v.log); echo "graphs $v rc=$? at ${SECONDS}s" | tee -a $R/tests.log
done
T random 130 python3 -m pytest -m gpu -q -p no:cacheprovider "tests/test_gpu_random.py::test_fused_ops_at_random_shapes_match_float32[2]"

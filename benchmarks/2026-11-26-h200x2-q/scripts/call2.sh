#!/usr/bin/env bash
# cuBLASLt algorithms of GEMM-RS's split GEMMs; auto's own record at two small shapes; GPTModel with the output layer swapped.
R=/tmp/res17b; source .scratch/s17/common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
timeout 90 python3 .scratch/s17/lt_algos.py > $R/lt_algos.log 2>&1; echo "lt_algos rc=$?"; grep -c us $R/lt_algos.log
export FLUXLITE_CACHE_DIR=$R/cache
timeout 100 python3 -m fluxlite.profile --tune --nproc 2 --impls sequential,decomposed,fused,auto --rounds 7 --out $R/auto_small --no-progress --time-limit 90 \
  --shape rs:512,4096,4096 --shape ag:256,4096,4096 --shape rs:1024,4096,8192 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto_small.log; echo "auto_small rc=$?"
cp $R/cache/dispatch.json $R/auto_small/ 2>/dev/null
python3 -c "
import json; d=json.load(open('$R/auto_small/profile.json'))
for r in d['rows']:
    a=r.get('auto_vs_best',{}); print(r['op'], r['M'], r['K'], r['N'], 'auto/best tp %.3f lat %.3f' % (a.get('throughput',0), a.get('latency',0)), r['auto'].get('label'), r['auto'].get('modes'))"
unset FLUXLITE_CACHE_DIR
for v in fluxlite megatron; do
  PYTHONPATH=/tmp/site:$PWD timeout 125 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --modes megatron,fused,auto --output-layer $v \
    --out $R/bench_gpt_$v.json 2>&1 | tee $R/bench_gpt_$v.log | grep -v '^W1' | tail -6
done
PYTHONPATH=/tmp/site:$PWD timeout 125 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --modes megatron,fused,auto --no-sequence-parallel \
  --out $R/bench_gpt_nosp.json 2>&1 | tee $R/bench_gpt_nosp.log | grep -v '^W1' | tail -6

#!/usr/bin/env bash
# cuBLASLt without a workspace in the matmul consumers: GPU tests, decode-size GEMMs, and A/B against the previous code.
R=/tmp/res17c; source .scratch/s17/common.sh
timeout 60 python3 .scratch/s17/dec_lt.py > $R/dec_lt.log 2>&1; echo "dec_lt rc=$?"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_cublaslt.py "tests/test_gpu_random.py::test_matmul_consumers_at_random_shapes_match_float32" \
  "tests/test_gpu_fused.py::test_fused_matches_reference_on_anchor_and_ragged_shapes" "tests/test_gpu_gemm_ar.py::test_gemm_ar_fused_at_random_shapes" > $R/tests.log 2>&1
echo "tests rc=$?"; tail -3 $R/tests.log
SH="--shape rs:8192,4096,8192 --shape rs:8192,7168,4096 --shape rs:16384,3072,4096 --shape rs:4096,6144,12288 --shape rs:8192,6976,5184 --shape rs:6144,5440,7232 --shape ag:4096,8192,14784 --shape ag:8192,4096,7168"
for round in 1 2; do for code in old new; do
  if [ $code = old ]; then D=.scratch/old17; else D=.; fi
  left=$((570 - SECONDS)); [ $left -lt 40 ] && break
  (cd $D && PYTHONPATH=$PWD timeout $((left - 5)) python3 -m fluxlite.profile --nproc 2 --impls fused --rounds 5 --no-progress --out $R/ab_${code}_$round $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ab_${code}_$round.log)
  echo "## $code $round at ${SECONDS}s"
  python3 -c "
import json; d=json.load(open('$R/ab_${code}_$round/profile.json'))
for r in d['rows']:
    t=r['times_ms']; print(r['op'], r['M'], r['K'], r['N'], 'fused %.4f limit %.4f fused/limit %.4f gemm %.4f seq %.4f' % (t['fused']['throughput'], t['limit']['throughput'], t['fused']['throughput']/t['limit']['throughput'], t['gemm']['throughput'], t['sequential']['throughput']))"
done; done

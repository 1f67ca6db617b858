#!/usr/bin/env bash
# Long-K shapes: cuBLASLt without a workspace against torch (interleaved), and the fused ops A/B against the previous code.
R=/tmp/res17d; source .scratch/s17/common.sh
timeout 90 python3 .scratch/s17/lt_ab.py > $R/lt_ab.log 2>&1; echo "lt_ab rc=$?"; cat $R/lt_ab.log | grep -v -i warn
SH="--shape rs:4096,14336,8192 --shape rs:8192,14336,8192 --shape rs:4096,28672,8192 --shape rs:16384,14336,4096 --shape ag:4096,8192,5120 --shape ag:8192,8192,28672 --shape ar:4096,8192,8192 --shape rs:8192,2048,4096"
for round in 1 2; do for code in old new; do
  if [ $code = old ]; then D=.scratch/old17; else D=.; fi
  left=$((560 - SECONDS)); [ $left -lt 40 ] && break
  (cd $D && PYTHONPATH=$PWD timeout $((left - 5)) python3 -m fluxlite.profile --nproc 2 --impls fused --rounds 5 --no-progress --out $R/ab_${code}_$round $SH 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/ab_${code}_$round.log)
  echo "## $code $round at ${SECONDS}s"
  python3 -c "
import json; d=json.load(open('$R/ab_${code}_$round/profile.json'))
for r in d['rows']:
    t=r['times_ms']; print(r['op'], r['M'], r['K'], r['N'], 'fused %.4f limit %.4f fused/limit %.4f gemm %.4f seq %.4f' % (t['fused']['throughput'], t['limit']['throughput'], t['fused']['throughput']/t['limit']['throughput'], t['gemm']['throughput'], t['sequential']['throughput']))"
done; done

#!/usr/bin/env bash
# Host cost A/B on one machine: the previous code (c678ed4, .scratch/old) and this code, the same script and shapes.
R=/tmp/res16c; source .scratch/s16/common.sh; export NOPROF=1
S="1,14336,8192 16,4096,4096 256,8192,8192 8,8192,8192 64,3584,5120 1,4096,4096"
for round in 1 2; do
for code in old new; do
  if [ $code = old ]; then P=$PWD/.scratch/old; else P=$PWD; fi
  FLUXLITE_CACHE_DIR=$R/cache_${code}_$round PYTHONPATH=$P timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s16/host_prof.py "$S" > $R/host_prof_${code}_$round.log 2>&1
  echo "## $code $round"; grep -E "^==|^   (latency |throughput)" $R/host_prof_${code}_$round.log | cut -c1-200
done; done
timeout 150 python3 -m pytest -q -m gpu tests/test_profile_cli.py -k llama3 -x > $R/profile_cli.log 2>&1; tail -2 $R/profile_cli.log

R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
OLD=$PWD/benchmarks/2026-11-28-h200x2/scripts/old  # git archive b3dadcd fluxlite | tar -x -C there (not kept here)
SH=12001x1000x7880,8192x4096x8192,16384x2048x4096,8192x14336x8192
SHG=8192x5000x7000,8192x8192x14336
for rep in 1 2; do
for v in old:0:0 new:4:0 new:3:0 new:4:200 new:4:1000 new:3:200; do
  IFS=: read code G B <<< "$v"; TAG=$code$G.b$B
  PP=$PWD; [ $code = old ] && PP=$OLD:$PWD
  PYTHONPATH=$PP:/tmp/site GPPS=$G FLUXLITE_BACKOFF_NS=$B TAG=$TAG SH=$SH timeout 45 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2/scripts/qtime.py 2>&1 | grep -v Warn | grep "us " | tee -a $R/qtime.log
  PYTHONPATH=$PP:/tmp/site GPPS=$G FLUXLITE_BACKOFF_NS=$B TAG=$TAG OP=ag_gelu SH=$SHG timeout 40 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2/scripts/qtime.py 2>&1 | grep -v Warn | grep "us " | tee -a $R/qtime.log
  echo "$TAG at ${SECONDS}s"
done; done
